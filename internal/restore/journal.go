package restore

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// MemoryJournal keeps the journal in memory.
type MemoryJournal struct {
	mu    sync.Mutex
	Steps []string
}

// Completed returns the completed steps.
func (j *MemoryJournal) Completed(context.Context) ([]string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.Steps...), nil
}

// Complete records a completed step.
func (j *MemoryJournal) Complete(_ context.Context, step string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.Steps = append(j.Steps, step)
	return nil
}

// ConfigMapJournal keeps a restore's journal in a ConfigMap of the member cluster
// (rewind-system/restore.<id>), so that `rewind snapshot restore` run again after a crash
// resumes where the first run stopped.
type ConfigMapJournal struct {
	Client    client.Client
	Namespace string
	Name      string
}

// NewConfigMapJournal returns the journal of restoring snapshot to a member.
func NewConfigMapJournal(c client.Client, snapshot string) *ConfigMapJournal {
	name := "restore." + snapshot
	if len(name) > 253 {
		name = name[:253]
	}
	return &ConfigMapJournal{Client: c, Namespace: "rewind-system", Name: name}
}

// Completed returns the completed steps.
func (j *ConfigMapJournal) Completed(ctx context.Context) ([]string, error) {
	cm := &corev1.ConfigMap{}
	err := j.Client.Get(ctx, client.ObjectKey{Namespace: j.Namespace, Name: j.Name}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if s := cm.Data["completed"]; s != "" {
		return strings.Split(s, ","), nil
	}
	return nil, nil
}

// Complete records a completed step.
func (j *ConfigMapJournal) Complete(ctx context.Context, step string) error {
	done, err := j.Completed(ctx)
	if err != nil {
		return err
	}
	done = append(done, step)
	cm := &corev1.ConfigMap{}
	err = j.Client.Get(ctx, client.ObjectKey{Namespace: j.Namespace, Name: j.Name}, cm)
	if apierrors.IsNotFound(err) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: j.Namespace}}
		if err := j.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: j.Name, Labels: map[string]string{"app.kubernetes.io/managed-by": "rewind"}},
			Data:       map[string]string{"completed": strings.Join(done, ",")},
		}
		return j.Client.Create(ctx, cm)
	}
	if err != nil {
		return err
	}
	cm.Data = map[string]string{"completed": strings.Join(done, ",")}
	if err := j.Client.Update(ctx, cm); err != nil {
		return fmt.Errorf("updating the restore journal %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}

// Clear removes the journal once the restore is complete.
func (j *ConfigMapJournal) Clear(ctx context.Context) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: j.Name}}
	if err := j.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

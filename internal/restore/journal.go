package restore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/rewind-dev/rewind/internal/fault"
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

// Completed returns the completed steps. A read that meets a fault is tried again in place.
func (j *ConfigMapJournal) Completed(ctx context.Context) ([]string, error) {
	cm := &corev1.ConfigMap{}
	err := fault.Retry(ctx, tries, func() error {
		return j.Client.Get(ctx, client.ObjectKey{Namespace: j.Namespace, Name: j.Name}, cm)
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the restore journal %s/%s: %w", j.Namespace, j.Name, err)
	}
	if s := cm.Data["completed"]; s != "" {
		return strings.Split(s, ","), nil
	}
	return nil, nil
}

// Complete records a completed step (once: a step on record already is not added again). A
// request that meets a fault is tried again in place, and the whole again on a conflict.
func (j *ConfigMapJournal) Complete(ctx context.Context, step string) error {
	var err error
	for attempt := 0; attempt <= maxConflicts; attempt++ {
		if err = j.complete(ctx, step); !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("updating the restore journal %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}

func (j *ConfigMapJournal) complete(ctx context.Context, step string) error {
	cm := &corev1.ConfigMap{}
	err := fault.Retry(ctx, tries, func() error {
		return j.Client.Get(ctx, client.ObjectKey{Namespace: j.Namespace, Name: j.Name}, cm)
	})
	if apierrors.IsNotFound(err) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: j.Namespace}}
		err := fault.Retry(ctx, tries, func() error { return j.Client.Create(ctx, ns) })
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: j.Name, Labels: map[string]string{"app.kubernetes.io/managed-by": "rewind"}},
			Data:       map[string]string{"completed": step},
		}
		return fault.Retry(ctx, tries, func() error { return j.Client.Create(ctx, cm) })
	}
	if err != nil {
		return err
	}
	var done []string
	if s := cm.Data["completed"]; s != "" {
		done = strings.Split(s, ",")
	}
	if slices.Contains(done, step) {
		return nil
	}
	cm.Data = map[string]string{"completed": strings.Join(append(done, step), ",")}
	return fault.Retry(ctx, tries, func() error { return j.Client.Update(ctx, cm) })
}

// Clear removes the journal once the restore is complete.
func (j *ConfigMapJournal) Clear(ctx context.Context) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: j.Name}}
	if err := j.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

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
	// Key, when set, says whose journal it is (a pull member's agent keys it with the target
	// copy, its revision and its path): a ConfigMap that holds the steps of another key is an
	// earlier restore's journal, read as empty and started over by the first step completed.
	Key string
}

// keyData is the ConfigMap's entry that holds the journal's Key.
const keyData = "key"

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
	return j.steps(cm), nil
}

// steps are the steps cm holds for this journal's key.
func (j *ConfigMapJournal) steps(cm *corev1.ConfigMap) []string {
	if cm.Data[keyData] != j.Key {
		return nil // another restore's
	}
	if s := cm.Data["completed"]; s != "" {
		return strings.Split(s, ",")
	}
	return nil
}

// data is the ConfigMap's content for steps.
func (j *ConfigMapJournal) data(steps []string) map[string]string {
	d := map[string]string{"completed": strings.Join(steps, ",")}
	if j.Key != "" {
		d[keyData] = j.Key
	}
	return d
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
			Data:       j.data([]string{step}),
		}
		return fault.Retry(ctx, tries, func() error { return j.Client.Create(ctx, cm) })
	}
	if err != nil {
		return err
	}
	done := j.steps(cm)
	if slices.Contains(done, step) {
		return nil
	}
	cm.Data = j.data(append(done, step))
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

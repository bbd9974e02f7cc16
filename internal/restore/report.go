package restore

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// KindReport counts what happened to the objects of one kind.
type KindReport struct {
	Restored  int `json:"restored"`
	Created   int `json:"created"`
	Unchanged int `json:"unchanged"`
	Recreated int `json:"recreated"`
	Pruned    int `json:"pruned"`
	Kept      int `json:"kept"`
}

// StepReport says how long a step took.
type StepReport struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration"`
	// Skipped says the journal had it done already.
	Skipped bool `json:"skipped,omitempty"`
}

// Report is the outcome of a restore.
type Report struct {
	Kinds map[string]*KindReport `json:"kinds"`
	Steps []StepReport           `json:"steps"`
	// NoOp says the cluster already equalled the snapshot: nothing was written.
	NoOp bool `json:"noOp"`
	// Kept and Pruned list objects created after the snapshot.
	Kept   []string `json:"kept,omitempty"`
	Pruned []string `json:"pruned,omitempty"`
	// Recreated lists objects deleted and created again, with the reason.
	Recreated []string `json:"recreated,omitempty"`
	// Notes are other things a person should know.
	Notes    []string      `json:"notes,omitempty"`
	Duration time.Duration `json:"duration"`
	mu       sync.Mutex
}

func (r *Report) kind(gvk schema.GroupVersionKind) *KindReport {
	k := gvk.GroupKind().String()
	if r.Kinds[k] == nil {
		r.Kinds[k] = &KindReport{}
	}
	return r.Kinds[k]
}

func (r *Report) count(gvk schema.GroupVersionKind, outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.kind(gvk)
	switch outcome {
	case outRestored:
		k.Restored++
	case outCreated:
		k.Created++
	case outUnchanged:
		k.Unchanged++
	case outRecreated:
		k.Recreated++
	case outPruned:
		k.Pruned++
	case outKept:
		k.Kept++
	}
}

func (r *Report) note(list *[]string, s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*list = append(*list, s)
}

// Totals sums the kinds.
func (r *Report) Totals() KindReport {
	var t KindReport
	for _, k := range r.Kinds {
		t.Restored += k.Restored
		t.Created += k.Created
		t.Unchanged += k.Unchanged
		t.Recreated += k.Recreated
		t.Pruned += k.Pruned
		t.Kept += k.Kept
	}
	return t
}

const (
	outRestored  = "restored"
	outCreated   = "created"
	outUnchanged = "unchanged"
	outRecreated = "recreated"
	outPruned    = "pruned"
	outKept      = "kept"
)

package patch

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// conditionChange is one condition a reconcile set, changed or removed: before is the
// condition as read (nil: added), after as the reconcile left it (nil: removed).
type conditionChange struct {
	typ           string
	before, after *metav1.Condition
}

// conditionChanges are the condition changes of a reconcile, in the order of its conditions.
type conditionChanges []conditionChange

// diffConditions returns what changed from before to after, by condition type.
func diffConditions(before, after []metav1.Condition) conditionChanges {
	var out conditionChanges
	for i := range after {
		a := &after[i]
		b := find(before, a.Type)
		if b == nil || !equality.Semantic.DeepEqual(*a, *b) {
			out = append(out, conditionChange{typ: a.Type, before: b, after: a})
		}
	}
	for i := range before {
		if find(after, before[i].Type) == nil {
			out = append(out, conditionChange{typ: before[i].Type, before: &before[i]})
		}
	}
	return out
}

// apply returns latest (a fresh read's conditions) with the changes applied, three-way: a
// condition that latest holds as the reconcile read it takes the reconcile's change; one that
// latest already holds as the reconcile wants it is kept (with its own LastTransitionTime);
// one another writer changed to something else (or removed, while the reconcile changed it) is
// a conflict. Conditions the reconcile did not change are kept as latest has them.
func (cs conditionChanges) apply(latest []metav1.Condition) ([]metav1.Condition, error) {
	out := make([]metav1.Condition, len(latest))
	copy(out, latest)
	for _, c := range cs {
		l := find(out, c.typ)
		switch {
		case c.after == nil: // removed
			if l != nil && !sameState(l, c.before) {
				return nil, fmt.Errorf("condition %s, which this reconcile removed, was changed by another writer (now %s, %s)", c.typ, l.Status, l.Reason)
			}
			out = remove(out, c.typ)
		case l != nil && sameState(l, c.after):
			// Already as wanted.
		case c.before == nil && l != nil:
			return nil, fmt.Errorf("condition %s, which this reconcile added, was added by another writer meanwhile (%s, %s)", c.typ, l.Status, l.Reason)
		case c.before != nil && l == nil:
			return nil, fmt.Errorf("condition %s, which this reconcile changed, was removed by another writer", c.typ)
		case c.before != nil && !equality.Semantic.DeepEqual(*l, *c.before):
			return nil, fmt.Errorf("condition %s, which this reconcile changed, was changed by another writer (now %s, %s)", c.typ, l.Status, l.Reason)
		case l != nil:
			*l = *c.after
		default:
			out = append(out, *c.after)
		}
	}
	return out, nil
}

// sameState says whether two conditions say the same (LastTransitionTime aside).
func sameState(a, b *metav1.Condition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message && a.ObservedGeneration == b.ObservedGeneration
}

func find(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

func remove(conds []metav1.Condition, typ string) []metav1.Condition {
	out := conds[:0]
	for _, c := range conds {
		if c.Type != typ {
			out = append(out, c)
		}
	}
	return out
}

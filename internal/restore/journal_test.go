//go:build !unit

package restore_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// A keyed ConfigMap journal (a pull member's agent keys it with the copy, its revision and its
// path) holds one restore's steps: a journal of another key reads as empty and starts over
// with its first step, so a later restore never skips a step an earlier one did; a journal of
// the same key resumes; an unkeyed journal (the CLI's) reads its steps as before; Clear
// removes it.
func TestConfigMapJournalKey(t *testing.T) {
	ctx := t.Context()
	c := testenv.Member(t, env.Members[0]).Client
	ns := "journal-key" // created by the journal's first step, as rewind-system is
	j := func(key string) *restore.ConfigMapJournal {
		return &restore.ConfigMapJournal{Client: c, Namespace: ns, Name: "restore-journal.t", Key: key}
	}
	completed := func(j *restore.ConfigMapJournal) []string {
		t.Helper()
		got, err := j.Completed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	if got := completed(j("uid-1/2/Restore")); len(got) != 0 {
		t.Fatalf("no journal yet: got %v", got)
	}
	complete := func(j *restore.ConfigMapJournal, steps ...string) {
		t.Helper()
		for _, s := range steps {
			if err := j.Complete(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	complete(j("uid-1/2/Restore"), restore.StepQuiesce, restore.StepCRDs, restore.StepCRDs)
	if got, want := completed(j("uid-1/2/Restore")), []string{restore.StepQuiesce, restore.StepCRDs}; !slices.Equal(got, want) {
		t.Errorf("the same key resumes: got %v, want %v (each step once)", got, want)
	}
	if got := completed(j("uid-1/3/Restore")); len(got) != 0 {
		t.Errorf("another revision's restore reads the journal as empty: got %v", got)
	}
	if got := completed(j("")); len(got) != 0 {
		t.Errorf("an unkeyed journal reads a keyed one as empty: got %v", got)
	}

	next := j("uid-1/3/Restore")
	complete(next, restore.StepQuiesce)
	if got, want := completed(next), []string{restore.StepQuiesce}; !slices.Equal(got, want) {
		t.Errorf("a new key starts over: got %v, want %v", got, want)
	}
	if got := completed(j("uid-1/2/Restore")); len(got) != 0 {
		t.Errorf("the earlier key's steps are gone once a new key started over: got %v", got)
	}

	if err := next.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "restore-journal.t"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("Clear: the ConfigMap is still there (%v)", err)
	}

	// The CLI's journal (no key) reads and resumes as it did.
	cli := j("")
	complete(cli, restore.StepQuiesce, restore.StepCRDs)
	if got, want := completed(j("")), []string{restore.StepQuiesce, restore.StepCRDs}; !slices.Equal(got, want) {
		t.Errorf("unkeyed: got %v, want %v", got, want)
	}
	if got := completed(j("uid-1/2/Restore")); len(got) != 0 {
		t.Errorf("a keyed journal reads an unkeyed one as empty: got %v", got)
	}
	if err := cli.Clear(ctx); err != nil {
		t.Fatal(err)
	}
}

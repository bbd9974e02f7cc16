//go:build !unit

package member_test

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{}, &env)
}

func TestRecordIsWrittenIdempotently(t *testing.T) {
	ctx := t.Context()
	c, err := client.New(env.Hub.RESTConfig(), client.Options{Scheme: member.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := member.ReadRecord(ctx, c, "widget"); err != nil || rec != nil {
		t.Fatalf("no record yet: got %+v, %v", rec, err)
	}
	want := member.Record{
		Operator: "widget", Release: "widget-v1", Version: "1.0.0", Namespace: "widget-system",
		Image: "example.com/widget@sha256:" + "ab12", GitCommit: "3f2a9c1", Rollout: "default/widget",
	}
	if err := member.WriteRecord(ctx, c, want); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: member.RecordNamespace, Name: member.RecordName("widget")}
	if err := c.Get(ctx, key, cm); err != nil {
		t.Fatalf("the record is the ConfigMap %s: %v", key, err)
	}
	if cm.Labels[member.LabelManagedBy] != "rewind" || cm.Data["version"] != "1.0.0" || cm.Data["installedAt"] == "" {
		t.Fatalf("unexpected record ConfigMap: labels %v data %v", cm.Labels, cm.Data)
	}
	rv := cm.ResourceVersion

	// Writing the same record again changes nothing, not even installedAt.
	if err := member.WriteRecord(ctx, c, want); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, cm); err != nil {
		t.Fatal(err)
	}
	if cm.ResourceVersion != rv {
		t.Fatalf("an identical write must not update the record (resourceVersion %s -> %s)", rv, cm.ResourceVersion)
	}

	got, err := member.ReadRecord(ctx, c, "widget")
	if err != nil || got == nil {
		t.Fatal(err)
	}
	if got.Release != want.Release || got.Image != want.Image || got.Namespace != want.Namespace || time.Since(got.InstalledAt) > time.Minute {
		t.Fatalf("read back %+v, want %+v", got, want)
	}

	// A new release updates it.
	want.Release, want.Version = "widget-v2", "2.0.0"
	if err := member.WriteRecord(ctx, c, want); err != nil {
		t.Fatal(err)
	}
	recs, err := member.ListRecords(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Release != "widget-v2" || recs[0].Version != "2.0.0" {
		t.Fatalf("records after the upgrade: %+v", recs)
	}
}

// lossyPOSTs sends each POST on, then loses its answer (a connection reset as the answer was
// read), the first times of each path: what a member proxy's reset does to a create.
type lossyPOSTs struct {
	next  http.RoundTripper
	mu    sync.Mutex
	lost  map[string]int
	times int
}

func (l *lossyPOSTs) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost {
		return resp, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost[req.URL.Path] >= l.times {
		return resp, err
	}
	l.lost[req.URL.Path]++
	_ = resp.Body.Close()
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
}

// A create is not sent again by the member client after a transport error (it may have been
// done); the namespace and the record are: each finds what the lost try created. Before,
// EnsureNamespace failed its step at the first reset, and a step that began with it (an apply,
// a restore's ApplyRelease) met the same reset each time it was tried again under a proxy that
// resets a member at every step (test/faults TestRollbackUnderResets, CI run 7 of 2026-12-04:
// 14 faults in a row on member1's ApplyRelease).
func TestCreatesRideOutALostAnswer(t *testing.T) {
	ctx := t.Context()
	cfg := rest.CopyConfig(env.Hub.RESTConfig())
	lossy := &lossyPOSTs{lost: map[string]int{}, times: 2}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { lossy.next = rt; return lossy })
	c, err := client.New(cfg, client.Options{Scheme: member.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	name := "lossy-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	if err := member.EnsureNamespace(ctx, c, name); err != nil {
		t.Fatalf("EnsureNamespace through lost answers: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{}); err != nil {
		t.Errorf("namespace %s: %v", name, err)
	}
	op := "gadget-" + name
	if err := member.WriteRecord(ctx, c, member.Record{Operator: op, Release: "r1", Version: "1.0.0", Namespace: name}); err != nil {
		t.Fatalf("WriteRecord through lost answers: %v", err)
	}
	rec, err := member.ReadRecord(ctx, c, op)
	if err != nil || rec == nil || rec.Release != "r1" || rec.InstalledAt.IsZero() {
		t.Errorf("the record after lost answers: %+v, %v", rec, err)
	}
	lossy.mu.Lock()
	defer lossy.mu.Unlock()
	if len(lossy.lost) < 2 {
		t.Errorf("answers lost: %v; want the namespace's and the record's creates", lossy.lost)
	}
}

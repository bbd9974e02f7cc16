//go:build !unit

package member_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

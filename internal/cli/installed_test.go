package cli

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// clusters list reads what the targets say now, not only the mirror that is up to a check
// interval late.
func TestInstalledColumnReadsTheTargets(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { v := metav1.NewTime(now.Add(-d)); return &v }
	target := func(cluster string, rev int32, path, from, to string, statusRev int32, phase string, finished *metav1.Time) v1alpha1.RolloutTarget {
		return v1alpha1.RolloutTarget{
			Spec:   v1alpha1.RolloutTargetSpec{Cluster: cluster, Operator: "mysql", Revision: rev, Path: path, FromRelease: from, ToRelease: to},
			Status: v1alpha1.RolloutTargetStatus{Revision: statusRev, Path: path, Phase: phase, FinishedAt: finished}}
	}
	targets := []v1alpha1.RolloutTarget{
		target("m1", 3, v1alpha1.PathRestore, "mysql-b", "mysql-a", 3, v1alpha1.ClusterRolledBack, at(time.Second)),
		target("m2", 2, v1alpha1.PathUpgrade, "mysql-a", "mysql-b", 2, v1alpha1.ClusterUpgrading, nil),
		target("m3", 2, v1alpha1.PathUpgrade, "mysql-a", "mysql-b", 1, v1alpha1.ClusterSucceeded, at(time.Hour)),
		target("m4", 2, v1alpha1.PathUpgrade, "mysql-a", "mysql-b", 2, v1alpha1.ClusterSucceeded, at(time.Minute)),
	}
	by := installedByTargets(targets)
	mirror := func(name, release string) *v1alpha1.MemberCluster {
		return &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1alpha1.MemberClusterStatus{
			LastCheckTime: at(20 * time.Second), Installed: []v1alpha1.InstalledRelease{{Operator: "mysql", Version: "2.0.0", Release: release}}}}
	}
	cases := []struct {
		// mc is the member with its mirrored record.
		mc *v1alpha1.MemberCluster
		// want is the INSTALLED column.
		want []string
	}{
		// Rolled back a second ago; the mirror still says mysql-b.
		{mirror("m1", "mysql-b"), []string{"mysql=mysql-a(targets; record: mysql-b as of 20s ago)"}},
		// Moving now.
		{mirror("m2", "mysql-a"), []string{"mysql=mysql-a->mysql-b (Upgrading)(targets; record: mysql-a as of 20s ago)"}},
		// Its executor has not seen revision 2 yet: it runs what it ran.
		{mirror("m3", "mysql-a"), []string{"mysql=2.0.0(mysql-a)"}},
		// Mirror and targets agree.
		{mirror("m4", "mysql-b"), []string{"mysql=2.0.0(mysql-b)"}},
		// No record mirrored yet.
		{&v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "m4"}}, []string{"mysql=mysql-b(targets; no record mirrored yet)"}},
		// No target names it: the mirror.
		{mirror("m9", "mysql-a"), []string{"mysql=2.0.0(mysql-a)"}},
	}
	for _, tc := range cases {
		got := installedColumn(tc.mc, by[tc.mc.Name], now)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.mc.Name, got, tc.want)
		}
	}
}

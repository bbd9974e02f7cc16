// Package member talks to member clusters: building clients from kubeconfig Secrets, and the
// installed-version record each member keeps for every operator rewind installed.
package member

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
)

const (
	// RecordNamespace holds the installed-version records in each member.
	RecordNamespace = "rewind-system"
	// RecordPrefix starts the name of every record ConfigMap: release.<operator>.
	RecordPrefix = "release."
	// LabelRecord marks record ConfigMaps so they can be listed.
	LabelRecord = "rewind.dev/installed-release"
	// LabelOperator carries the operator name.
	LabelOperator = "rewind.dev/operator"
	// LabelManagedBy says rewind writes the object.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is the value of LabelManagedBy.
	ManagedBy = "rewind"
)

// Record is the installed-version record of one operator in one member cluster: the
// ConfigMap rewind-system/release.<operator>. It is the source of truth for drift checks.
type Record struct {
	Operator      string    `json:"operator"`
	Release       string    `json:"release"`
	Version       string    `json:"version"`
	Namespace     string    `json:"namespace,omitempty"`
	Image         string    `json:"image"`
	GitCommit     string    `json:"gitCommit"`
	ChartVersion  string    `json:"chartVersion,omitempty"`
	BundleVersion string    `json:"bundleVersion,omitempty"`
	Digest        string    `json:"digest,omitempty"`
	Rollout       string    `json:"rollout,omitempty"`
	Snapshot      string    `json:"snapshot,omitempty"`
	InstalledAt   time.Time `json:"installedAt"`
}

// RecordName is the name of the record ConfigMap of operator.
func RecordName(operator string) string { return RecordPrefix + operator }

func (r Record) data() map[string]string {
	d := map[string]string{
		"operator":      r.Operator,
		"release":       r.Release,
		"version":       r.Version,
		"namespace":     r.Namespace,
		"image":         r.Image,
		"gitCommit":     r.GitCommit,
		"chartVersion":  r.ChartVersion,
		"bundleVersion": r.BundleVersion,
		"digest":        r.Digest,
		"rollout":       r.Rollout,
		"snapshot":      r.Snapshot,
	}
	if !r.InstalledAt.IsZero() {
		d["installedAt"] = r.InstalledAt.UTC().Format(time.RFC3339)
	}
	for k, v := range d {
		if v == "" {
			delete(d, k)
		}
	}
	return d
}

func recordFrom(cm *corev1.ConfigMap) Record {
	d := cm.Data
	r := Record{
		Operator: d["operator"], Release: d["release"], Version: d["version"], Namespace: d["namespace"], Image: d["image"],
		GitCommit: d["gitCommit"], ChartVersion: d["chartVersion"], BundleVersion: d["bundleVersion"],
		Digest: d["digest"], Rollout: d["rollout"], Snapshot: d["snapshot"],
	}
	if r.Operator == "" {
		r.Operator = strings.TrimPrefix(cm.Name, RecordPrefix)
	}
	if t, err := time.Parse(time.RFC3339, d["installedAt"]); err == nil {
		r.InstalledAt = t
	}
	return r
}

// InstalledRelease converts the record to its API form.
func (r Record) InstalledRelease() v1alpha1.InstalledRelease {
	out := v1alpha1.InstalledRelease{
		Operator: r.Operator, Release: r.Release, Version: r.Version, Namespace: r.Namespace, Image: r.Image, GitCommit: r.GitCommit,
		ChartVersion: r.ChartVersion, BundleVersion: r.BundleVersion, Digest: r.Digest, Rollout: r.Rollout, Snapshot: r.Snapshot,
	}
	if !r.InstalledAt.IsZero() {
		t := metav1.NewTime(r.InstalledAt)
		out.InstalledAt = &t
	}
	return out
}

// ReadRecord returns the record of operator, or nil if the member has none.
func ReadRecord(ctx context.Context, c client.Client, operator string) (*Record, error) {
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKey{Namespace: RecordNamespace, Name: RecordName(operator)}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the installed-version record %s/%s: %w", RecordNamespace, RecordName(operator), err)
	}
	r := recordFrom(cm)
	return &r, nil
}

// ListRecords returns every installed-version record of the member, sorted by operator.
func ListRecords(ctx context.Context, c client.Client) ([]Record, error) {
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.InNamespace(RecordNamespace), client.HasLabels{LabelRecord}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing installed-version records: %w", err)
	}
	out := make([]Record, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, recordFrom(&list.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Operator < out[j].Operator })
	return out, nil
}

// WriteRecord creates or updates the record of rec.Operator. It is idempotent: writing the
// record that is already there changes nothing (and keeps its installedAt). An empty
// InstalledAt is set to now when the record changes.
func WriteRecord(ctx context.Context, c client.Client, rec Record) error {
	if rec.Operator == "" {
		return fmt.Errorf("installed-version record: operator is empty")
	}
	if err := EnsureNamespace(ctx, c, RecordNamespace); err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: RecordNamespace, Name: RecordName(rec.Operator)}
	// Read and written again on a conflict, on a create that finds it there (an earlier try's
	// answer lost), and on a fault.
	again := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	return fault.Retry(ctx, fault.CreateTries, func() error {
		return retry.OnError(retry.DefaultRetry, again, func() error { return writeRecordOnce(ctx, c, key, &rec) })
	})
}

// writeRecordOnce is one read and write of WriteRecord; rec.InstalledAt is set when the
// record is created.
func writeRecordOnce(ctx context.Context, c client.Client, key client.ObjectKey, rec *Record) error {
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, key, cm)
	if apierrors.IsNotFound(err) {
		if rec.InstalledAt.IsZero() {
			rec.InstalledAt = time.Now().UTC().Truncate(time.Second)
		}
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: recordLabels(rec.Operator)},
			Data:       rec.data(),
		}
		return c.Create(ctx, cm)
	}
	if err != nil {
		return err
	}
	want := *rec
	if want.InstalledAt.IsZero() {
		cur := recordFrom(cm)
		cur.InstalledAt = time.Time{}
		if maps.Equal(cur.data(), want.data()) {
			want.InstalledAt = recordFrom(cm).InstalledAt
		} else {
			want.InstalledAt = time.Now().UTC().Truncate(time.Second)
		}
	}
	labels := recordLabels(rec.Operator)
	if maps.Equal(cm.Data, want.data()) && hasLabels(cm.Labels, labels) {
		return nil
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	maps.Copy(cm.Labels, labels)
	cm.Data = want.data()
	return c.Update(ctx, cm)
}

func recordLabels(operator string) map[string]string {
	return map[string]string{LabelRecord: "true", LabelOperator: operator, LabelManagedBy: ManagedBy}
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// EnsureNamespace creates a namespace unless it exists, riding out faults: a create whose
// answer was lost finds the namespace there when it is sent again.
func EnsureNamespace(ctx context.Context, c client.Client, name string) error {
	err := fault.Retry(ctx, fault.CreateTries, func() error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		return c.Create(ctx, ns)
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

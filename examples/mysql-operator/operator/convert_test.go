package operator

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func cr(apiVersion string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Group + "/" + apiVersion, "kind": Kind,
		"metadata": map[string]any{"name": "orders", "namespace": "shop"},
		"spec":     spec,
		"status":   map[string]any{"phase": "Ready", "readyReplicas": int64(2)},
	}}
}

func TestConvertRenamesVersionAndKeepsEverythingElse(t *testing.T) {
	old := cr("v1alpha1", map[string]any{"replicas": int64(2), "version": "8.0", "config": "max_connections=500",
		"futureField": map[string]any{"kept": true}})
	v1, err := Convert(old, Group+"/v1")
	if err != nil {
		t.Fatal(err)
	}
	want := cr("v1", map[string]any{"replicas": int64(2), "mysqlVersion": "8.0", "config": "max_connections=500",
		"futureField": map[string]any{"kept": true}})
	if !equality.Semantic.DeepEqual(v1.Object, want.Object) {
		t.Fatalf("v1alpha1 -> v1:\n got %v\nwant %v", v1.Object, want.Object)
	}
	for _, to := range []string{"v1alpha1", "v1beta1"} {
		back, err := Convert(v1, Group+"/"+to)
		if err != nil {
			t.Fatal(err)
		}
		want := old.DeepCopy()
		want.SetAPIVersion(Group + "/" + to)
		if !equality.Semantic.DeepEqual(back.Object, want.Object) {
			t.Fatalf("v1 -> %s is not lossless:\n got %v\nwant %v", to, back.Object, want.Object)
		}
	}
	beta, err := Convert(old, Group+"/v1beta1")
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(beta.Object, "spec", "version"); v != "8.0" {
		t.Fatalf("v1alpha1 -> v1beta1 changed spec.version to %q", v)
	}
	if _, err := Convert(old, "database.example.com/v9"); err == nil {
		t.Fatal("conversion to an unknown version succeeded")
	}
}

func TestReadSpecDefaultsAndIgnoresUnknownFields(t *testing.T) {
	s := ReadSpec(cr("v1alpha1", map[string]any{"replicas": int64(3), "backup": map[string]any{"schedule": "@hourly"}, "mysqlVersion": "9"}), "v1alpha1")
	if s != (Spec{Replicas: 3, MySQLVersion: DefaultMySQLVersion}) {
		t.Fatalf("v1alpha1 build read %+v; it must ignore fields of newer versions", s)
	}
	s = ReadSpec(cr("v1beta1", map[string]any{"version": "8.4"}), "v1beta1")
	if s != (Spec{Replicas: 1, MySQLVersion: "8.4", BackupSchedule: DefaultBackupSchedule}) {
		t.Fatalf("v1beta1 build read %+v", s)
	}
	s = ReadSpec(cr("v1", map[string]any{"mysqlVersion": "9.0", "config": "x=1", "backup": map[string]any{"schedule": "@daily"}}), "v1")
	if s != (Spec{Replicas: 1, MySQLVersion: "9.0", Config: "x=1", BackupSchedule: "@daily"}) {
		t.Fatalf("v1 build read %+v", s)
	}
}

func TestNewClusterWritesWhatReadSpecReads(t *testing.T) {
	for _, v := range []string{"v1alpha1", "v1beta1", "v1"} {
		want := Spec{Replicas: 3, MySQLVersion: "8.4", Config: "x=1", BackupSchedule: "@daily"}
		if v == "v1alpha1" {
			want.BackupSchedule = "" // v1alpha1 has no backups
		}
		u := NewCluster(v, "shop", "orders", want)
		if u.GetAPIVersion() != Group+"/"+v || u.GetKind() != Kind || u.GetNamespace() != "shop" || u.GetName() != "orders" {
			t.Fatalf("%s: %v", v, u.Object)
		}
		if got := ReadSpec(u, v); got != want {
			t.Errorf("%s: ReadSpec(NewCluster(%+v)) = %+v", v, want, got)
		}
	}
}

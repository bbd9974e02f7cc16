package operator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Group and Kind of the resource.
const (
	Group = "database.example.com"
	Kind  = "MySQLCluster"
)

// GVK is the MySQLCluster kind at an API version.
func GVK(apiVersion string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: Group, Version: apiVersion, Kind: Kind}
}

// Spec is the part of a MySQLCluster's spec the operator acts on, read at any version.
type Spec struct {
	Replicas       int32
	MySQLVersion   string
	Config         string
	BackupSchedule string
}

// Defaults the CRD applies; the operator applies them too when a field is missing (an object
// converted from an older version has not been defaulted by the newer schema yet).
const (
	DefaultMySQLVersion   = "8.0"
	DefaultBackupSchedule = "0 3 * * *"
)

// ReadSpec reads the spec of a MySQLCluster at apiVersion. Fields it does not know are ignored,
// never an error: an older operator must keep working on objects that carry newer fields.
func ReadSpec(u *unstructured.Unstructured, apiVersion string) Spec {
	s := Spec{Replicas: 1, MySQLVersion: DefaultMySQLVersion}
	if r, ok, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); ok {
		s.Replicas = int32(r)
	}
	versionField := "version"
	if apiVersion == "v1" {
		versionField = "mysqlVersion"
	}
	if v, ok, _ := unstructured.NestedString(u.Object, "spec", versionField); ok && v != "" {
		s.MySQLVersion = v
	}
	s.Config, _, _ = unstructured.NestedString(u.Object, "spec", "config")
	if apiVersion != "v1alpha1" {
		s.BackupSchedule = DefaultBackupSchedule
		if v, ok, _ := unstructured.NestedString(u.Object, "spec", "backup", "schedule"); ok && v != "" {
			s.BackupSchedule = v
		}
	}
	return s
}

// NewCluster returns a MySQLCluster at apiVersion with spec s, the fields named as that version
// names them (the inverse of ReadSpec). Empty fields are left out, for the schema to default.
func NewCluster(apiVersion, namespace, name string, s Spec) *unstructured.Unstructured {
	spec := map[string]any{}
	if s.Replicas > 0 {
		spec["replicas"] = int64(s.Replicas)
	}
	if s.MySQLVersion != "" {
		field := "version"
		if apiVersion == "v1" {
			field = "mysqlVersion"
		}
		spec[field] = s.MySQLVersion
	}
	if s.Config != "" {
		spec["config"] = s.Config
	}
	if s.BackupSchedule != "" && apiVersion != "v1alpha1" {
		spec["backup"] = map[string]any{"schedule": s.BackupSchedule}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Group + "/" + apiVersion, "kind": Kind,
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     spec,
	}}
}

// Ready says whether a MySQLCluster's Ready condition is True for its current generation, as
// this operator reports it (and as rewind's health gate reads it).
func Ready(u *unstructured.Unstructured) bool {
	return ReadyIs(u, metav1.ConditionTrue)
}

// ReadyIs says whether the Ready condition has status want for the current generation.
func ReadyIs(u *unstructured.Unstructured, want metav1.ConditionStatus) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" && m["status"] == string(want) && m["observedGeneration"] == u.GetGeneration() {
			return true
		}
	}
	return false
}

// Reconciler reconciles MySQLClusters at its build's API version.
type Reconciler struct {
	Client client.Client
	Scheme *runtime.Scheme
	Build  Build
	// FailReconcile makes every reconcile fail (a deliberately bad build): the Ready condition
	// turns False and the children are left alone.
	FailReconcile bool
	// FailOnConfig, when set, makes reconciles of MySQLClusters whose spec.config contains it
	// fail: a data-dependent bug that a canary without such objects does not catch.
	FailOnConfig string
}

// Labels of every child of a MySQLCluster.
func childLabels(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "mysql", "app.kubernetes.io/instance": name, "app.kubernetes.io/managed-by": "mysql-operator"}
}

// Reconcile brings the children of one MySQLCluster to its spec and reports status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(GVK(r.Build.APIVersion))
	if err := r.Client.Get(ctx, req.NamespacedName, cr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cr.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, nil
	}
	if r.FailReconcile {
		log.FromContext(ctx).Info("reconcile failed on purpose (--fail-reconcile)")
		return ctrl.Result{RequeueAfter: 30 * time.Second}, r.setStatus(ctx, cr, 0, "Failed", metav1.Condition{
			Type: "Ready", Status: metav1.ConditionFalse, Reason: "ReconcileFailed",
			Message: fmt.Sprintf("mysql-operator %s was started with --fail-reconcile", r.Build.Version),
		})
	}
	spec := ReadSpec(cr, r.Build.APIVersion)
	name, ns := cr.GetName(), cr.GetNamespace()
	if r.FailOnConfig != "" && strings.Contains(spec.Config, r.FailOnConfig) {
		return ctrl.Result{RequeueAfter: 30 * time.Second}, r.setStatus(ctx, cr, 0, "Failed", metav1.Condition{
			Type: "Ready", Status: metav1.ConditionFalse, Reason: "InvalidConfig",
			Message: fmt.Sprintf("spec.config: mysql-operator %s cannot parse %q", r.Build.Version, r.FailOnConfig),
		})
	}

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-config", Namespace: ns}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		cm.Labels = childLabels(name)
		cm.Data = map[string]string{"my.cnf": "[mysqld]\n" + spec.Config + "\n", "mysql-version": spec.MySQLVersion,
			"reconciled-by": "mysql-operator " + r.Build.Version}
		if spec.BackupSchedule != "" {
			cm.Data["backup-schedule"] = spec.BackupSchedule
		}
		return controllerutil.SetControllerReference(cr, cm, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("configmap: %w", err)
	}

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-credentials", Namespace: ns}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, sec, func() error {
		sec.Labels = childLabels(name)
		if len(sec.Data["root-password"]) == 0 {
			pw := make([]byte, 16)
			if _, err := rand.Read(pw); err != nil {
				return err
			}
			sec.Data = map[string][]byte{"root-password": []byte(hex.EncodeToString(pw))}
		}
		return controllerutil.SetControllerReference(cr, sec, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("secret: %w", err)
	}

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error {
		svc.Labels = childLabels(name)
		svc.Spec.ClusterIP = corev1.ClusterIPNone
		svc.Spec.Selector = childLabels(name)
		svc.Spec.Ports = []corev1.ServicePort{{Name: "mysql", Port: 3306, TargetPort: intstr.FromInt32(3306), Protocol: corev1.ProtocolTCP}}
		return controllerutil.SetControllerReference(cr, svc, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("service: %w", err)
	}

	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, sts, func() error {
		sts.Labels = childLabels(name)
		sts.Spec.Replicas = ptr.To(spec.Replicas)
		sts.Spec.ServiceName = name
		sts.Spec.Selector = &metav1.LabelSelector{MatchLabels: childLabels(name)}
		sts.Spec.Template.Labels = childLabels(name)
		sts.Spec.Template.Spec.Containers = []corev1.Container{{
			Name:  "mysql",
			Image: "mysql:" + spec.MySQLVersion,
			Ports: []corev1.ContainerPort{{Name: "mysql", ContainerPort: 3306, Protocol: corev1.ProtocolTCP}},
			Env: []corev1.EnvVar{{Name: "MYSQL_ROOT_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: sec.Name}, Key: "root-password"}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/mysql/conf.d"}},
		}}
		sts.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}}
		return controllerutil.SetControllerReference(cr, sts, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("statefulset: %w", err)
	}

	ready := sts.Status.ReadyReplicas
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "ReplicasReady",
		Message: fmt.Sprintf("%d/%d replicas ready", ready, spec.Replicas)}
	phase := "Ready"
	if ready < spec.Replicas || sts.Status.ObservedGeneration < sts.Generation {
		cond.Status, cond.Reason, phase = metav1.ConditionFalse, "Provisioning", "Provisioning"
	}
	return ctrl.Result{}, r.setStatus(ctx, cr, ready, phase, cond)
}

// setStatus writes status.readyReplicas, phase, observedGeneration and the condition, when they
// changed (the condition keeps its lastTransitionTime while its status stays).
func (r *Reconciler) setStatus(ctx context.Context, cr *unstructured.Unstructured, ready int32, phase string, cond metav1.Condition) error {
	var conds []metav1.Condition
	if raw, ok, _ := unstructured.NestedSlice(cr.Object, "status", "conditions"); ok {
		for _, c := range raw {
			m, ok := c.(map[string]any)
			if !ok {
				continue
			}
			var mc metav1.Condition
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &mc); err == nil {
				conds = append(conds, mc)
			}
		}
	}
	cond.ObservedGeneration = cr.GetGeneration()
	condChanged := meta.SetStatusCondition(&conds, cond)

	status, _, _ := unstructured.NestedMap(cr.Object, "status")
	oldReady, _, _ := unstructured.NestedInt64(cr.Object, "status", "readyReplicas")
	oldPhase, _, _ := unstructured.NestedString(cr.Object, "status", "phase")
	oldGen, _, _ := unstructured.NestedInt64(cr.Object, "status", "observedGeneration")
	if status != nil && oldReady == int64(ready) && oldPhase == phase && oldGen == cr.GetGeneration() && !condChanged {
		return nil
	}
	rawConds := make([]any, 0, len(conds))
	for i := range conds {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conds[i])
		if err != nil {
			return err
		}
		rawConds = append(rawConds, m)
	}
	if status == nil {
		status = map[string]any{}
	}
	status["readyReplicas"] = int64(ready)
	status["phase"] = phase
	status["observedGeneration"] = cr.GetGeneration()
	status["conditions"] = rawConds
	if err := unstructured.SetNestedMap(cr.Object, status, "status"); err != nil {
		return err
	}
	if err := r.Client.Status().Update(ctx, cr); err != nil {
		return fmt.Errorf("status: %w", err) // a conflict is requeued: the next attempt reads the new version
	}
	return nil
}

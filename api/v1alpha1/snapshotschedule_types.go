package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations of scheduled snapshots.
const (
	// LabelSchedule names the SnapshotSchedule that took a Snapshot.
	LabelSchedule = "rewind.dev/schedule"
	// AnnotationExpiresAt is when a Snapshot may be deleted (RFC 3339), set from a TTL. A
	// snapshot a Rollout references is kept past it.
	AnnotationExpiresAt = "rewind.dev/expires-at"
)

// SnapshotScheduleSpec says which clusters' operator state is captured, when, where to, and
// for how long it is kept.
type SnapshotScheduleSpec struct {
	// schedule is a cron expression (5 fields: minute hour day-of-month month day-of-week, or
	// a descriptor such as @hourly or @every 6h), in timeZone.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Schedule string `json:"schedule"`
	// timeZone of the schedule, an IANA name such as Europe/Paris (default UTC).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`
	// clusterSelector picks the MemberClusters by label; an empty selector picks every one.
	// +optional
	ClusterSelector metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// operator whose state is captured (its installed-version record on each member names the
	// release whose CRDs and objects are captured; a cluster without one is reported).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Operator string `json:"operator"`
	// store names the SnapshotStore (same namespace) the snapshots go to; empty: hub Secrets
	// with the default key. Nothing is taken while it is not Ready.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Store string `json:"store,omitempty"`
	// ttl is how long each snapshot is kept (e.g. 168h); never deleted while a Rollout
	// references it. Empty: kept until retention removes it.
	// +optional
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// retention is how many of this schedule's snapshots are kept per cluster (the oldest go
	// first; never one a Rollout references).
	// +optional
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Retention int32 `json:"retention,omitempty"`
	// suspend stops new snapshots (expiry still runs).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// ScheduledClusterResult is the outcome of one cluster in the last run.
type ScheduledClusterResult struct {
	// cluster is the MemberCluster.
	// +required
	Cluster string `json:"cluster"`
	// snapshot taken, if any.
	// +optional
	Snapshot string `json:"snapshot,omitempty"`
	// error, if the capture failed.
	// +optional
	Error string `json:"error,omitempty"`
}

// SnapshotScheduleStatus reports the runs.
type SnapshotScheduleStatus struct {
	// observedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready (the last run captured every selected cluster), Stalled (the spec
	// cannot be carried out: a bad schedule, time zone or selector; the message names the
	// field).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// lastScheduleTime is the scheduled time of the last run.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// nextScheduleTime is when the next run is due.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// lastRun lists, per cluster, the snapshot the last run took or why it could not (the
	// first 50 clusters).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	LastRun []ScheduledClusterResult `json:"lastRun,omitempty"`
	// expired counts the snapshots this schedule deleted when their TTL ran out.
	// +optional
	Expired int64 `json:"expired,omitempty"`
}

// SnapshotSchedule takes snapshots of an operator's state on a set of member clusters on a
// cron schedule, outside rollouts, and deletes them after their TTL or beyond a count.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=snapsched,categories=rewind
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Operator",type=string,JSONPath=`.spec.operator`
// +kubebuilder:printcolumn:name="Store",type=string,JSONPath=`.spec.store`
// +kubebuilder:printcolumn:name="Last",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Next",type=string,JSONPath=`.status.nextScheduleTime`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
type SnapshotSchedule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SnapshotScheduleSpec `json:"spec"`
	// +optional
	Status SnapshotScheduleStatus `json:"status,omitempty"`
}

// SnapshotScheduleList is a list of SnapshotSchedules.
// +kubebuilder:object:root=true
type SnapshotScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SnapshotSchedule `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SnapshotSchedule{}, &SnapshotScheduleList{})
}

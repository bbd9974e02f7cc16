package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Failure policies.
const (
	// FailurePolicyRollbackAll restores every cluster this rollout changed, in reverse order.
	FailurePolicyRollbackAll = "RollbackAll"
	// FailurePolicyRollbackFailed restores only the failed cluster and stops the rollout.
	FailurePolicyRollbackFailed = "RollbackFailed"
	// FailurePolicyPause stops the rollout where it is.
	FailurePolicyPause = "Pause"
)

// Wave is one step of a rollout: a set of member clusters changed together.
// +kubebuilder:validation:XValidation:rule="has(self.selector) || (has(self.clusters) && size(self.clusters) > 0)",message="a wave selects clusters: set selector or clusters",reason="FieldValueRequired"
// +kubebuilder:validation:XValidation:rule="!(has(self.selector) && has(self.clusters) && size(self.clusters) > 0)",message="a wave selects clusters by selector or by name, not both: set only one of selector and clusters"
type Wave struct {
	// name of the wave, unique within the rollout.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// selector picks MemberClusters by label.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// clusters picks MemberClusters by name.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	Clusters []string `json:"clusters,omitempty"`
	// maxConcurrency is how many clusters of the wave change at once.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	MaxConcurrency int32 `json:"maxConcurrency,omitempty"`
	// bakeTime is how long health is re-checked after the wave before the next one starts.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	BakeTime *metav1.Duration `json:"bakeTime,omitempty"`
	// requireApproval holds the wave until a person approves it (`rewind rollout approve`).
	// +optional
	RequireApproval bool `json:"requireApproval,omitempty"`
}

// CELCheck is an extra health check on every custom resource of one kind.
type CELCheck struct {
	// kind of the custom resources the expression applies to.
	// +required
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// expression is a CEL expression over `self` (the object) that must be true.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Expression string `json:"expression"`
	// message explains a failure.
	// +optional
	Message string `json:"message,omitempty"`
}

// HealthGates say when a changed cluster counts as healthy.
type HealthGates struct {
	// timeout bounds the wait for every gate to pass.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// skipCustomResources turns off the check that every CR is Ready with observedGeneration
	// equal to generation.
	// +optional
	SkipCustomResources bool `json:"skipCustomResources,omitempty"`
	// cel are extra checks per kind.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	CEL []CELCheck `json:"cel,omitempty"`
}

// RolloutSpec is the desired release of an operator across member clusters.
// +kubebuilder:validation:XValidation:rule="self.waves.all(w, self.waves.exists_one(x, x.name == w.name))",message="wave names must be unique",fieldPath=".waves"
type RolloutSpec struct {
	// operator is the operator being released; it names the member's installed-version record.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Operator string `json:"operator"`
	// release is the desired OperatorRelease (same namespace). Setting it back to an earlier
	// release is how a rollback is asked for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Release string `json:"release"`
	// installNamespace is the namespace the operator runs in on each member.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	InstallNamespace string `json:"installNamespace"`
	// waves run in order.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	Waves []Wave `json:"waves"`
	// healthGates say when a changed cluster is healthy.
	// +optional
	HealthGates HealthGates `json:"healthGates,omitempty"`
	// failurePolicy says what happens when a cluster fails: RollbackAll (every cluster this
	// rollout changed is restored), RollbackFailed (only the failed one, then stop) or Pause.
	// +optional
	// +kubebuilder:default=RollbackAll
	// +kubebuilder:validation:Enum=RollbackAll;RollbackFailed;Pause
	FailurePolicy string `json:"failurePolicy,omitempty"`
	// paused stops the rollout from starting new steps.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// approvedWaves lists the waves a person approved.
	// +optional
	// +listType=set
	ApprovedWaves []string `json:"approvedWaves,omitempty"`
	// pruneOnRollback deletes, on rollback, objects created after the snapshot; by default
	// they are kept and reported.
	// +optional
	PruneOnRollback bool `json:"pruneOnRollback,omitempty"`
	// snapshotRetention is how many snapshots are kept per cluster and operator.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	SnapshotRetention int32 `json:"snapshotRetention,omitempty"`
}

// Paths a cluster takes to the desired release.
const (
	PathUpgrade = "Upgrade"
	PathRestore = "Restore"
	PathNone    = "None"
)

// Rollout phases.
const (
	RolloutProgressing        = "Progressing"
	RolloutWaitingForApproval = "WaitingForApproval"
	RolloutBaking             = "Baking"
	RolloutSucceeded          = "Succeeded"
	RolloutFailed             = "Failed"
	RolloutRollingBack        = "RollingBack"
	RolloutRolledBack         = "RolledBack"
	RolloutPaused             = "Paused"
)

// AnnotationRollbackReason records why the release was set back (automatic rollback).
const AnnotationRollbackReason = "rewind.dev/rollback-reason"

// Cluster phases of a rollout.
const (
	ClusterPending     = "Pending"
	ClusterUpgrading   = "Upgrading"
	ClusterSucceeded   = "Succeeded"
	ClusterFailed      = "Failed"
	ClusterRollingBack = "RollingBack"
	ClusterRolledBack  = "RolledBack"
)

// ClusterProgress is the journal of one member cluster in a rollout.
type ClusterProgress struct {
	// cluster is the MemberCluster name.
	// +required
	Cluster string `json:"cluster"`
	// wave is the index of the wave the cluster belongs to.
	// +optional
	Wave int32 `json:"wave"`
	// phase: Pending, Upgrading, Succeeded, Failed, RollingBack or RolledBack.
	// +optional
	Phase string `json:"phase,omitempty"`
	// step is the step of the per-cluster state machine in progress or last done.
	// +optional
	Step string `json:"step,omitempty"`
	// fromRelease is the release installed before the change ("" for a first install).
	// +optional
	FromRelease string `json:"fromRelease,omitempty"`
	// toRelease is the release being installed.
	// +optional
	ToRelease string `json:"toRelease,omitempty"`
	// path is how the cluster reaches toRelease: Upgrade (snapshot, apply, gates), Restore
	// (back to the snapshot taken under toRelease, then apply it) or None (already there).
	// +optional
	Path string `json:"path,omitempty"`
	// snapshot is the snapshot taken before the change (Upgrade) or restored (Restore).
	// +optional
	Snapshot string `json:"snapshot,omitempty"`
	// restoreSteps are the restore steps completed (the restore's journal).
	// +optional
	// +listType=atomic
	RestoreSteps []string `json:"restoreSteps,omitempty"`
	// attempt counts tries of the current step.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// nextAttemptAt is when the step is tried again after a failed attempt (exponential
	// backoff: 1s, 2s, 4s, ... up to 30s).
	// +optional
	NextAttemptAt *metav1.Time `json:"nextAttemptAt,omitempty"`
	// message explains the phase.
	// +optional
	Message string `json:"message,omitempty"`
	// startedAt is when the cluster's change started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// stepStartedAt is when the current step started.
	// +optional
	StepStartedAt *metav1.Time `json:"stepStartedAt,omitempty"`
	// finishedAt is when the cluster reached a final phase.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// Revision is one entry of a rollout's history.
type Revision struct {
	// release rolled out.
	// +required
	Release string `json:"release"`
	// startedAt is when it started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// finishedAt is when it ended.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// outcome: Succeeded, RolledBack, Failed, Superseded or InProgress.
	// +optional
	Outcome string `json:"outcome,omitempty"`
	// reason explains the outcome.
	// +optional
	Reason string `json:"reason,omitempty"`
	// snapshots taken before the change, by cluster.
	// +optional
	Snapshots map[string]string `json:"snapshots,omitempty"`
}

// RolloutStatus is the progress of the rollout.
type RolloutStatus struct {
	// observedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready, Progressing, Stalled, RolledBack.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// phase summarizes the rollout.
	// +optional
	Phase string `json:"phase,omitempty"`
	// currentRelease is the release the rollout is moving clusters to.
	// +optional
	CurrentRelease string `json:"currentRelease,omitempty"`
	// previousRelease is the release before it.
	// +optional
	PreviousRelease string `json:"previousRelease,omitempty"`
	// currentWave is the index of the wave in progress.
	// +optional
	CurrentWave int32 `json:"currentWave,omitempty"`
	// revision counts the releases this rollout started.
	// +optional
	Revision int32 `json:"revision,omitempty"`
	// bakeStartedAt is when the current wave finished and its bake time began.
	// +optional
	BakeStartedAt *metav1.Time `json:"bakeStartedAt,omitempty"`
	// clustersDone is "N/M": N of the M targeted clusters reached the current revision's goal
	// (Succeeded, or RolledBack in a rollback). For `kubectl get`.
	// +optional
	ClustersDone string `json:"clustersDone,omitempty"`
	// clusters is the per-cluster journal.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	Clusters []ClusterProgress `json:"clusters,omitempty"`
	// history of the releases this rollout rolled out, newest last.
	// +optional
	// +listType=atomic
	History []Revision `json:"history,omitempty"`
}

// Rollout releases an operator to member clusters in waves, with a snapshot before every
// change, health gates after it and automatic rollback.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ro,categories=rewind
// +kubebuilder:printcolumn:name="Operator",type=string,JSONPath=`.spec.operator`
// +kubebuilder:printcolumn:name="Release",type=string,JSONPath=`.spec.release`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Wave",type=integer,JSONPath=`.status.currentWave`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Clusters",type=string,JSONPath=`.status.clustersDone`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Rollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec RolloutSpec `json:"spec"`
	// +optional
	Status RolloutStatus `json:"status,omitempty"`
}

// RolloutList is a list of Rollouts.
// +kubebuilder:object:root=true
type RolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Rollout `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Rollout{}, &RolloutList{})
}

package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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

// Unreachable policies: what a cluster whose member stays unreachable past its
// unreachableTimeout does to its wave.
const (
	// UnreachablePolicyHold keeps the cluster waiting (and its wave with it) until the member
	// is back; nothing fails.
	UnreachablePolicyHold = "Hold"
	// UnreachablePolicyFail fails the cluster, and the failure policy acts.
	UnreachablePolicyFail = "Fail"
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
	// metrics are metric analyses (Argo Rollouts' field names; conditions in CEL) run once
	// every object is healthy, on the upgrade path: a failed metric, or too many errors in a
	// row, fails the gate and the failure policy acts; an inconclusive one holds the cluster
	// until a person approves (rewind rollout approve) or rolls back.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Metrics []Metric `json:"metrics,omitempty"`
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
	// unreachablePolicy says what a cluster does whose member stays unreachable longer than
	// its MemberCluster's spec.unreachableTimeout: Hold (wait until it is back, holding its
	// wave; the Rollout's Waiting condition names it) or Fail (fail the cluster, and
	// failurePolicy acts). Faults shorter than that are retried and never fail anything.
	// +optional
	// +kubebuilder:default=Hold
	// +kubebuilder:validation:Enum=Hold;Fail
	UnreachablePolicy string `json:"unreachablePolicy,omitempty"`
	// paused stops the rollout from starting new steps.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// rollbackConcurrency bounds how many clusters a rollback restores at once. Unset
	// restores every changed cluster at once (bounded by the controller's workers), so the
	// bad release runs nowhere longer than it must.
	// +optional
	// +kubebuilder:validation:Minimum=1
	RollbackConcurrency *int32 `json:"rollbackConcurrency,omitempty"`
	// rollbackByWave restores wave by wave, the last wave first (each at rollbackConcurrency),
	// instead of every changed cluster at once.
	// +optional
	RollbackByWave bool `json:"rollbackByWave,omitempty"`
	// valuesFrom overrides the Helm values of a chart release for some clusters, e.g. a
	// region's image registry mirror. Entries apply in order to the clusters their
	// clusterSelector matches (every cluster when it is unset), each over the release's own
	// values and the entries before it. A cluster with overrides gets its own rendered
	// manifests, recorded by digest on its RolloutTarget and its installed-version record, so
	// drift checks and snapshots stay exact.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	ValuesFrom []ValuesOverride `json:"valuesFrom,omitempty"`
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
	// snapshotStore names the SnapshotStore (same namespace) that keeps the snapshots taken
	// before each cluster changes; empty: hub Secrets of this namespace with the hub's default
	// key. A cluster does not start while the store is not Ready.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SnapshotStore string `json:"snapshotStore,omitempty"`
	// preflight checks a new release against each cluster's CRDs and custom resources before
	// any cluster changes (the checks of `rewind plan`). Unset: mode Enforce, nothing ignored.
	// +optional
	Preflight *Preflight `json:"preflight,omitempty"`
	// dryRun plans a new spec.release instead of rolling it out: the controller computes, per
	// cluster it would upgrade, what the release would do (the checks of `rewind plan`) and
	// writes it to status.plan with a Planned condition; no target is written, no wave opens,
	// nothing changes on any cluster. Set it back to false to roll the release out.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
}

// Preflight modes.
const (
	// PreflightEnforce stops a revision before any cluster changes when a finding has error
	// severity (and its check is not ignored).
	PreflightEnforce = "Enforce"
	// PreflightWarn records the findings in the Preflight condition and goes on.
	PreflightWarn = "Warn"
)

// Preflight says what the checks before a revision do with their findings.
type Preflight struct {
	// mode is Enforce (a finding of error severity stops the revision before any cluster
	// changes; the Stalled and Preflight conditions name it) or Warn (findings are recorded
	// in the Preflight condition and the revision goes on). A rollback is never checked.
	// +optional
	// +kubebuilder:default=Enforce
	// +kubebuilder:validation:Enum=Enforce;Warn
	Mode string `json:"mode,omitempty"`
	// ignore lists checks whose findings never stop a revision (they are still recorded),
	// so one accepted change does not turn the whole check off.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Enum=StoredVersionRemoved;ScopeChanged;ServedVersionRemoved;NamesChanged;RequiredFieldAdded;FieldRemoved;TypeChanged;DefaultAdded;DefaultChanged;DefaultRemoved;EnumNarrowed;BoundTightened;PatternChanged;FormatChanged;NullableRemoved;PreserveUnknownFieldsChanged;ListTypeChanged;ValidationRuleAdded;ConversionChanged;UnknownChange;ObjectRefused;FieldLost;FieldChanged;RoundTripRefused;ConversionNotVerified
	Ignore []string `json:"ignore,omitempty"`
}

// ValuesOverride is Helm values for the clusters a selector matches.
// +kubebuilder:validation:XValidation:rule="has(self.values) != has(self.configMap)",message="set exactly one of values and configMap"
type ValuesOverride struct {
	// clusterSelector picks MemberClusters by label (every cluster when unset).
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// values are Helm values (an object).
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Values *apiextensionsv1.JSON `json:"values,omitempty"`
	// configMap is a ConfigMap key (in the Rollout's namespace) holding Helm values (YAML).
	// +optional
	ConfigMap *ValuesReference `json:"configMap,omitempty"`
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

// Annotations a person (or `rewind`) sets on a Rollout; the controller never writes spec.
const (
	// AnnotationRollbackReason says why a person set spec.release back (`rewind rollback
	// --reason`); it is reported for that revision only.
	AnnotationRollbackReason = "rewind.dev/rollback-reason"
	// AnnotationApprovedPrefix starts the annotation that approves one wave for one
	// revision: approved.rewind.dev/<wave>: "<revision>" (`rewind rollout approve`). An
	// approval of an earlier revision does not count.
	AnnotationApprovedPrefix = "approved.rewind.dev/"
	// AnnotationRetry asks, once per value, for another attempt at a release that failed and
	// was rolled back (`rewind retry`), as Flux's reconcile.fluxcd.io/requestedAt.
	AnnotationRetry = "rewind.dev/retry"
)

// Cluster phases of a rollout.
const (
	ClusterPending     = "Pending"
	ClusterUpgrading   = "Upgrading"
	ClusterSucceeded   = "Succeeded"
	ClusterFailed      = "Failed"
	ClusterRollingBack = "RollingBack"
	ClusterRolledBack  = "RolledBack"
)

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
	// revision is the revision number.
	// +optional
	Revision int32 `json:"revision,omitempty"`
	// automatic says the revision was started by the failure policy (a rollback), not by a
	// change of spec.release.
	// +optional
	Automatic bool `json:"automatic,omitempty"`
	// failures are the first failed clusters of a revision that ended Failed or RolledBack,
	// with the step and message that failed them (notifications are computed from them).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=3
	Failures []ClusterFailure `json:"failures,omitempty"`
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
	// targets counts the revision's RolloutTargets by phase.
	// +optional
	Targets TargetCounts `json:"targets,omitempty"`
	// failures lists failed clusters of the revision with their causes (at most 10; the
	// RolloutTargets hold them all).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Failures []ClusterFailure `json:"failures,omitempty"`
	// failedRelease is a release that failed and was rolled back. It is not attempted again
	// until spec.release changes or a person asks for a retry (annotation rewind.dev/retry).
	// +optional
	FailedRelease string `json:"failedRelease,omitempty"`
	// failureReason says why failedRelease failed.
	// +optional
	FailureReason string `json:"failureReason,omitempty"`
	// lastHandledRetry is the value of the rewind.dev/retry annotation last acted on.
	// +optional
	LastHandledRetry string `json:"lastHandledRetry,omitempty"`
	// lastRollbackReason is the value of the rewind.dev/rollback-reason annotation last used
	// for a revision (a reason is reported for one rollback only).
	// +optional
	LastRollbackReason string `json:"lastRollbackReason,omitempty"`
	// history of the releases this rollout rolled out, newest last (at most 20). The snapshots
	// of each revision are the Snapshots labelled rewind.dev/rollout and rewind.dev/revision.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	History []Revision `json:"history,omitempty"`
	// plan is what spec.release would do, per cluster, computed while spec.dryRun is true (the
	// Planned condition says when and whether it could be); removed when dryRun is false.
	// +optional
	Plan *RolloutPlan `json:"plan,omitempty"`
}

// RolloutPlan is the plan of a dry run: per cluster, a compact summary of `rewind plan`.
type RolloutPlan struct {
	// release planned.
	Release string `json:"release"`
	// observedGeneration is the Rollout's generation the plan was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// plannedAt is when the plan was computed.
	// +optional
	PlannedAt *metav1.Time `json:"plannedAt,omitempty"`
	// clusters are the clusters of the rollout's waves, in wave order (at most 100; omitted
	// counts the rest).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Clusters []ClusterPlanSummary `json:"clusters,omitempty"`
	// omitted counts the clusters planned but not listed.
	// +optional
	Omitted int32 `json:"omitted,omitempty"`
}

// ClusterPlanSummary is what a release would do to one cluster.
type ClusterPlanSummary struct {
	// cluster is the MemberCluster's name, wave the wave it is in.
	Cluster string `json:"cluster"`
	// +optional
	Wave string `json:"wave,omitempty"`
	// path the revision would take there (Upgrade, None, ...).
	// +optional
	Path string `json:"path,omitempty"`
	// error says why the cluster could not be planned (then the counts are unset).
	// +optional
	Error string `json:"error,omitempty"`
	// creates, updates and unchanged count the release's objects a server-side dry run of its
	// apply would create, update or leave as they are (an upgrade deletes nothing).
	// +optional
	Creates int32 `json:"creates,omitempty"`
	// +optional
	Updates int32 `json:"updates,omitempty"`
	// +optional
	Unchanged int32 `json:"unchanged,omitempty"`
	// crdFindings counts the findings of the CRD changes (upgrade safety).
	// +optional
	CRDFindings int32 `json:"crdFindings,omitempty"`
	// refusedObjects counts the live custom resources the new schema refuses and the release's
	// objects the dry run of the apply was refused for.
	// +optional
	RefusedObjects int32 `json:"refusedObjects,omitempty"`
	// roundTripFindings counts the fields lost or changed on the way back, the objects refused
	// on it and the conversions that could not be verified.
	// +optional
	RoundTripFindings int32 `json:"roundTripFindings,omitempty"`
	// errors and warnings count the findings by severity.
	// +optional
	Errors int32 `json:"errors,omitempty"`
	// +optional
	Warnings int32 `json:"warnings,omitempty"`
	// customResources and bytes are what the snapshot before the change would hold of the
	// custom resources.
	// +optional
	CustomResources int32 `json:"customResources,omitempty"`
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// snapshotEstimate is the time the snapshot would take at the capture rate rewind measured
	// on this cluster (its last snapshot's bytes and captureDuration), or "no measurement yet".
	// +optional
	SnapshotEstimate string `json:"snapshotEstimate,omitempty"`
	// findings lists the first findings of error, then warning severity (at most 10; rewind
	// plan shows them all).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Findings []string `json:"findings,omitempty"`
}

// TargetCounts counts RolloutTargets by phase.
type TargetCounts struct {
	// +optional
	Total int32 `json:"total,omitempty"`
	// +optional
	Pending int32 `json:"pending,omitempty"`
	// inProgress counts Upgrading and RollingBack targets.
	// +optional
	InProgress int32 `json:"inProgress,omitempty"`
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// +optional
	RolledBack int32 `json:"rolledBack,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
}

// ClusterFailure is one failed cluster of a revision.
type ClusterFailure struct {
	// +required
	Cluster string `json:"cluster"`
	// step the cluster failed at.
	// +optional
	Step string `json:"step,omitempty"`
	// path the cluster was on (Upgrade or Restore).
	// +optional
	Path string `json:"path,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// Rollout releases an operator to member clusters in waves, with a snapshot before every
// change, health gates after it and automatic rollback.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=rewind
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

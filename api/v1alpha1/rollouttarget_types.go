package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels on RolloutTargets.
const (
	// LabelRollout names the Rollout a RolloutTarget (or a Snapshot) belongs to.
	LabelRollout = "rewind.dev/rollout"
	// LabelCluster names the MemberCluster.
	LabelCluster = "rewind.dev/cluster"
	// LabelRevision is the Rollout revision a Snapshot was taken in.
	LabelRevision = "rewind.dev/revision"
	// LabelSourceNamespace and LabelSourceName are on a pull member's copy of a RolloutTarget
	// (in the member's hub namespace, MemberNamespace): the namespace and name of the target
	// the Rollout wrote, whose status the hub keeps equal to the copy's. The Rollout's
	// namespace is LabelSourceNamespace.
	LabelSourceNamespace = "rewind.dev/source-namespace"
	LabelSourceName      = "rewind.dev/source-name"
)

// RolloutTargetSpec is what one member cluster does in one revision of a Rollout. The Rollout
// writes it when it plans a revision, and opens it (start) when the cluster's wave and
// concurrency allow; it holds everything the per-cluster executor needs, so that the executor
// never reads the Rollout.
type RolloutTargetSpec struct {
	// rollout is the name of the Rollout (same namespace) this target belongs to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Rollout string `json:"rollout"`
	// cluster is the MemberCluster.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Cluster string `json:"cluster"`
	// revision is the Rollout revision the target belongs to.
	// +required
	// +kubebuilder:validation:Minimum=1
	Revision int32 `json:"revision"`
	// wave is the index of the wave the cluster belongs to.
	// +optional
	Wave int32 `json:"wave"`
	// path is how the cluster reaches toRelease: Upgrade (precheck, snapshot, staged apply,
	// health gate, record), Restore (back to snapshot, then apply toRelease, health gate,
	// record) or None (already there).
	// +required
	// +kubebuilder:validation:Enum=Upgrade;Restore;None
	Path string `json:"path"`
	// fromRelease is the release the cluster runs before the change ("" for a first install).
	// +optional
	FromRelease string `json:"fromRelease,omitempty"`
	// toRelease is the release the cluster runs after it.
	// +required
	// +kubebuilder:validation:MinLength=1
	ToRelease string `json:"toRelease"`
	// manifests is the digest of the manifests this cluster applies: its own rendering of
	// toRelease with the Rollout's spec.valuesFrom ("" for the release's own manifests).
	// +optional
	// +kubebuilder:validation:MaxLength=71
	Manifests string `json:"manifests,omitempty"`
	// fromManifests is the digest of the manifests the cluster runs now ("" for
	// fromRelease's own manifests).
	// +optional
	// +kubebuilder:validation:MaxLength=71
	FromManifests string `json:"fromManifests,omitempty"`
	// snapshot is, on the Restore path, the snapshot the cluster returns to; on the Upgrade
	// path, the name the snapshot taken before the change gets.
	// +optional
	Snapshot string `json:"snapshot,omitempty"`
	// operator, installNamespace, healthGates, pruneOnRollback and snapshotRetention are the
	// Rollout's, as of the revision.
	// +required
	Operator string `json:"operator"`
	// +required
	InstallNamespace string `json:"installNamespace"`
	// +optional
	HealthGates HealthGates `json:"healthGates,omitempty"`
	// +optional
	PruneOnRollback bool `json:"pruneOnRollback,omitempty"`
	// +optional
	SnapshotRetention int32 `json:"snapshotRetention,omitempty"`
	// unreachablePolicy is the Rollout's spec.unreachablePolicy, as of the revision.
	// +optional
	// +kubebuilder:validation:Enum=Hold;Fail
	UnreachablePolicy string `json:"unreachablePolicy,omitempty"`
	// snapshotStore is the Rollout's spec.snapshotStore: the SnapshotStore the snapshot step
	// writes to ("" for hub Secrets with the default key).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SnapshotStore string `json:"snapshotStore,omitempty"`
	// start says the Rollout opened the change: until then the target stays Pending. Set
	// back to false (the Rollout is paused), a target in progress holds before its next step.
	// +optional
	Start bool `json:"start,omitempty"`
	// healthyUntil keeps a Succeeded target re-checking health until then (its wave's bake);
	// health lost meanwhile fails it.
	// +optional
	HealthyUntil *metav1.Time `json:"healthyUntil,omitempty"`
	// reason says why the target has this path (an automatic rollback, a restore after a
	// failure).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// basis is the journal (the target's status) the Rollout planned this revision from. A
	// cluster whose journal changed it after the Rollout read it (a step past the snapshot
	// started before the new plan arrived) refuses the plan (status.waitingFor StalePlan),
	// and the Rollout plans the cluster again from its journal: a cluster planned as "not
	// changed" is never left changed. Absent: no check (a target written by hand).
	// +optional
	Basis *PlanBasis `json:"basis,omitempty"`
}

// PlanBasis is what the Rollout saw of a cluster's journal when it planned a revision.
type PlanBasis struct {
	// revision, path, phase and step are the journal's (status.revision, .path, .phase and
	// .step) as the Rollout read them; revision 0 is no journal.
	// +optional
	Revision int32 `json:"revision,omitempty"`
	// +optional
	Path string `json:"path,omitempty"`
	// +optional
	Phase string `json:"phase,omitempty"`
	// +optional
	Step string `json:"step,omitempty"`
}

// RolloutTargetStatus is the journal of one cluster's change: every step is recorded before it
// runs, so a restarted controller resumes it.
type RolloutTargetStatus struct {
	// observedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// revision and path say which plan the journal belongs to: a spec with another revision or
	// path (the failure policy turned an upgrade into a restore) starts a new journal.
	// +optional
	Revision int32 `json:"revision,omitempty"`
	// +optional
	Path string `json:"path,omitempty"`
	// phase: Pending, Upgrading, Succeeded, Failed, RollingBack or RolledBack.
	// +optional
	Phase string `json:"phase,omitempty"`
	// step is the step in progress or last done.
	// +optional
	Step string `json:"step,omitempty"`
	// snapshot is the snapshot taken before the change (Upgrade) or restored (Restore).
	// +optional
	Snapshot string `json:"snapshot,omitempty"`
	// restoreSteps are the restore steps completed (the restore's own journal). A pull
	// member's agent journals them in its member and reports them with the copy's next status
	// write (the restore's next step, a fault or its end).
	// +optional
	// +listType=atomic
	RestoreSteps []string `json:"restoreSteps,omitempty"`
	// attempt counts failed tries of the current step.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// nextAttemptAt is when the step is tried again after a failed attempt or a fault
	// (exponential backoff with jitter: about 1s, 2s, 4s, ... up to 30s).
	// +optional
	NextAttemptAt *metav1.Time `json:"nextAttemptAt,omitempty"`
	// faults counts the faults the current step met and retried in place: a reset or refused
	// connection, a timeout, a 429 or 5xx, an API server restarting, an etcd leader change.
	// They are never counted as failed attempts.
	// +optional
	Faults int32 `json:"faults,omitempty"`
	// waitingFor says why the target waits without failing: MemberUnreachable (the member's
	// health probe has failed for longer than its unreachableTimeout) or
	// SnapshotStoreUnavailable (the snapshot cannot be stored; no cluster changes without
	// it) or RepeatedFaults (a step keeps meeting faults though the member answers its
	// probe) or StalePlan (the journal changed the cluster after the Rollout read it to plan
	// spec.revision: the Rollout plans the cluster again). Empty when it does not wait. The
	// target goes on by itself when the cause is gone.
	// +optional
	WaitingFor string `json:"waitingFor,omitempty"`
	// waitingSince is when the current wait began.
	// +optional
	WaitingSince *metav1.Time `json:"waitingSince,omitempty"`
	// message explains the phase.
	// +optional
	Message string `json:"message,omitempty"`
	// fromRelease, toRelease, fromManifests and manifests are those of the plan this journal
	// runs (its spec's when it started): the journal says what it changes even once the spec
	// holds a newer revision.
	// +optional
	FromRelease string `json:"fromRelease,omitempty"`
	// +optional
	ToRelease string `json:"toRelease,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=71
	FromManifests string `json:"fromManifests,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=71
	Manifests string `json:"manifests,omitempty"`
	// startedAt is when the change started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// stepStartedAt is when the current step started.
	// +optional
	StepStartedAt *metav1.Time `json:"stepStartedAt,omitempty"`
	// finishedAt is when the target reached a final phase.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// healthCheckedAt is when health was last checked during a bake.
	// +optional
	HealthCheckedAt *metav1.Time `json:"healthCheckedAt,omitempty"`
	// metrics are the health gate's metric analyses of this revision, with their last
	// measurements.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Metrics []MetricResult `json:"metrics,omitempty"`
	// notes are what this revision's steps reported besides their phases, the first
	// MaxTargetNotes of them, each once: objects kept since the snapshot (KeptSinceSnapshot), a
	// restore that could not read a release's manifests (RestoreWithoutRelease), inconclusive
	// metrics a person approved (MetricsApproved). Each is an Event on the Rollout too: the
	// hub records it after writing a push member's status, and when it relays the status a
	// pull member's agent wrote (an agent may not write the Rollout's namespace).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	Notes []TargetNote `json:"notes,omitempty"`
}

// MaxTargetNotes bounds status.notes of a RolloutTarget: a revision keeps its first notes.
const MaxTargetNotes = 8

// TargetNote is one thing a target's steps reported, as the Event on the Rollout says it.
type TargetNote struct {
	// type is Normal or Warning.
	// +kubebuilder:validation:Enum=Normal;Warning
	Type string `json:"type"`
	// reason names it in one word (the Event's reason).
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason"`
	// message says it, as the Event's note (at most 1,024 characters).
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// RolloutTarget is one member cluster's part of one Rollout: what it does in the current
// revision (spec, written by the Rollout) and how far it got (status, the journal).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=rewind
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.spec.rollout`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Wave",type=integer,JSONPath=`.spec.wave`
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.spec.path`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.step`
// +kubebuilder:printcolumn:name="From",type=string,JSONPath=`.spec.fromRelease`,priority=1
// +kubebuilder:printcolumn:name="To",type=string,JSONPath=`.spec.toRelease`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RolloutTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec RolloutTargetSpec `json:"spec"`
	// +optional
	Status RolloutTargetStatus `json:"status,omitempty"`
}

// RolloutTargetList is a list of RolloutTargets.
// +kubebuilder:object:root=true
type RolloutTargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RolloutTarget `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RolloutTarget{}, &RolloutTargetList{})
}

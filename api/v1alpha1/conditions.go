package v1alpha1

// Condition types shared by the kinds of this group (kstatus-style).
const (
	// ConditionReady says the object has reached its desired state.
	ConditionReady = "Ready"
	// ConditionReconciling says work toward the desired state is in progress.
	ConditionReconciling = "Reconciling"
	// ConditionStalled says progress stopped on a problem that needs a person.
	ConditionStalled = "Stalled"

	// ConditionReachable (MemberCluster) says the member's API server answered.
	ConditionReachable = "Reachable"

	// ConditionProgressing (Rollout) says clusters are being changed.
	ConditionProgressing = "Progressing"
	// ConditionWaiting (Rollout) says some clusters wait on something outside the release
	// (an unreachable member, an unavailable snapshot store) without failing; the message
	// names them.
	ConditionWaiting = "Waiting"
	// ConditionPreflight (Rollout) says whether the last revision's release passed the checks
	// against each cluster's CRDs and custom resources (spec.preflight); the message lists the
	// findings.
	ConditionPreflight = "Preflight"
	// ConditionPlanned (Rollout, spec.dryRun) says whether status.plan holds the plan of
	// spec.release: True (Planned), False while it cannot be computed (PlanFailed).
	ConditionPlanned = "Planned"
	// ConditionRolledBack (Rollout) says changed clusters were returned to the previous release.
	ConditionRolledBack = "RolledBack"

	// ConditionVerified (Snapshot) says whether the stored payload matched its checksum when
	// it was last verified (rewind snapshot verify).
	ConditionVerified = "Verified"
)

// Condition reasons.
const (
	ReasonSucceeded         = "Succeeded"
	ReasonProgressing       = "Progressing"
	ReasonConnected         = "Connected"
	ReasonKubeconfigInvalid = "KubeconfigInvalid"
	ReasonSecretNotFound    = "KubeconfigSecretNotFound"
	ReasonUnreachable       = "Unreachable"
	// ReasonMemberUnreachable (Rollout Waiting, RolloutTarget waitingFor): a member's health
	// probe has failed for longer than its unreachableTimeout.
	ReasonMemberUnreachable = "MemberUnreachable"
	// ReasonSnapshotStoreUnavailable (Rollout Waiting, RolloutTarget waitingFor): the
	// snapshot store is not Ready or does not answer; clusters wait for it to take their
	// snapshots.
	ReasonSnapshotStoreUnavailable = "SnapshotStoreUnavailable"
	// ReasonRepeatedFaults (Rollout Waiting, RolloutTarget waitingFor): a step keeps meeting
	// faults (5xx answers, timeouts) although the member answers its health probe, e.g. a
	// webhook its API server cannot call; it is retried, never failed.
	ReasonRepeatedFaults = "RepeatedFaults"
	// ReasonStalePlan (RolloutTarget waitingFor): the target's journal changed its cluster
	// after the Rollout read it to plan the target's revision (spec.basis); the Rollout plans
	// the cluster again from the journal.
	ReasonStalePlan        = "StalePlan"
	ReasonStored           = "Stored"
	ReasonHealthGateFailed = "HealthGateFailed"
	ReasonPrecheckFailed   = "PrecheckFailed"
	// ReasonPreflightFailed (Rollout Preflight/Stalled): a finding of error severity stopped
	// the revision before any cluster changed (spec.preflight.mode Enforce).
	ReasonPreflightFailed = "PreflightFailed"
	// ReasonPreflightPassed (Rollout Preflight): no finding stops the release (any warnings,
	// and errors of ignored checks or under mode Warn, are in the message).
	ReasonPreflightPassed = "PreflightPassed"
	// ReasonPlanned (Rollout Planned): status.plan holds the plan of spec.release (dry run).
	ReasonPlanned = "Planned"
	// ReasonPlanFailed (Rollout Planned): the dry run's plan could not be computed.
	ReasonPlanFailed       = "PlanFailed"
	ReasonRetriesExhausted = "RetriesExhausted"
	// ReasonStepFailed: a per-cluster step failed for good (see the message).
	ReasonStepFailed = "StepFailed"
	// ReasonFailedClusterRestored: failure policy RollbackFailed restored the failed cluster
	// and stopped the rollout.
	ReasonFailedClusterRestored = "FailedClusterRestored"
	ReasonManualRollback        = "ManualRollback"
	ReasonAutomaticRollback     = "AutomaticRollback"
	ReasonPaused                = "Paused"
	ReasonAwaitingApproval      = "AwaitingApproval"
	// ReasonReleaseNotReady (Rollout): the release is not stored yet, or its source could not
	// be fetched, verified or rendered (see the OperatorRelease's Ready condition).
	ReasonReleaseNotReady = "ReleaseNotReady"
	// ReasonForbidden: the controller may not do what it needs (the message names the access
	// and the fix).
	ReasonForbidden = "Forbidden"
	// ReasonBaking: a wave is done and its health is re-checked for its bake time.
	ReasonBaking          = "Baking"
	ReasonReleaseNotFound = "ReleaseNotFound"
	// ReasonInvalidSpec: the spec cannot be carried out (a CEL check that does not compile,
	// a wave naming no registered cluster); the message names the field.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonRolledBack (Rollout Ready/Stalled): spec.release failed and every changed cluster
	// was rolled back; it is not attempted again until spec.release changes or a retry.
	ReasonRolledBack = "RolledBack"
	// ReasonRollbackFailed: a rollback could not restore every cluster (see the message).
	ReasonRollbackFailed = "RollbackFailed"
	// ReasonChecksumMatched (Verified): the payload decrypts and matches its checksum.
	ReasonChecksumMatched = "ChecksumMatched"
	// ReasonChecksumMismatch (Verified): the payload is corrupted or truncated.
	ReasonChecksumMismatch = "ChecksumMismatch"
	// ReasonPayloadUnavailable (Verified): the payload could not be read (missing,
	// incomplete, its store or key unreachable).
	ReasonPayloadUnavailable = "PayloadUnavailable"

	// OperatorRelease reasons (Ready False, Stalled True) for a release that cannot be
	// fetched, verified, rendered or stored; the message names what failed and the fix.

	// ReasonSourceUnreachable: the source's server could not be reached (DNS, connection,
	// TLS, a 5xx answer). Retried.
	ReasonSourceUnreachable = "SourceUnreachable"
	// ReasonSourceUnauthorized: the source refused the credentials (401/403), or needs some.
	// Retried.
	ReasonSourceUnauthorized = "SourceUnauthorized"
	// ReasonSourceNotFound: the repository, chart version, tag, digest or commit does not
	// exist at the source. Retried (it may be pushed later).
	ReasonSourceNotFound = "SourceNotFound"
	// ReasonCredentialsInvalid: spec.source.secretRef names a Secret that is missing or holds
	// no usable credentials. Retried.
	ReasonCredentialsInvalid = "CredentialsInvalid"
	// ReasonDigestMismatch: the fetched content, or the manifests it renders to, do not
	// match the digest the spec pins.
	ReasonDigestMismatch = "DigestMismatch"
	// ReasonTagMoved: spec.source.oci.tag no longer points at spec.source.oci.digest.
	ReasonTagMoved = "TagMoved"
	// ReasonSourceInvalid: the content is not what the spec says (a corrupt .tgz, an image
	// that is not a bundle, a path that is not in the commit).
	ReasonSourceInvalid = "SourceInvalid"
	// ReasonValuesInvalid: spec.values or a ConfigMap of spec.valuesFrom is missing or not
	// valid YAML. Retried.
	ReasonValuesInvalid = "ValuesInvalid"
	// ReasonRenderFailed: the chart, bundle or manifests could not be rendered or do not bind
	// to the release (version, image).
	ReasonRenderFailed = "RenderFailed"
	// ReasonStoreFailed: the rendered manifests could not be stored in the hub. Retried.
	ReasonStoreFailed = "StoreFailed"
	// ReasonArtifactMissing: an uploaded release (no spec.source) whose manifests are not
	// stored in the hub, e.g. applied from Git without rewind release create.
	ReasonArtifactMissing = "ArtifactMissing"
	// ReasonFetching (Reconciling): the controller is fetching and rendering the source.
	ReasonFetching = "Fetching"
)

// ReasonSecretForbidden (MemberCluster): the controller may not read the member's kubeconfig
// Secret; the message names the Secret and the missing permission.
const ReasonSecretForbidden = "KubeconfigSecretForbidden"

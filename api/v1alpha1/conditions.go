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
	ReasonStored            = "Stored"
	ReasonHealthGateFailed  = "HealthGateFailed"
	ReasonPrecheckFailed    = "PrecheckFailed"
	ReasonRetriesExhausted  = "RetriesExhausted"
	// ReasonStepFailed: a per-cluster step failed for good (see the message).
	ReasonStepFailed = "StepFailed"
	// ReasonFailedClusterRestored: failure policy RollbackFailed restored the failed cluster
	// and stopped the rollout.
	ReasonFailedClusterRestored = "FailedClusterRestored"
	ReasonManualRollback        = "ManualRollback"
	ReasonAutomaticRollback     = "AutomaticRollback"
	ReasonPaused                = "Paused"
	ReasonAwaitingApproval      = "AwaitingApproval"
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
)

// ReasonSecretForbidden (MemberCluster): the controller may not read the member's kubeconfig
// Secret; the message names the Secret and the missing permission.
const ReasonSecretForbidden = "KubeconfigSecretForbidden"

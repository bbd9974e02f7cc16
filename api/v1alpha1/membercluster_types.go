package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SecretKeyRef names one key of a Secret.
type SecretKeyRef struct {
	// namespace of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key in the Secret's data that holds the kubeconfig.
	// +optional
	// +kubebuilder:default=kubeconfig
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// Modes of a member cluster (MemberCluster spec.mode).
const (
	// ModePush: the hub reaches the member with a kubeconfig it holds and runs the member's
	// RolloutTargets itself.
	ModePush = "Push"
	// ModePull: `rewind agent` runs in the member, reaches the hub with a credential limited
	// to the member's hub namespace and runs the member's RolloutTargets there; the hub holds
	// no credential for the member.
	ModePull = "Pull"
)

// MemberNamespacePrefix starts the name of a pull member's hub namespace: MemberNamespace.
const MemberNamespacePrefix = "rewind-member-"

// MaxPullMemberNameLength is the longest name of a pull member: its hub namespace,
// MemberNamespacePrefix + name, must be a DNS label (63 characters).
const MaxPullMemberNameLength = 63 - len(MemberNamespacePrefix)

// MemberNamespace is the hub namespace of pull member cluster: the only namespace its agent's
// hub credential reaches (see MemberClusterSpec.Mode).
func MemberNamespace(cluster string) string { return MemberNamespacePrefix + cluster }

// MemberClusterSpec says how to reach a member cluster.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'Push' || has(self.kubeconfigSecretRef)",message="spec.kubeconfigSecretRef is required in mode Push: register the member with rewind clusters add NAME --kubeconfig FILE, or set mode Pull (rewind clusters join NAME)",reason="FieldValueRequired"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Pull' || !has(self.kubeconfigSecretRef)",message="spec.kubeconfigSecretRef must be unset in mode Pull: the hub holds no credential for a pull member, its agent reaches the hub",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="self.mode == oldSelf.mode",message="spec.mode cannot change: a member's RolloutTargets live where its mode puts them; remove the member (rewind clusters leave NAME, or delete the MemberCluster) and register it again"
type MemberClusterSpec struct {
	// mode says who runs the member's RolloutTargets.
	//
	// Push (the default): the controller, with the kubeconfig of kubeconfigSecretRef, for
	// members the hub can reach.
	//
	// Pull: `rewind agent` inside the member, for members the hub cannot reach (NAT, private
	// API servers, edge sites) or must hold no credential for. `rewind clusters join NAME`
	// creates the member's hub namespace, rewind-member-NAME (MemberNamespace), and the
	// agent's identity there; the agent's hub credential reaches that namespace and nothing
	// else of the hub, apart from reading this MemberCluster and writing its status. The
	// agent heartbeats with the Lease rewind-agent in that namespace; a Lease not renewed for
	// unreachableTimeout makes the member unreachable (Reachable Unknown) and its targets wait,
	// as a push member's do.
	//
	// Where a pull member's work lives: the Rollout writes its RolloutTarget in the Rollout's
	// namespace, as for a push member, so that the Rollout, the CLI and the dashboard read
	// every target in one place. The hub's controller runs no step of it: it keeps a copy of
	// the target (same spec, labelled rewind.dev/source-namespace and rewind.dev/source-name)
	// in the member's hub namespace, with copies of what the steps read there (the releases
	// and renderings the target names; content-addressed, written once), the agent runs the
	// copy and writes its status, and the hub copies that status onto the target. The price is
	// one more hub write per status change; the agent's credential never leaves its namespace.
	// The snapshots of a pull member live in its namespace, under a key of its own.
	// +optional
	// +kubebuilder:default=Push
	// +kubebuilder:validation:Enum=Push;Pull
	Mode string `json:"mode,omitempty"`
	// kubeconfigSecretRef names the Secret whose key holds a kubeconfig for the member.
	// Required in mode Push, unset in mode Pull (the zero value in Go).
	// +optional
	KubeconfigSecretRef SecretKeyRef `json:"kubeconfigSecretRef,omitzero"`
	// checkInterval is how often the member is checked again.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	CheckInterval *metav1.Duration `json:"checkInterval,omitempty"`
	// unreachableTimeout is how long the controller's health probe of the member (a cheap
	// request every few seconds) may keep failing before the member counts as unreachable;
	// for a pull member, how long its agent's Lease may go unrenewed.
	// Until then a fault on the way to the member (a reset connection, a timeout, a 429 or
	// 5xx, an API server restarting) is retried in place and never fails a release; after it,
	// the member's RolloutTargets wait (or fail, where the Rollout's spec.unreachablePolicy is
	// Fail) and the Rollout says so in its Waiting condition.
	// +optional
	// +kubebuilder:default="3m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	UnreachableTimeout *metav1.Duration `json:"unreachableTimeout,omitempty"`
	// boundNamespaces are the hub namespaces whose Rollouts may target this member (in the
	// spirit of OCM's ManagedClusterSetBinding: the member's owner binds it, not the
	// namespace). A Rollout of another namespace that names the member in a wave stalls
	// (InvalidSpec), and its wave selectors pass the member over.
	//
	// Unset: a push member may be targeted from every namespace (as before bindings existed);
	// a pull member from none: its work is bound explicitly (rewind clusters join NAME
	// --bind NAMESPACE).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	BoundNamespaces []string `json:"boundNamespaces,omitempty"`
}

// Bound says whether Rollouts of namespace may target mc (spec.boundNamespaces).
func (mc *MemberCluster) Bound(namespace string) bool {
	if len(mc.Spec.BoundNamespaces) == 0 {
		return mc.Spec.Mode != ModePull
	}
	for _, ns := range mc.Spec.BoundNamespaces {
		if ns == namespace {
			return true
		}
	}
	return false
}

// InstalledRelease is what a member's installed-version record says about one operator.
type InstalledRelease struct {
	// operator is the operator's name.
	// +required
	Operator string `json:"operator"`
	// release is the OperatorRelease name.
	// +optional
	Release string `json:"release,omitempty"`
	// version is the SemVer version.
	// +optional
	Version string `json:"version,omitempty"`
	// namespace the operator is installed in.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// image is the operator image reference.
	// +optional
	Image string `json:"image,omitempty"`
	// gitCommit is the commit the release was built from.
	// +optional
	GitCommit string `json:"gitCommit,omitempty"`
	// chartVersion is the Helm chart version, if the release came from a chart.
	// +optional
	ChartVersion string `json:"chartVersion,omitempty"`
	// bundleVersion is the OLM operatorVersion, if the release came from a bundle.
	// +optional
	BundleVersion string `json:"bundleVersion,omitempty"`
	// digest is the content digest of the release's manifests.
	// +optional
	Digest string `json:"digest,omitempty"`
	// rollout that installed it (namespace/name).
	// +optional
	Rollout string `json:"rollout,omitempty"`
	// snapshot taken before it was installed.
	// +optional
	Snapshot string `json:"snapshot,omitempty"`
	// installedAt is when it was recorded.
	// +optional
	InstalledAt *metav1.Time `json:"installedAt,omitempty"`
}

// MemberClusterStatus is what the last check found.
type MemberClusterStatus struct {
	// conditions: Reachable (the health probe's verdict) and Ready (reachable, and its
	// identity and installed-version records read).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// clusterID is the UID of the member's kube-system namespace.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// serverVersion is the member's Kubernetes version.
	// +optional
	ServerVersion string `json:"serverVersion,omitempty"`
	// installed mirrors the member's installed-release records.
	// +optional
	// +listType=map
	// +listMapKey=operator
	Installed []InstalledRelease `json:"installed,omitempty"`
	// lastProbeSuccessTime is when the member's API server last answered the controller's
	// health probe.
	// +optional
	LastProbeSuccessTime *metav1.Time `json:"lastProbeSuccessTime,omitempty"`
	// consecutiveProbeFailures counts the health probes that failed since the last one that
	// succeeded. The member is unreachable (condition Reachable False) once they reach the
	// controller's --probe-failure-threshold.
	// +optional
	ConsecutiveProbeFailures int32 `json:"consecutiveProbeFailures,omitempty"`
	// lastCheckTime is when the member was last checked.
	// +optional
	LastCheckTime *metav1.Time `json:"lastCheckTime,omitempty"`
	// agent is what the hub knows of a pull member's agent (mode Pull only).
	// +optional
	Agent *AgentStatus `json:"agent,omitempty"`
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// AgentStatus is the state of a pull member's agent and of its hub credential. `rewind
// clusters join` writes namespace, serviceAccount and bootstrapExpiresAt; the agent writes
// joinedAt and credentialExpiresAt; the controller writes lastHeartbeatTime from the
// agent's Lease. No field holds a token.
type AgentStatus struct {
	// namespace is the member's hub namespace (rewind-member-NAME): its RolloutTargets, their
	// releases and snapshots, the agent's Lease. The agent's credential reaches no other.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// serviceAccount is the agent's identity in the hub (in namespace).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// bootstrapExpiresAt is when the bootstrap token of the last `rewind clusters join`
	// expires. It is good for one exchange, before then; the hub's API server refuses it
	// after either.
	// +optional
	BootstrapExpiresAt *metav1.Time `json:"bootstrapExpiresAt,omitempty"`
	// joinedAt is when the agent exchanged that bootstrap token for its credential (unset:
	// not yet).
	// +optional
	JoinedAt *metav1.Time `json:"joinedAt,omitempty"`
	// credentialExpiresAt is when the agent's current hub credential expires; the agent
	// renews it well before then.
	// +optional
	CredentialExpiresAt *metav1.Time `json:"credentialExpiresAt,omitempty"`
	// lastHeartbeatTime is the last renewal of the agent's Lease the controller saw. It looks
	// when the renewal it saw before would run out (the member's unreachableTimeout), not at
	// every renewal: the Lease rewind-agent in the member's hub namespace has the latest.
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`
}

// MemberCluster is a member cluster that rewind releases operators to: reached through a
// kubeconfig Secret in the hub (mode Push), or reaching the hub through its agent (mode Pull).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mc,categories=rewind
// +kubebuilder:validation:XValidation:rule="self.spec.mode != 'Pull' || (size(self.metadata.name) <= 49 && !self.metadata.name.contains('.'))",message="a pull member's name must be a DNS label of at most 49 characters (no dots): its hub namespace is rewind-member-NAME"
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Reachable",type=string,JSONPath=`.status.conditions[?(@.type=="Reachable")].status`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.serverVersion`
// +kubebuilder:printcolumn:name="Cluster ID",type=string,JSONPath=`.status.clusterID`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Reachable")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MemberCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MemberClusterSpec `json:"spec"`
	// +optional
	Status MemberClusterStatus `json:"status,omitempty"`
}

// MemberClusterList is a list of MemberClusters.
// +kubebuilder:object:root=true
type MemberClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MemberCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MemberCluster{}, &MemberClusterList{})
}

// MemberCluster reasons of pull members.
const (
	// ReasonPullMode: the hub holds no credential for a pull member; its agent does its work.
	ReasonPullMode = "PullMode"
	// ReasonAwaitingAgent (Reachable Unknown): no agent of the pull member has joined yet, or
	// its Lease has not been renewed for the member's unreachableTimeout.
	ReasonAwaitingAgent = "AwaitingAgent"
	// ReasonBootstrapTokenExpired (Reachable Unknown): the bootstrap token of the last
	// `rewind clusters join` expired unused; the hub's API server refuses it.
	ReasonBootstrapTokenExpired = "BootstrapTokenExpired"
)

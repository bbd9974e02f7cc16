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

// MemberClusterSpec says how to reach a member cluster.
type MemberClusterSpec struct {
	// kubeconfigSecretRef names the Secret whose key holds a kubeconfig for the member.
	// +required
	KubeconfigSecretRef SecretKeyRef `json:"kubeconfigSecretRef"`
	// checkInterval is how often the member is checked again.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	CheckInterval *metav1.Duration `json:"checkInterval,omitempty"`
	// unreachableTimeout is how long the controller's health probe of the member (a cheap
	// request every few seconds) may keep failing before the member counts as unreachable.
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
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// MemberCluster is a member cluster that rewind releases operators to, reached through a
// kubeconfig Secret in the hub.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mc,categories=rewind
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

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SemVerPattern is the SemVer 2.0 grammar (an optional leading "v" is allowed).
const SemVerPattern = `^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-((0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$`

// Release source formats.
const (
	SourceManifests = "Manifests"
	SourceChart     = "Chart"
	SourceBundle    = "Bundle"
)

// ChartInfo identifies the Helm chart a release was rendered from.
type ChartInfo struct {
	// name of the chart.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// version is the chart's SemVer version (Chart.yaml version).
	// +required
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^v?(0|[1-9][0-9]*)[.](0|[1-9][0-9]*)[.](0|[1-9][0-9]*)(-[0-9A-Za-z-]+([.][0-9A-Za-z-]+)*)?([+][0-9A-Za-z-]+([.][0-9A-Za-z-]+)*)?$')",message="must be a SemVer version such as 1.4.2 (Chart.yaml version)"
	Version string `json:"version"`
	// appVersion is the chart's appVersion (Chart.yaml appVersion); required with a chart.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	AppVersion string `json:"appVersion"`
}

// BundleInfo identifies the OLM registry+v1 bundle a release was converted from.
type BundleInfo struct {
	// package is the OLM package name (metadata/annotations.yaml).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Package string `json:"package,omitempty"`
	// channel is the default channel (metadata/annotations.yaml).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Channel string `json:"channel,omitempty"`
	// operatorVersion is the bundle's olm.operatorVersion (the CSV spec.version), SemVer.
	// +required
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^v?(0|[1-9][0-9]*)[.](0|[1-9][0-9]*)[.](0|[1-9][0-9]*)(-[0-9A-Za-z-]+([.][0-9A-Za-z-]+)*)?([+][0-9A-Za-z-]+([.][0-9A-Za-z-]+)*)?$')",message="must be a SemVer version such as 1.4.2 (the CSV spec.version)"
	OperatorVersion string `json:"operatorVersion"`
}

// OperatorReleaseSpec binds one release version of an operator: image, CRDs, chart and bundle.
// It is immutable once created.
// +kubebuilder:validation:XValidation:rule="self.image.matches('@sha256:[0-9a-f]{64}$') || (self.image.matches('^[^@]+:[0-9a-f]{7,40}$') && (self.gitCommit.startsWith(self.image.substring(self.image.lastIndexOf(':') + 1)) || self.image.substring(self.image.lastIndexOf(':') + 1).startsWith(self.gitCommit)))",message="spec.image must be pinned: use a digest (repo@sha256:<64 hex>) or a tag equal to spec.gitCommit (the full commit or at least its first 7 hex characters); mutable tags such as latest, stable, main, master, dev or edge are rejected",fieldPath=".image",reason="FieldValueInvalid"
// +kubebuilder:validation:XValidation:rule="self.source != 'Chart' || has(self.chart)",message="spec.chart (name, version, appVersion) is required when spec.source is Chart",fieldPath=".chart",reason="FieldValueRequired"
// +kubebuilder:validation:XValidation:rule="self.source != 'Bundle' || has(self.bundle)",message="spec.bundle (operatorVersion) is required when spec.source is Bundle",fieldPath=".bundle",reason="FieldValueRequired"
type OperatorReleaseSpec struct {
	// operator is the name of the operator this is a release of.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Operator string `json:"operator"`
	// version is the release's SemVer version, e.g. 1.4.2.
	// +required
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^v?(0|[1-9][0-9]*)[.](0|[1-9][0-9]*)[.](0|[1-9][0-9]*)(-[0-9A-Za-z-]+([.][0-9A-Za-z-]+)*)?([+][0-9A-Za-z-]+([.][0-9A-Za-z-]+)*)?$')",message="must be a SemVer version such as 1.4.2 or 2.0.0-rc.1"
	Version string `json:"version"`
	// gitCommit is the commit the operator was built from: 7 to 40 lowercase hex characters.
	// +required
	// +kubebuilder:validation:MinLength=7
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9a-f]{7,40}$')",message="must be a git commit: 7 to 40 lowercase hex characters"
	GitCommit string `json:"gitCommit"`
	// image is the operator image, pinned by digest (repo@sha256:...) or by a tag equal to
	// gitCommit.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`
	// source is the format the manifests came from: Manifests, Chart or Bundle.
	// +required
	// +kubebuilder:validation:Enum=Manifests;Chart;Bundle
	Source string `json:"source"`
	// chart is the Helm chart the manifests were rendered from (source Chart).
	// +optional
	Chart *ChartInfo `json:"chart,omitempty"`
	// bundle is the OLM bundle the manifests were converted from (source Bundle).
	// +optional
	Bundle *BundleInfo `json:"bundle,omitempty"`
	// digest is the content digest of the rendered manifests (sha256 over their canonical
	// serialization); the manifests are stored content-addressed under it.
	// +required
	// +kubebuilder:validation:XValidation:rule="self.matches('^sha256:[0-9a-f]{64}$')",message="must be sha256:<64 lowercase hex>"
	// +kubebuilder:validation:MaxLength=71
	Digest string `json:"digest"`
}

// CRDInfo describes one CRD a release ships.
type CRDInfo struct {
	// name of the CRD (plural.group).
	// +required
	Name string `json:"name"`
	// group of the CRD.
	// +required
	Group string `json:"group"`
	// kind of the custom resources.
	// +required
	Kind string `json:"kind"`
	// scope is Namespaced or Cluster.
	// +optional
	Scope string `json:"scope,omitempty"`
	// servedVersions are the versions the CRD serves.
	// +optional
	// +listType=atomic
	ServedVersions []string `json:"servedVersions,omitempty"`
	// storageVersion is the version objects are stored at.
	// +required
	StorageVersion string `json:"storageVersion"`
	// conversionStrategy is None or Webhook.
	// +optional
	ConversionStrategy string `json:"conversionStrategy,omitempty"`
}

// OperatorReleaseStatus describes the stored release.
type OperatorReleaseStatus struct {
	// conditions: Ready when the manifests are stored and readable.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// crds the release ships.
	// +optional
	// +listType=map
	// +listMapKey=name
	CRDs []CRDInfo `json:"crds,omitempty"`
	// objects is the number of manifests in the release.
	// +optional
	Objects int32 `json:"objects,omitempty"`
	// bytes is the size of the canonical manifests.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// artifact is where the manifests are stored.
	// +optional
	Artifact string `json:"artifact,omitempty"`
}

// OperatorRelease is one immutable release of an operator: its version, pinned image, git
// commit, chart and bundle versions, and the digest of its rendered manifests.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=orel,categories=rewind
// +kubebuilder:printcolumn:name="Operator",type=string,JSONPath=`.spec.operator`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.source`
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=`.spec.digest`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OperatorRelease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: an OperatorRelease never changes; create a new release under a new name instead"
	Spec OperatorReleaseSpec `json:"spec"`
	// +optional
	Status OperatorReleaseStatus `json:"status,omitempty"`
}

// OperatorReleaseList is a list of OperatorReleases.
// +kubebuilder:object:root=true
type OperatorReleaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OperatorRelease `json:"items"`
}

func init() {
	SchemeBuilder.Register(&OperatorRelease{}, &OperatorReleaseList{})
}

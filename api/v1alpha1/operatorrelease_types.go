package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SemVerPattern is the SemVer 2.0 grammar (an optional leading "v" is allowed).
const SemVerPattern = `^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-((0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$`

// Release formats: what the manifests of a release are made from.
const (
	// FormatManifests is a folder of plain YAML/JSON manifests.
	FormatManifests = "Manifests"
	// FormatChart is a Helm chart, rendered with the Helm SDK.
	FormatChart = "Chart"
	// FormatBundle is an OLM registry+v1 bundle, turned into plain manifests.
	FormatBundle = "Bundle"
)

// ReleaseSource says where the controller fetches a release's manifests from: exactly one of
// oci, helmRepository and git, each pinned to immutable content.
// +kubebuilder:validation:XValidation:rule="(has(self.oci) ? 1 : 0) + (has(self.helmRepository) ? 1 : 0) + (has(self.git) ? 1 : 0) == 1",message="spec.source takes exactly one of oci, helmRepository and git"
type ReleaseSource struct {
	// oci is a Helm chart pushed as an OCI artifact, or an OLM bundle image, in an OCI
	// registry, referenced by digest.
	// +optional
	OCI *OCISource `json:"oci,omitempty"`
	// helmRepository is a chart of a Helm chart repository (index.yaml), pinned by the sha256
	// of its .tgz.
	// +optional
	HelmRepository *HelmRepositorySource `json:"helmRepository,omitempty"`
	// git is a folder of a Git repository at a commit.
	// +optional
	Git *GitSource `json:"git,omitempty"`
	// secretRef names a Secret in the release's namespace with the credentials for the
	// source: keys username and password (basic auth; a registry exchanges them for a token),
	// or token (a bearer token; OCI and Git), or .dockerconfigjson (OCI, as an image pull
	// Secret), and ca.crt (PEM CA certificates to trust besides the system's).
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// OCISource is an OCI artifact: a Helm chart (config media type
// application/vnd.cncf.helm.config.v1+json) or an OLM bundle image (manifests/ and metadata/
// at the image root). Which one it is comes from the artifact's media type.
type OCISource struct {
	// repository is the registry host and repository path, without oci:// and without tag or
	// digest, e.g. registry.example.com/charts/mysql-operator.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.contains('://')",message="give the repository without a scheme, e.g. registry.example.com/charts/mysql-operator (not oci://...)"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-zA-Z0-9.-]+(:[0-9]+)?(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)+$')",message="must be a registry host and a lowercase repository path, e.g. registry.example.com/charts/mysql-operator, without tag or digest (put them in tag and digest)"
	Repository string `json:"repository"`
	// digest of the artifact's manifest, sha256:<64 hex>: what is fetched.
	// +required
	// +kubebuilder:validation:MaxLength=71
	// +kubebuilder:validation:XValidation:rule="self.matches('^sha256:[0-9a-f]{64}$')",message="must be the manifest digest sha256:<64 lowercase hex>; a tag alone would move"
	Digest string `json:"digest"`
	// tag is checked, not followed: when set, it must still point at digest, and a tag that was
	// moved makes the release fail (reason TagMoved).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_][A-Za-z0-9_.-]*$')",message="must be an OCI tag: letters, digits, _ . and -, not starting with . or -"
	Tag string `json:"tag,omitempty"`
	// insecure allows plain HTTP to the registry.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

// HelmRepositorySource is one chart version of a Helm chart repository.
type HelmRepositorySource struct {
	// url of the repository, where index.yaml is: https://charts.example.com (or http://).
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/?#]+')",message="must be an https:// (or http://) URL of a Helm chart repository; for a chart in an OCI registry use spec.source.oci"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@')",message="must not carry user information (USER:PASSWORD@): credentials do not belong in the spec; put them in a Secret and name it in spec.source.secretRef"
	URL string `json:"url"`
	// chart is the chart's name in the repository index.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!self.contains('/')",message="must be a chart name (as in index.yaml), not a path or URL"
	Chart string `json:"chart"`
	// version is the chart's exact SemVer version (no ranges).
	// +required
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^v?(0|[1-9][0-9]*)[.](0|[1-9][0-9]*)[.](0|[1-9][0-9]*)(-[0-9A-Za-z-]+([.][0-9A-Za-z-]+)*)?([+][0-9A-Za-z-]+([.][0-9A-Za-z-]+)*)?$')",message="must be an exact SemVer version such as 1.4.2 (ranges are not allowed: a release is immutable)"
	Version string `json:"version"`
	// digest is the sha256 of the chart's .tgz, sha256:<64 hex> (the digest field of the
	// chart's entry in index.yaml, or `sha256sum chart.tgz`).
	// +required
	// +kubebuilder:validation:MaxLength=71
	// +kubebuilder:validation:XValidation:rule="self.matches('^sha256:[0-9a-f]{64}$')",message="must be sha256:<64 lowercase hex>, the sha256 of the chart's .tgz"
	Digest string `json:"digest"`
}

// GitSource is a folder of a Git repository at one commit.
type GitSource struct {
	// url of the repository: https:// (or http://).
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/?#]+')",message="must be an https:// (or http://) URL; ssh:// and scp-like (git@host:path) URLs are not supported"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@')",message="must not carry user information (USER:TOKEN@): credentials do not belong in the spec; put them in a Secret and name it in spec.source.secretRef"
	URL string `json:"url"`
	// commit is the full 40-hex commit SHA (a branch or tag would move).
	// +required
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9a-f]{40}$')",message="must be the full commit SHA: 40 lowercase hex characters (a branch or tag would move)"
	Commit string `json:"commit"`
	// path of the folder in the repository (default: the repository root).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')",message="must be a relative path inside the repository, without .."
	Path string `json:"path,omitempty"`
	// kind is what the folder holds: Manifests (plain YAML/JSON), Chart (a Helm chart) or
	// Bundle (an OLM registry+v1 bundle).
	// +required
	// +kubebuilder:validation:Enum=Manifests;Chart;Bundle
	Kind string `json:"kind"`
}

// ValuesReference is a ConfigMap key holding Helm values (YAML).
type ValuesReference struct {
	// configMap is the name of a ConfigMap in the release's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ConfigMap string `json:"configMap"`
	// key of the ConfigMap that holds the values (default values.yaml).
	// +optional
	// +kubebuilder:default=values.yaml
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
	// optional makes a missing ConfigMap or key count as no values instead of an error.
	// +optional
	Optional bool `json:"optional,omitempty"`
}

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
// +kubebuilder:validation:XValidation:rule="has(self.source) || has(self.format)",message="spec.format (Manifests, Chart or Bundle) is required for a release uploaded by rewind release create; or give spec.source for the controller to fetch",fieldPath=".format",reason="FieldValueRequired"
// +kubebuilder:validation:XValidation:rule="has(self.source) || has(self.digest)",message="spec.digest is required for a release uploaded by rewind release create; or give spec.source for the controller to fetch",fieldPath=".digest",reason="FieldValueRequired"
// +kubebuilder:validation:XValidation:rule="!has(self.source) || !has(self.format)",message="spec.format is for uploaded releases only: a release from spec.source takes its format from the source (git.kind, the OCI artifact's media type, Chart for a Helm repository) and records it in status.format",fieldPath=".format",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.source) || (!has(self.chart) && !has(self.bundle))",message="spec.chart and spec.bundle are for uploaded releases only: for a release from spec.source the controller records them in status.chart and status.bundle",fieldPath=".chart",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="has(self.source) || (!has(self.values) && !has(self.valuesFrom) && !has(self.apiVersions))",message="spec.values, spec.valuesFrom and spec.apiVersions apply to a release from spec.source; for an uploaded release pass --values and --api-versions to rewind release create",fieldPath=".values",reason="FieldValueForbidden"
// +kubebuilder:validation:XValidation:rule="!has(self.format) || self.format != 'Chart' || has(self.chart)",message="spec.chart (name, version, appVersion) is required when spec.format is Chart",fieldPath=".chart",reason="FieldValueRequired"
// +kubebuilder:validation:XValidation:rule="!has(self.format) || self.format != 'Bundle' || has(self.bundle)",message="spec.bundle (operatorVersion) is required when spec.format is Bundle",fieldPath=".bundle",reason="FieldValueRequired"
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
	// format is what an uploaded release's manifests were made from: Manifests, Chart or
	// Bundle (rewind release create --manifests, --chart, --bundle). A release from
	// spec.source has none: its format is recorded in status.format.
	// +optional
	// +kubebuilder:validation:Enum=Manifests;Chart;Bundle
	Format string `json:"format,omitempty"`
	// source is where the controller fetches the manifests from (an OCI registry, a Helm
	// repository or a Git repository), pinned to immutable content. A release without a
	// source was rendered and uploaded by rewind release create.
	// +optional
	Source *ReleaseSource `json:"source,omitempty"`
	// installNamespace is the namespace a chart or bundle from spec.source is rendered for
	// (default: <operator>-system, as rewind release create).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	InstallNamespace string `json:"installNamespace,omitempty"`
	// values are Helm values for a chart from spec.source, merged over spec.valuesFrom.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Values *apiextensionsv1.JSON `json:"values,omitempty"`
	// valuesFrom are ConfigMap keys with Helm values for a chart from spec.source, merged in
	// order (a later one wins), then spec.values over them. They are read once, when the
	// release is rendered: a later change of a ConfigMap does not change the release.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ValuesFrom []ValuesReference `json:"valuesFrom,omitempty"`
	// apiVersions are APIs the member clusters serve besides Kubernetes' own (group/version
	// or group/version/Kind), for a chart from spec.source that renders objects only where the
	// cluster has them (as helm --api-versions).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	APIVersions []string `json:"apiVersions,omitempty"`
	// chart is the Helm chart the manifests were rendered from (format Chart).
	// +optional
	Chart *ChartInfo `json:"chart,omitempty"`
	// bundle is the OLM bundle the manifests were converted from (format Bundle).
	// +optional
	Bundle *BundleInfo `json:"bundle,omitempty"`
	// digest is the content digest of the rendered manifests (sha256 over their canonical
	// serialization); the manifests are stored content-addressed under it. Required for an
	// uploaded release; for a release from spec.source it is optional and, when given, the
	// rendered manifests must match it (the controller records the digest in status.digest).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.matches('^sha256:[0-9a-f]{64}$')",message="must be sha256:<64 lowercase hex>"
	// +kubebuilder:validation:MaxLength=71
	Digest string `json:"digest,omitempty"`
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
	// observedGeneration is the generation the status was last written for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready when the manifests are stored and readable; Stalled (with Ready
	// False) when a release from spec.source cannot be fetched, verified or rendered, with a
	// reason naming what failed and a message saying how to fix it.
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
	// digest of the stored manifests (spec.digest of an uploaded release; for a release from
	// spec.source, the digest it rendered to).
	// +optional
	// +kubebuilder:validation:MaxLength=71
	Digest string `json:"digest,omitempty"`
	// format the manifests were made from: Manifests, Chart or Bundle.
	// +optional
	Format string `json:"format,omitempty"`
	// chart the manifests were rendered from (format Chart).
	// +optional
	Chart *ChartInfo `json:"chart,omitempty"`
	// bundle the manifests were converted from (format Bundle).
	// +optional
	Bundle *BundleInfo `json:"bundle,omitempty"`
	// renderInput is the digest of what the chart was rendered from (the chart, its values,
	// the release name, namespace and API versions), stored content-addressed beside the
	// manifests (format Chart): a Rollout renders it again with per-cluster values
	// (spec.valuesFrom).
	// +optional
	// +kubebuilder:validation:MaxLength=71
	RenderInput string `json:"renderInput,omitempty"`
}

// OperatorRelease is one immutable release of an operator: its version, pinned image, git
// commit, chart and bundle versions, and the digest of its rendered manifests.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=orel,categories=rewind
// +kubebuilder:printcolumn:name="Operator",type=string,JSONPath=`.spec.operator`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Format",type=string,JSONPath=`.status.format`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=`.status.digest`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
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

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SnapshotSpec says what was captured. It is immutable.
type SnapshotSpec struct {
	// cluster is the MemberCluster captured.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Cluster string `json:"cluster"`
	// operator whose state was captured.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Operator string `json:"operator"`
	// release installed at capture time ("" if none).
	// +optional
	Release string `json:"release,omitempty"`
	// version installed at capture time.
	// +optional
	Version string `json:"version,omitempty"`
	// reason for the capture, e.g. "before rollout default/mysql to v2" or "manual".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// rollout that took it (namespace/name), if any.
	// +optional
	Rollout string `json:"rollout,omitempty"`
}

// ObjectCounts counts captured objects.
type ObjectCounts struct {
	// crds captured.
	// +optional
	CRDs int32 `json:"crds,omitempty"`
	// customResources captured.
	// +optional
	CustomResources int32 `json:"customResources,omitempty"`
	// associated resources captured (install-namespace objects and owned children).
	// +optional
	Associated int32 `json:"associated,omitempty"`
}

// SnapshotStatus is the metadata of the capture; the payload lives in the store.
type SnapshotStatus struct {
	// conditions: Ready when stored; Verified is the outcome of the last checksum check
	// (rewind snapshot verify): True, or False with the problem.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// location of the payload in the store (URL).
	// +optional
	Location string `json:"location,omitempty"`
	// checksum is sha256:<hex> over the canonical plaintext payload.
	// +optional
	Checksum string `json:"checksum,omitempty"`
	// counts of captured objects.
	// +optional
	Counts ObjectCounts `json:"counts,omitempty"`
	// bytes is the size of the canonical payload before compression.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// storedBytes is the size of the encrypted payload in the store.
	// +optional
	StoredBytes int64 `json:"storedBytes,omitempty"`
	// clusterID is the UID of the member's kube-system namespace.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// serverVersion is the member's Kubernetes version.
	// +optional
	ServerVersion string `json:"serverVersion,omitempty"`
	// capturedAt is when the capture finished.
	// +optional
	CapturedAt *metav1.Time `json:"capturedAt,omitempty"`
	// captureDuration is how long the capture took, from its first read of the member to the
	// payload stored: with bytes, the capture rate rewind measured on this cluster, from which
	// `rewind plan` estimates the time of the next snapshot.
	// +optional
	CaptureDuration *metav1.Duration `json:"captureDuration,omitempty"`
	// store is the SnapshotStore (same namespace) that holds the payload; empty for a payload
	// written to a store URL (location) directly.
	// +optional
	Store string `json:"store,omitempty"`
	// keyID identifies the key-encryption key that wrapped the payload's data key (the payload
	// records it too). Not secret.
	// +optional
	KeyID string `json:"keyID,omitempty"`
	// keyRef is that key, as the store named it when the snapshot was taken; the payload is
	// read with it even after the store's key is rotated. Empty: the hub's default key.
	// +optional
	KeyRef *SnapshotKeyRef `json:"keyRef,omitempty"`
}

// Snapshot is one capture of one operator's state on one member cluster: metadata only; the
// encrypted payload lives in the snapshot store.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=snap,categories=rewind
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Operator",type=string,JSONPath=`.spec.operator`
// +kubebuilder:printcolumn:name="Release",type=string,JSONPath=`.spec.release`
// +kubebuilder:printcolumn:name="CRs",type=integer,JSONPath=`.status.counts.customResources`
// +kubebuilder:printcolumn:name="Bytes",type=integer,JSONPath=`.status.bytes`,priority=1
// +kubebuilder:printcolumn:name="Checksum",type=string,JSONPath=`.status.checksum`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Snapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: a snapshot records one capture"
	Spec SnapshotSpec `json:"spec"`
	// +optional
	Status SnapshotStatus `json:"status,omitempty"`
}

// SnapshotList is a list of Snapshots.
// +kubebuilder:object:root=true
type SnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Snapshot `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Snapshot{}, &SnapshotList{})
}

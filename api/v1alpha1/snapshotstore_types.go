package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Snapshot store providers.
const (
	// StoreProviderHubSecrets keeps payloads as chunked Secrets in the store's hub namespace
	// (the embedded default).
	StoreProviderHubSecrets = "HubSecrets"
	// StoreProviderS3 is Amazon S3 or an S3-compatible service (MinIO, Ceph, versitygw, ...).
	StoreProviderS3 = "S3"
	// StoreProviderGCS is Google Cloud Storage.
	StoreProviderGCS = "GCS"
	// StoreProviderAzureBlob is Azure Blob Storage.
	StoreProviderAzureBlob = "AzureBlob"
	// StoreProviderFolder is a folder of the controller's file system (a mounted volume).
	StoreProviderFolder = "Folder"
)

// Condition types and reasons of SnapshotStores.
const (
	// ConditionWritable (SnapshotStore) says the last probe wrote, read back and deleted an
	// object in the store.
	ConditionWritable = "Writable"
	// ConditionKeyAvailable (SnapshotStore) says the last probe wrapped and unwrapped a data
	// key with the store's key-encryption key.
	ConditionKeyAvailable = "KeyAvailable"

	// ReasonProbeSucceeded: the probe object was written, read back and deleted.
	ReasonProbeSucceeded = "ProbeSucceeded"
	// ReasonBucketNotFound: the bucket (or container, or folder) does not exist.
	ReasonBucketNotFound = "BucketNotFound"
	// ReasonAccessDenied: the store refused the credentials or the operation.
	ReasonAccessDenied = "AccessDenied"
	// ReasonStoreUnreachable: the store did not answer (network, DNS, TLS, timeout).
	ReasonStoreUnreachable = "StoreUnreachable"
	// ReasonProbeFailed: the store answered but the probe failed otherwise (see the message).
	ReasonProbeFailed = "ProbeFailed"
	// ReasonCredentialsNotFound: the credentials Secret (or a key in it) is missing.
	ReasonCredentialsNotFound = "CredentialsNotFound"
	// ReasonKeyAvailable: the key-encryption key wrapped and unwrapped a data key.
	ReasonKeyAvailable = "KeyAvailable"
	// ReasonKeyUnavailable: the key-encryption key could not be reached or used.
	ReasonKeyUnavailable = "KeyUnavailable"
	// ReasonStoreNotReady (RolloutTarget, SnapshotSchedule): the named SnapshotStore is not
	// Ready, so no snapshot is taken into it.
	ReasonStoreNotReady = "StoreNotReady"
)

// SnapshotKeyRef names the key-encryption key (KEK) that wraps each payload's data key. Set
// exactly one of kms and secretRef; leave the whole keyRef out to use the hub's default key
// (the Secret rewind-system/rewind-snapshot-key, created on first use).
// +kubebuilder:validation:XValidation:rule="has(self.kms) != has(self.secretRef)",message="keyRef: set exactly one of kms (a KMS key URL) and secretRef (a hub Secret holding a 32-byte key)"
type SnapshotKeyRef struct {
	// kms is a gocloud.dev/secrets keeper URL naming a KMS key, e.g.
	// awskms://alias/rewind?region=eu-west-1 (add endpoint=https://... for a KMS-compatible
	// service), gcpkms://projects/P/locations/L/keyRings/R/cryptoKeys/K or
	// azurekeyvault://VAULT.vault.azure.net/keys/K. The URL names the key; it holds no secret.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(awskms|gcpkms|azurekeyvault|hashivault)://`
	KMS string `json:"kms,omitempty"`
	// secretRef names a hub Secret in the store's namespace and the data key in it that holds
	// a 32-byte AES key (raw, or base64 as base64key:// URLs carry it).
	// +optional
	SecretRef *SecretKeyReference `json:"secretRef,omitempty"`
	// credentialsSecretRef names a hub Secret (same namespace) with the KMS client's
	// credentials (for AWS: accessKeyID, secretAccessKey, optional sessionToken). Default: the
	// store's credentialsSecretRef, else the controller's environment.
	// +optional
	CredentialsSecretRef *LocalSecretReference `json:"credentialsSecretRef,omitempty"`
}

// SecretKeyReference names a data key of a Secret in the same namespace.
type SecretKeyReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key in the Secret's data.
	// +optional
	// +kubebuilder:default=key
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// LocalSecretReference names a Secret in the same namespace.
type LocalSecretReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// SnapshotStoreSpec says where snapshot payloads (and their metadata) are written and which
// key wraps their data keys.
// +kubebuilder:validation:XValidation:rule="!(self.provider in ['S3', 'GCS', 'AzureBlob']) || has(self.bucket)",message="bucket is required for providers S3, GCS and AzureBlob"
// +kubebuilder:validation:XValidation:rule="self.provider != 'Folder' || has(self.path)",message="path is required for provider Folder (an absolute path on the controller's file system)"
// +kubebuilder:validation:XValidation:rule="self.provider != 'HubSecrets' || (!has(self.bucket) && !has(self.endpoint) && !has(self.path))",message="provider HubSecrets keeps payloads in this namespace's Secrets: leave bucket, endpoint and path unset"
type SnapshotStoreSpec struct {
	// provider is the kind of storage: HubSecrets (chunked Secrets in this hub namespace, the
	// default), S3 (or any S3-compatible service), GCS, AzureBlob or Folder.
	// +optional
	// +kubebuilder:default=HubSecrets
	// +kubebuilder:validation:Enum=HubSecrets;S3;GCS;AzureBlob;Folder
	Provider string `json:"provider,omitempty"`
	// bucket (S3, GCS) or container (AzureBlob).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Bucket string `json:"bucket,omitempty"`
	// prefix is prepended to every object name, e.g. "rewind/prod/".
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Prefix string `json:"prefix,omitempty"`
	// region of the bucket (S3).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`
	// endpoint of an S3-compatible service (https://s3.example.com) or of a non-default
	// Azure/GCS endpoint. S3 endpoints use path-style addressing.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	Endpoint string `json:"endpoint,omitempty"`
	// path is the absolute folder for provider Folder.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^/`
	Path string `json:"path,omitempty"`
	// credentialsSecretRef names a hub Secret (same namespace) with the store's credentials:
	// S3: accessKeyID, secretAccessKey, optional sessionToken; GCS: serviceAccount.json;
	// AzureBlob: accountName, accountKey. Without it the controller's environment is used
	// (instance roles, workload identity).
	// +optional
	CredentialsSecretRef *LocalSecretReference `json:"credentialsSecretRef,omitempty"`
	// keyRef is the key-encryption key of new payloads. Changing it rotates the key: new
	// snapshots use the new key, and each existing snapshot keeps being read with the key it
	// records (status.keyRef), which must stay reachable.
	// +optional
	KeyRef *SnapshotKeyRef `json:"keyRef,omitempty"`
	// probeInterval is how often the store is checked (write, read back and delete a small
	// object).
	// +optional
	// +kubebuilder:default="5m"
	ProbeInterval *metav1.Duration `json:"probeInterval,omitempty"`
}

// SnapshotStoreStatus says whether snapshots can be written to the store now.
type SnapshotStoreStatus struct {
	// observedGeneration is the generation last probed.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready (Writable and KeyAvailable), Writable (the last probe wrote, read and
	// deleted an object; reasons BucketNotFound, AccessDenied, StoreUnreachable,
	// CredentialsNotFound, ProbeFailed) and KeyAvailable.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// url is the store's location (no credentials), as Snapshots record it.
	// +optional
	URL string `json:"url,omitempty"`
	// keyID identifies the key-encryption key new payloads are wrapped with (not secret).
	// +optional
	KeyID string `json:"keyID,omitempty"`
	// lastProbeTime is when the store was last checked.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
}

// SnapshotStore is where snapshot payloads live: hub Secrets, an S3-compatible bucket, GCS,
// Azure Blob or a folder, with the key that wraps their data keys. Rollouts
// (spec.snapshotStore), SnapshotSchedules and `rewind snapshot take --store` name it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=snapstore,categories=rewind
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.status.url`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Key",type=string,JSONPath=`.status.keyID`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SnapshotStore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SnapshotStoreSpec `json:"spec"`
	// +optional
	Status SnapshotStoreStatus `json:"status,omitempty"`
}

// SnapshotStoreList is a list of SnapshotStores.
// +kubebuilder:object:root=true
type SnapshotStoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SnapshotStore `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SnapshotStore{}, &SnapshotStoreList{})
}

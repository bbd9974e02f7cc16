package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// NotificationEvent is a kind of rollout event a NotificationPolicy can send.
// +kubebuilder:validation:Enum=RevisionStarted;RevisionFinished;WaveStarted;WaveFinished;GateFailed;RollbackStarted;RollbackFinished;Stalled;ApprovalNeeded
type NotificationEvent string

// Notification events.
const (
	// EventRevisionStarted: a revision started rolling a release out (not a rollback).
	EventRevisionStarted NotificationEvent = "RevisionStarted"
	// EventRevisionFinished: a revision ended (outcome Succeeded, Failed, RolledBack or
	// Superseded).
	EventRevisionFinished NotificationEvent = "RevisionFinished"
	// EventWaveStarted: the first cluster of a wave was opened.
	EventWaveStarted NotificationEvent = "WaveStarted"
	// EventWaveFinished: every cluster of a wave is done and its bake passed.
	EventWaveFinished NotificationEvent = "WaveFinished"
	// EventGateFailed: a cluster failed its health gate; the message and the measurements
	// say what failed it.
	EventGateFailed NotificationEvent = "GateFailed"
	// EventRollbackStarted: the failure policy started an automatic rollback.
	EventRollbackStarted NotificationEvent = "RollbackStarted"
	// EventRollbackFinished: that rollback ended.
	EventRollbackFinished NotificationEvent = "RollbackFinished"
	// EventStalled: the rollout stopped on a problem that needs a person (condition Stalled).
	EventStalled NotificationEvent = "Stalled"
	// EventApprovalNeeded: a wave (requireApproval) or a cluster (an inconclusive metric)
	// waits for rewind rollout approve.
	EventApprovalNeeded NotificationEvent = "ApprovalNeeded"
)

// NotificationEvents lists every event, in the order they are computed.
var NotificationEvents = []NotificationEvent{EventRevisionStarted, EventWaveStarted, EventApprovalNeeded, EventGateFailed,
	EventWaveFinished, EventRevisionFinished, EventRollbackStarted, EventRollbackFinished, EventStalled}

// Destination types.
const (
	// DestinationWebhook POSTs rewind's own JSON (application/json).
	DestinationWebhook = "Webhook"
	// DestinationCloudEvents POSTs a CloudEvent in structured mode
	// (application/cloudevents+json).
	DestinationCloudEvents = "CloudEvents"
	// DestinationSlack POSTs a Slack incoming-webhook message ({"text": ..., "blocks": ...}).
	DestinationSlack = "Slack"
)

// HeaderIdempotencyKey carries a notification's idempotency key on every delivery.
const HeaderIdempotencyKey = "Idempotency-Key"

// Condition reasons of NotificationPolicies.
const (
	// ReasonDestinationsReady: every destination's Secret and URL are usable.
	ReasonDestinationsReady = "DestinationsReady"
	// ReasonNotificationSecretNotFound: a destination's Secret, or a key in it, is missing.
	ReasonNotificationSecretNotFound = "SecretNotFound"
	// ReasonInvalidURL: a destination's Secret holds no absolute http(s) URL.
	ReasonInvalidURL = "InvalidURL"
)

// NotificationDestination is where a NotificationPolicy sends its events.
// +kubebuilder:validation:XValidation:rule="self.type != 'Slack' || !has(self.tokenSecretRef)",message="tokenSecretRef: a Slack incoming webhook carries its credential in its URL; remove tokenSecretRef"
type NotificationDestination struct {
	// name identifies the destination in the policy and in the delivery records.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// type is the payload: Webhook (rewind's JSON), CloudEvents (structured mode,
	// application/cloudevents+json) or Slack (an incoming webhook's message).
	// +required
	// +kubebuilder:validation:Enum=Webhook;CloudEvents;Slack
	Type string `json:"type"`
	// urlSecretRef names the Secret (in the policy's namespace) and the key that hold the
	// URL to POST to (key default: key). The URL is never logged nor shown in status.
	// +required
	URLSecretRef SecretKeyReference `json:"urlSecretRef"`
	// tokenSecretRef optionally names a Secret key whose value is sent as
	// "Authorization: Bearer <token>" (Webhook and CloudEvents).
	// +optional
	TokenSecretRef *SecretKeyReference `json:"tokenSecretRef,omitempty"`
	// timeout bounds one delivery attempt (default 10s); a timeout is retried with backoff.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// NotificationPolicySpec selects Rollouts of its namespace and events, and where to send them.
type NotificationPolicySpec struct {
	// selector picks the Rollouts of the policy's namespace by label; leave it out (or
	// empty) to select every Rollout of the namespace.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// events to send.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=9
	// +listType=set
	Events []NotificationEvent `json:"events"`
	// destinations receive every selected event, each in order and at most once as far as
	// the idempotency key tells (see docs/notifications.md).
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Destinations []NotificationDestination `json:"destinations"`
	// suspend stops deliveries (events are still recorded, and sent once it is false).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// NotificationPolicyStatus says whether the policy's destinations are usable.
type NotificationPolicyStatus struct {
	// observedGeneration is the generation last checked.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready (every destination's Secret, key and URL are usable; the message
	// names the field and the fix when not), Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NotificationPolicy sends the events of the Rollouts it selects (revision, wave, gate,
// rollback, stalled, approval) to webhooks, CloudEvents sinks and Slack. Each delivery carries
// an idempotency key and is recorded in a NotificationRecord before the next one is sent.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=rewind
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NotificationPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec NotificationPolicySpec `json:"spec"`
	// +optional
	Status NotificationPolicyStatus `json:"status,omitempty"`
}

// NotificationPolicyList is a list of NotificationPolicies.
// +kubebuilder:object:root=true
type NotificationPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NotificationPolicy `json:"items"`
}

// NotificationRecordSpec names the policy and the Rollout a record is about. The controller
// writes it.
type NotificationRecordSpec struct {
	// policy is the NotificationPolicy (same namespace).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Policy string `json:"policy"`
	// rollout is the Rollout (same namespace).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Rollout string `json:"rollout"`
	// rolloutUID is the Rollout's UID, part of every idempotency key.
	// +required
	RolloutUID types.UID `json:"rolloutUID"`
	// fromRevision is the Rollout's revision when the record was made: events of earlier
	// revisions happened before the policy and are never sent. It is written with the record,
	// so that a fault between the record's creation and its first status write cannot make it
	// send the Rollout's whole history.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FromRevision int32 `json:"fromRevision,omitempty"`
}

// Delivery is where one notification stands with one destination.
type Delivery struct {
	// destination is the policy's destination name.
	// +required
	Destination string `json:"destination"`
	// deliveredAt is when the receiver accepted it (a 2xx answer).
	// +optional
	DeliveredAt *metav1.Time `json:"deliveredAt,omitempty"`
	// attempts counts the tries (failed ones and the one that succeeded).
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// nextAttemptAt is when a failed delivery is tried again (exponential backoff).
	// +optional
	NextAttemptAt *metav1.Time `json:"nextAttemptAt,omitempty"`
	// lastError says why the last attempt failed (never the URL nor a token).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	LastError string `json:"lastError,omitempty"`
	// gaveUp says it was not delivered after the most attempts; later notifications go on.
	// +optional
	GaveUp bool `json:"gaveUp,omitempty"`
}

// Notification is one event of a Rollout, as sent to every destination.
type Notification struct {
	// key is the idempotency key: rollout UID, revision, event and subject (the cluster, or
	// the wave, or "-"), e.g. 5c1e.../3/GateFailed/cluster=member1.
	// +required
	Key string `json:"key"`
	// event is the event type.
	// +required
	Event NotificationEvent `json:"event"`
	// revision of the Rollout.
	// +required
	Revision int32 `json:"revision"`
	// release the revision rolls out.
	// +optional
	Release string `json:"release,omitempty"`
	// wave the event is about (wave events, approval of a wave).
	// +optional
	Wave string `json:"wave,omitempty"`
	// cluster the event is about (gate failed, approval of a cluster's metrics).
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// outcome of a finished revision or rollback; the reason of a Stalled condition.
	// +optional
	Outcome string `json:"outcome,omitempty"`
	// message says what happened (for a failed gate: the step's message, with the failed
	// measurement or object).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// measurements of a failed metric gate, "name: phase value" (at most 4).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	Measurements []string `json:"measurements,omitempty"`
	// observedAt is when the controller first saw the event.
	// +required
	ObservedAt metav1.Time `json:"observedAt"`
	// deliveries, one per destination.
	// +optional
	// +listType=map
	// +listMapKey=destination
	Deliveries []Delivery `json:"deliveries,omitempty"`
}

// NotificationRecordStatus is the journal of one policy's notifications about one Rollout.
type NotificationRecordStatus struct {
	// fromRevision: events of earlier revisions are never sent (they happened before the
	// record was made, or their entries were pruned).
	// +optional
	FromRevision int32 `json:"fromRevision,omitempty"`
	// notifications, oldest first (delivered ones of old revisions are pruned).
	// +optional
	// +listType=map
	// +listMapKey=key
	// +kubebuilder:validation:MaxItems=256
	Notifications []Notification `json:"notifications,omitempty"`
}

// NotificationRecord is what a NotificationPolicy sent about one Rollout: every notification
// with its idempotency key and where its delivery stands. The controller writes it (with an
// optimistic lock) after each delivery and before the next; it is deleted with its Rollout.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=rewind
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policy`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.spec.rollout`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NotificationRecord struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec NotificationRecordSpec `json:"spec"`
	// +optional
	Status NotificationRecordStatus `json:"status,omitempty"`
}

// NotificationRecordList is a list of NotificationRecords.
// +kubebuilder:object:root=true
type NotificationRecordList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NotificationRecord `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NotificationPolicy{}, &NotificationPolicyList{}, &NotificationRecord{}, &NotificationRecordList{})
}

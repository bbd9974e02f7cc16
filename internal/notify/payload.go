package notify

import (
	"encoding/json"
	"fmt"
	"strings"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// RolloutRef names the Rollout a notification is about.
type RolloutRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// Payload is the JSON body of a Webhook destination, and the data of a CloudEvent.
type Payload struct {
	// IdempotencyKey is also sent in the Idempotency-Key header (and is a CloudEvent's id).
	IdempotencyKey string     `json:"idempotencyKey"`
	Event          string     `json:"event"`
	Rollout        RolloutRef `json:"rollout"`
	Revision       int32      `json:"revision"`
	Release        string     `json:"release,omitempty"`
	Wave           string     `json:"wave,omitempty"`
	Cluster        string     `json:"cluster,omitempty"`
	Outcome        string     `json:"outcome,omitempty"`
	Message        string     `json:"message,omitempty"`
	Measurements   []string   `json:"measurements,omitempty"`
	ObservedAt     string     `json:"observedAt"`
}

// NewPayload is the payload of a notification.
func NewPayload(ro RolloutRef, n *v1alpha1.Notification) Payload {
	return Payload{IdempotencyKey: n.Key, Event: string(n.Event), Rollout: ro, Revision: n.Revision, Release: n.Release,
		Wave: n.Wave, Cluster: n.Cluster, Outcome: n.Outcome, Message: n.Message, Measurements: n.Measurements,
		ObservedAt: n.ObservedAt.UTC().Format("2006-01-02T15:04:05Z")}
}

// CloudEventType is the CloudEvents type of an event, e.g. dev.rewind.rollout.GateFailed.
func CloudEventType(e string) string { return "dev.rewind.rollout." + e }

// CloudEventSource is the CloudEvents source of a Rollout's events.
func CloudEventSource(ro RolloutRef) string {
	return "/apis/rewind.dev/v1alpha1/namespaces/" + ro.Namespace + "/rollouts/" + ro.Name
}

// Body renders a payload for a destination type; it returns the body and its content type.
func Body(typ string, p Payload) ([]byte, string, error) {
	switch typ {
	case v1alpha1.DestinationCloudEvents:
		ev := cloudevents.New(cloudevents.CloudEventsVersionV1)
		ev.SetID(p.IdempotencyKey)
		ev.SetSource(CloudEventSource(p.Rollout))
		ev.SetType(CloudEventType(p.Event))
		if s := subject(p); s != "" {
			ev.SetSubject(s)
		}
		ev.SetExtension("idempotencykey", p.IdempotencyKey)
		if t, err := parseTime(p.ObservedAt); err == nil {
			ev.SetTime(t)
		}
		if err := ev.SetData("application/json", p); err != nil {
			return nil, "", err
		}
		if err := ev.Validate(); err != nil {
			return nil, "", fmt.Errorf("building the CloudEvent: %w", err)
		}
		b, err := json.Marshal(ev)
		return b, "application/cloudevents+json", err
	case v1alpha1.DestinationSlack:
		b, err := json.Marshal(slackMessage(p))
		return b, "application/json", err
	default:
		b, err := json.Marshal(p)
		return b, "application/json", err
	}
}

// subject is what an event is about within its Rollout: a cluster or a wave.
func subject(p Payload) string {
	switch {
	case p.Cluster != "":
		return "cluster/" + p.Cluster
	case p.Wave != "":
		return "wave/" + p.Wave
	}
	return ""
}

// Slack's incoming-webhook message: text (the fallback and notification line) and blocks.
type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type slackBlock struct {
	Type     string      `json:"type"`
	Text     *slackText  `json:"text,omitempty"`
	Elements []slackText `json:"elements,omitempty"`
}

type slackPayload struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

// SlackText is the one-line summary of a payload (Slack's text field).
func SlackText(p Payload) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rollout %s/%s: %s (revision %d", p.Rollout.Namespace, p.Rollout.Name, p.Event, p.Revision)
	if p.Release != "" {
		fmt.Fprintf(&b, ", release %s", p.Release)
	}
	b.WriteString(")")
	if p.Wave != "" {
		fmt.Fprintf(&b, " wave %s", p.Wave)
	}
	if p.Cluster != "" {
		fmt.Fprintf(&b, " cluster %s", p.Cluster)
	}
	if p.Outcome != "" {
		fmt.Fprintf(&b, ": %s", p.Outcome)
	}
	return b.String()
}

func slackMessage(p Payload) slackPayload {
	text := SlackText(p)
	detail := "*" + slackEscape(text) + "*"
	if p.Message != "" {
		detail += "\n" + slackEscape(p.Message)
	}
	for _, m := range p.Measurements {
		detail += "\n• " + slackEscape(m)
	}
	return slackPayload{Text: text, Blocks: []slackBlock{
		{Type: "section", Text: &slackText{Type: "mrkdwn", Text: detail}},
		{Type: "context", Elements: []slackText{{Type: "mrkdwn", Text: "idempotency key: " + p.IdempotencyKey}}},
	}}
}

// slackEscape escapes the three characters Slack's mrkdwn gives a meaning.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

//go:build !unit

// Package notify tests rewind's notifications end to end: a hub and two members, rewind's
// controller (with the shipped RBAC), and a real HTTP receiver standing for a webhook, a
// CloudEvents broker and Slack.
package notify

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/notification"
	"github.com/rewind-dev/rewind/internal/notify"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/test/fleet"
)

var suite fleet.Suite

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 2, Workloads: true}, &suite.Env)
}

func waves() []v1alpha1.Wave {
	return []v1alpha1.Wave{
		{Name: "canary", Clusters: []string{"member1"}, MaxConcurrency: 1},
		{Name: "rest", Clusters: []string{"member2"}, MaxConcurrency: 1},
	}
}

// examplePolicy is examples/notifications/notificationpolicy.yaml, the policy
// docs/notifications.md shows.
func examplePolicy(t *testing.T) *v1alpha1.NotificationPolicy {
	t.Helper()
	b, err := os.ReadFile("../../examples/notifications/notificationpolicy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := &v1alpha1.NotificationPolicy{}
	if err := yaml.UnmarshalStrict(b, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// setup makes a fleet whose Rollout the example policy selects, the policy's Secrets pointing
// at rc, and the policy.
func setup(t *testing.T, rc *receiver) *fleet.Fleet {
	t.Helper()
	f := suite.New(t, waves())
	ro := f.Rollout()
	ro.Labels = map[string]string{"team": "db"}
	if err := f.Hub().Update(t.Context(), ro); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]map[string]string{
		"notify-audit":  {"url": rc.url("/audit"), "token": "s3cr3t-token"},
		"notify-broker": {"url": rc.url("/broker")},
		"notify-slack":  {"url": rc.url("/slack")},
	} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.NS}, StringData: data}
		if err := f.Hub().Create(t.Context(), sec); err != nil {
			t.Fatal(err)
		}
	}
	p := examplePolicy(t)
	p.Namespace = f.NS
	if err := f.Hub().Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return f
}

// ev is an expected notification: revision, event, subject.
type ev struct {
	rev     int32
	event   v1alpha1.NotificationEvent
	subject string
}

func keys(uid string, evs ...ev) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, notify.Key(uid, e.rev, e.event, e.subject))
	}
	return out
}

// installed are the notifications of revision rev installing a release on both waves.
func installed(rev int32) []ev {
	return []ev{{rev, v1alpha1.EventRevisionStarted, ""}, {rev, v1alpha1.EventWaveStarted, "wave=canary"},
		{rev, v1alpha1.EventWaveFinished, "wave=canary"}, {rev, v1alpha1.EventWaveStarted, "wave=rest"},
		{rev, v1alpha1.EventWaveFinished, "wave=rest"}, {rev, v1alpha1.EventRevisionFinished, ""}}
}

var paths = []string{"/audit", "/broker", "/slack"}

// assertOnce checks that each path accepted exactly the keys of want, each once, and that
// every request carried the same key in its header and its body.
func assertOnce(t *testing.T, rc *receiver, want []string, dupOK string) {
	t.Helper()
	for _, path := range paths {
		got := rc.accepted(path)
		for _, k := range want {
			if n := got[k]; n != 1 && !(k == dupOK && n == 2) {
				t.Errorf("%s accepted %s %d times, want once", path, k, n)
			}
		}
		for k := range got {
			if !slices.Contains(want, k) {
				t.Errorf("%s accepted an unexpected notification %s", path, k)
			}
		}
		for _, r := range rc.requests(path) {
			if !strings.Contains(string(r.body), r.key) || r.key == "" {
				t.Errorf("%s: the body must carry the Idempotency-Key header's key %q:\n%s", path, r.key, r.body)
			}
		}
	}
}

// A release that passes its gates, then one that fails its gate and is rolled back: every
// destination gets every event once, with the right keys, although the webhook answers its
// first two requests with 503 and lets the third time out. The CloudEvents and Slack payloads
// are checked field by field.
func TestRolloutPassesThenFailsGateAndRollsBack(t *testing.T) {
	rc := newReceiver(t)
	rc.fail503["/audit"], rc.hangAfter503["/audit"] = 2, true
	f := setup(t, rc)
	suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 3*time.Minute)
	f.SetRelease("mysql-bad", nil)
	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 4*time.Minute)
	uid := string(ro.UID)
	want := keys(uid, installed(1)...)
	want = append(want, keys(uid, ev{2, v1alpha1.EventRevisionStarted, ""}, ev{2, v1alpha1.EventWaveStarted, "wave=canary"},
		ev{2, v1alpha1.EventGateFailed, "cluster=member1"}, ev{2, v1alpha1.EventRevisionFinished, ""},
		ev{3, v1alpha1.EventRollbackStarted, ""}, ev{3, v1alpha1.EventRollbackFinished, ""},
		ev{3, v1alpha1.EventStalled, "reason=" + v1alpha1.ReasonRolledBack})...)
	for _, p := range paths {
		rc.waitAccepted(t, p, want, 3*time.Minute)
	}
	assertOnce(t, rc, want, "")

	// The webhook's first notification: 503, 503, a timeout, then delivered, each try after
	// a longer wait; the record says so.
	audit := rc.requests("/audit")
	if len(audit) < 4 || audit[0].key != want[0] || audit[1].key != want[0] || audit[2].key != want[0] || audit[3].key != want[0] {
		t.Fatalf("the webhook's first four requests must all be the first notification %s: %+v", want[0], audit[:min(4, len(audit))])
	}
	if audit[0].status != 503 || audit[1].status != 503 || audit[2].status != 0 || audit[3].status != 200 {
		t.Errorf("answers %d %d %d %d, want 503 503 (timeout) 200", audit[0].status, audit[1].status, audit[2].status, audit[3].status)
	}
	gap1, gap2 := audit[1].at.Sub(audit[0].at), audit[2].at.Sub(audit[1].at)
	if gap1 < 900*time.Millisecond || gap2 < 1900*time.Millisecond {
		t.Errorf("retries must back off (1s, then 2s): waited %v and %v", gap1, gap2)
	}
	for _, r := range audit {
		if r.auth != "Bearer s3cr3t-token" {
			t.Errorf("the webhook must get the token as a bearer: %q", r.auth)
		}
	}
	rec := &v1alpha1.NotificationRecord{}
	if err := f.Hub().Get(t.Context(), client.ObjectKey{Namespace: f.NS, Name: notification.RecordName("team-db", f.Name)}, rec); err != nil {
		t.Fatal(err)
	}
	first := rec.Status.Notifications[0]
	if first.Key != want[0] {
		t.Fatalf("the record's first notification is %s, want %s", first.Key, want[0])
	}
	for _, d := range first.Deliveries {
		wantAttempts := int32(1)
		if d.Destination == "audit" {
			wantAttempts = 4
		}
		if d.DeliveredAt == nil || d.Attempts != wantAttempts || d.LastError != "" {
			t.Errorf("delivery of %s to %s: %+v, want delivered after %d attempts", first.Key, d.Destination, d, wantAttempts)
		}
	}
	for _, n := range rec.Status.Notifications {
		if strings.Contains(fmt.Sprint(n), rc.srv.URL) || strings.Contains(fmt.Sprint(n), "s3cr3t") {
			t.Errorf("the record must not hold a URL or token: %+v", n)
		}
	}

	// The failed gate, as each destination got it.
	gate := notify.Key(uid, 2, v1alpha1.EventGateFailed, "cluster=member1")
	hook, req := rc.bodyOf(t, "/audit", gate)
	if req.contentType != "application/json" || hook["idempotencyKey"] != gate || hook["event"] != "GateFailed" || hook["cluster"] != "member1" ||
		hook["release"] != "mysql-bad" || hook["revision"] != float64(2) || hook["message"] == "" || hook["message"] == nil {
		t.Errorf("webhook payload (%s): %v", req.contentType, hook)
	}
	if r, _ := hook["rollout"].(map[string]any); r["namespace"] != f.NS || r["name"] != f.Name || r["uid"] != uid {
		t.Errorf("webhook payload's rollout: %v", r)
	}
	ce, req := rc.bodyOf(t, "/broker", gate)
	if req.contentType != "application/cloudevents+json" {
		t.Errorf("CloudEvents structured mode needs Content-Type application/cloudevents+json, got %q", req.contentType)
	}
	for field, want := range map[string]any{
		"specversion": "1.0", "id": gate, "source": "/apis/rewind.dev/v1alpha1/namespaces/" + f.NS + "/rollouts/" + f.Name,
		"type": "dev.rewind.rollout.GateFailed", "subject": "cluster/member1", "datacontenttype": "application/json",
		"idempotencykey": gate,
	} {
		if ce[field] != want {
			t.Errorf("CloudEvent %s = %v, want %v", field, ce[field], want)
		}
	}
	if ts, _ := ce["time"].(string); ts == "" {
		t.Errorf("CloudEvent time missing: %v", ce)
	} else if _, err := time.Parse(time.RFC3339, ts); err != nil {
		t.Errorf("CloudEvent time %q: %v", ts, err)
	}
	if data, _ := ce["data"].(map[string]any); data["idempotencyKey"] != gate || data["cluster"] != "member1" || data["event"] != "GateFailed" {
		t.Errorf("CloudEvent data: %v", ce["data"])
	}
	slack, req := rc.bodyOf(t, "/slack", gate)
	wantText := fmt.Sprintf("rollout %s/%s: GateFailed (revision 2, release mysql-bad) cluster member1", f.NS, f.Name)
	if req.contentType != "application/json" || slack["text"] != wantText {
		t.Errorf("Slack text %q (%s), want %q", slack["text"], req.contentType, wantText)
	}
	blocks, _ := slack["blocks"].([]any)
	if len(blocks) != 2 {
		t.Fatalf("Slack blocks: %v", slack["blocks"])
	}
	section, _ := blocks[0].(map[string]any)
	text, _ := section["text"].(map[string]any)
	if section["type"] != "section" || text["type"] != "mrkdwn" || !strings.HasPrefix(text["text"].(string), "*"+wantText+"*\n") {
		t.Errorf("Slack section: %v", section)
	}
	ctxBlock, _ := blocks[1].(map[string]any)
	elems, _ := ctxBlock["elements"].([]any)
	if ctxBlock["type"] != "context" || len(elems) != 1 || elems[0].(map[string]any)["text"] != "idempotency key: "+gate {
		t.Errorf("Slack context block: %v", ctxBlock)
	}
	// The revision that failed says how it ended.
	fin, _ := rc.bodyOf(t, "/audit", notify.Key(uid, 2, v1alpha1.EventRevisionFinished, ""))
	if fin["outcome"] != "RolledBack" || !strings.Contains(fmt.Sprint(fin["message"]), "member1") {
		t.Errorf("revision 2 finished: %v", fin)
	}
}

// A receiver that never answers does not slow the rollout: an upgrade takes about as long as
// the same upgrade with the receiver up, and ends while the notifications are still waiting
// for their retries.
func TestReceiverDownDoesNotSlowTheRollout(t *testing.T) {
	rc := newReceiver(t)
	f := setup(t, rc)
	suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 3*time.Minute)
	uid := string(f.Rollout().UID)
	rc.waitAccepted(t, "/audit", keys(uid, installed(1)...), 2*time.Minute)

	start := time.Now()
	f.SetRelease("mysql-b", nil)
	f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 3*time.Minute)
	up := time.Since(start)
	rc.waitAccepted(t, "/audit", keys(uid, installed(2)...), 2*time.Minute)

	rc.mu.Lock()
	rc.down = true
	rc.mu.Unlock()
	start = time.Now()
	f.SetRelease("mysql-b-picky", nil)
	f.WaitPhase("mysql-b-picky", v1alpha1.RolloutSucceeded, 3*time.Minute)
	down := time.Since(start)
	t.Logf("upgrade with the receiver up: %v; down: %v", up, down)
	if down > 2*up+20*time.Second {
		t.Errorf("the upgrade took %v with the receiver down, %v with it up", down, up)
	}
	// The notifications of revision 3 are recorded as the rollout goes, whatever the
	// receiver does, and wait there.
	rec := &v1alpha1.NotificationRecord{}
	finished3 := notify.Key(uid, 3, v1alpha1.EventRevisionFinished, "")
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := f.Hub().Get(ctx, client.ObjectKey{Namespace: f.NS, Name: notification.RecordName("team-db", f.Name)}, rec); err != nil {
			return false, err
		}
		return slices.ContainsFunc(rec.Status.Notifications, func(n v1alpha1.Notification) bool { return n.Key == finished3 }), nil
	})
	if err != nil {
		t.Fatalf("revision 3's end is not recorded: %v", err)
	}
	pending := 0
	for _, n := range rec.Status.Notifications {
		if n.Revision != 3 {
			continue
		}
		for _, d := range n.Deliveries {
			if d.DeliveredAt == nil {
				pending++
			}
		}
	}
	if pending == 0 {
		t.Errorf("with the receiver down, revision 3's notifications cannot have been delivered: %+v", rec.Status.Notifications)
	}
	if got := rc.accepted("/audit"); len(got) != len(installed(1))+len(installed(2)) {
		t.Errorf("the receiver accepted %d notifications, want %d", len(got), len(installed(1))+len(installed(2)))
	}

	// Back up: everything is delivered, once.
	rc.mu.Lock()
	rc.down = false
	rc.mu.Unlock()
	want := keys(uid, append(append(installed(1), installed(2)...), installed(3)...)...)
	for _, p := range paths {
		rc.waitAccepted(t, p, want, 5*time.Minute)
	}
	assertOnce(t, rc, want, "")
}

// The controller killed after the receiver accepted a notification and before it was
// recorded: a fresh controller sends that one again, with the same key, and nothing else
// twice.
func TestKilledBetweenSendAndRecord(t *testing.T) {
	rc := newReceiver(t)
	f := setup(t, rc)
	uid := string(f.Rollout().UID)
	killAt := notify.Key(uid, 1, v1alpha1.EventWaveFinished, "wave=canary")
	hit := make(chan struct{})
	var once sync.Once
	stop := suite.StartManager(t, f.NS, controller.Options{NotifyCrashAfterSend: func(key, dest string) bool {
		if key == killAt && dest == "audit" {
			once.Do(func() { close(hit) })
			return true
		}
		return false
	}})
	select {
	case <-hit:
	case <-time.After(4 * time.Minute):
		t.Fatal("the controller never sent " + killAt)
	}
	stop()
	if n := rc.accepted("/audit")[killAt]; n != 1 {
		t.Fatalf("the receiver must have accepted %s before the kill: %d", killAt, n)
	}
	suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 3*time.Minute)
	want := keys(uid, installed(1)...)
	for _, p := range paths {
		rc.waitAccepted(t, p, want, 2*time.Minute)
	}
	if n := rc.accepted("/audit")[killAt]; n != 2 {
		t.Errorf("the notification sent before the kill is sent again once, with its key: accepted %d times", n)
	}
	assertOnce(t, rc, want, killAt)
}

// Bad input: a missing Secret, a missing key, a value that is not a URL get a condition
// naming the field and the fix; an unknown event type or destination type is refused by the
// API server.
func TestBadPolicies(t *testing.T) {
	rc := newReceiver(t)
	f := suite.New(t, waves())
	suite.StartManager(t, f.NS, controller.Options{})
	c := f.Hub()
	mk := func(name string, d v1alpha1.NotificationDestination, events ...v1alpha1.NotificationEvent) error {
		if len(events) == 0 {
			events = []v1alpha1.NotificationEvent{v1alpha1.EventGateFailed}
		}
		return c.Create(t.Context(), &v1alpha1.NotificationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.NS},
			Spec: v1alpha1.NotificationPolicySpec{Events: events, Destinations: []v1alpha1.NotificationDestination{d}}})
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: f.NS},
		StringData: map[string]string{"url": rc.url("/audit"), "notaurl": "hooks.example.com/x"}}
	if err := c.Create(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		// name of the policy; dest its one destination.
		name string
		dest v1alpha1.NotificationDestination
		// reason and texts the Ready condition must have.
		reason string
		texts  []string
	}{
		{"missing-secret", v1alpha1.NotificationDestination{Name: "a", Type: "Webhook", URLSecretRef: v1alpha1.SecretKeyReference{Name: "nope", Key: "url"}},
			v1alpha1.ReasonNotificationSecretNotFound, []string{"spec.destinations[0].urlSecretRef.name", "Secret " + f.NS + "/nope not found", "kubectl create secret"}},
		{"missing-key", v1alpha1.NotificationDestination{Name: "a", Type: "Webhook", URLSecretRef: v1alpha1.SecretKeyReference{Name: "hook", Key: "address"}},
			v1alpha1.ReasonNotificationSecretNotFound, []string{"spec.destinations[0].urlSecretRef.key", `no key "address"`, "notaurl, url"}},
		{"bad-url", v1alpha1.NotificationDestination{Name: "a", Type: "Slack", URLSecretRef: v1alpha1.SecretKeyReference{Name: "hook", Key: "notaurl"}},
			v1alpha1.ReasonInvalidURL, []string{"spec.destinations[0].urlSecretRef", "absolute http:// or https:// URL"}},
		{"good", v1alpha1.NotificationDestination{Name: "a", Type: "CloudEvents", URLSecretRef: v1alpha1.SecretKeyReference{Name: "hook", Key: "url"}},
			v1alpha1.ReasonDestinationsReady, nil},
	} {
		if err := mk(tc.name, tc.dest); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var cond *metav1.Condition
		err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p := &v1alpha1.NotificationPolicy{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: f.NS, Name: tc.name}, p); err != nil {
				return false, err
			}
			cond = meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady)
			return cond != nil && cond.ObservedGeneration == p.Generation, nil
		})
		if err != nil {
			t.Fatalf("%s: no Ready condition: %v", tc.name, err)
		}
		if cond.Reason != tc.reason {
			t.Errorf("%s: Ready %s %s (%s), want reason %s", tc.name, cond.Status, cond.Reason, cond.Message, tc.reason)
		}
		for _, s := range tc.texts {
			if !strings.Contains(cond.Message, s) {
				t.Errorf("%s: the message must say %q: %s", tc.name, s, cond.Message)
			}
		}
		if strings.Contains(cond.Message, rc.srv.URL) || strings.Contains(cond.Message, "hooks.example.com") {
			t.Errorf("%s: the condition must not quote the Secret's value: %s", tc.name, cond.Message)
		}
	}
	err := mk("unknown-event", v1alpha1.NotificationDestination{Name: "a", Type: "Webhook", URLSecretRef: v1alpha1.SecretKeyReference{Name: "hook", Key: "url"}}, "GateFailedd")
	if err == nil || !strings.Contains(err.Error(), "spec.events[0]") || !strings.Contains(err.Error(), "RevisionStarted") {
		t.Errorf("an unknown event type must be refused naming the field and the valid values: %v", err)
	}
	err = mk("unknown-type", v1alpha1.NotificationDestination{Name: "a", Type: "Teams", URLSecretRef: v1alpha1.SecretKeyReference{Name: "hook", Key: "url"}})
	if err == nil || !strings.Contains(err.Error(), "spec.destinations[0].type") || !strings.Contains(err.Error(), "Slack") {
		t.Errorf("an unknown destination type must be refused naming the field and the valid values: %v", err)
	}
	err = mk("slack-token", v1alpha1.NotificationDestination{Name: "a", Type: "Slack", URLSecretRef: v1alpha1.SecretKeyReference{Name: "hook", Key: "url"},
		TokenSecretRef: &v1alpha1.SecretKeyReference{Name: "hook", Key: "url"}})
	if err == nil || !strings.Contains(err.Error(), "tokenSecretRef") {
		t.Errorf("a Slack destination with a token must be refused: %v", err)
	}
}

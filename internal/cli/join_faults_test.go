//go:build !unit

package cli

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/rewind-dev/rewind/internal/join"
)

// hubAway is the way to the hub of one client: every connection is refused until until, and
// the first answer to the deletion of the bootstrap ServiceAccount is lost (the request was
// sent on and done, its answer replaced by a reset).
type hubAway struct {
	mu      sync.Mutex
	until   time.Time
	refused int
	lost    int
}

func (h *hubAway) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	h.mu.Lock()
	away := time.Now().Before(h.until)
	if away {
		h.refused++
	}
	h.mu.Unlock()
	if away {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (h *hubAway) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || req.Method != http.MethodDelete || !strings.HasSuffix(req.URL.Path, "/serviceaccounts/"+join.BootstrapServiceAccount) {
			return resp, err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.lost > 0 {
			return resp, err
		}
		h.lost++
		resp.Body.Close()
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	})
}

// TestExchangeRidesOutTheHubAway: an agent's join goes on through a hub that refuses its
// connections for 6 s and through a lost answer to the spending of its bootstrap token. The
// token is spent once, the credential is handed to keep and works, and the join is recorded.
// Before, the exchange tried each request five times (about 3 s) and then failed, and the
// deletion sent again after its lost answer was refused (401, the token spent) or found
// nothing (404): the exchange failed after the token was spent, the credential was never
// stored, and the member could not join without a new token.
func TestExchangeRidesOutTheHubAway(t *testing.T) {
	ctx := t.Context()
	const name = "join-edge-away"
	boot := joinMember(t, name)
	away := &hubAway{until: time.Now().Add(6 * time.Second)}
	flaky := rest.CopyConfig(boot)
	flaky.Dial = away.dial
	flaky.Wrap(away.wrap)

	var kept *join.Credential
	cred, err := join.Exchange(ctx, flaky, name, time.Hour, func(c *join.Credential) error { kept = c; return nil })
	if err != nil {
		t.Fatalf("the exchange through faults: %v", err)
	}
	away.mu.Lock()
	refused, lost := away.refused, away.lost
	away.mu.Unlock()
	if refused == 0 || lost == 0 {
		t.Fatalf("faults injected: %d connections refused, %d answers lost: the test proves nothing", refused, lost)
	}
	t.Logf("faults injected: %d connections refused, %d answers lost", refused, lost)
	if kept == nil || kept.Token != cred.Token {
		t.Fatal("keep was not handed the credential the exchange returned")
	}
	if _, err := join.Renew(ctx, cred.Config(boot), name, time.Hour); err != nil {
		t.Fatalf("the credential of the exchange does not work: %v", err)
	}
	if a := getMember(t, name).Status.Agent; a == nil || a.JoinedAt == nil {
		t.Fatalf("the join is not recorded: status.agent %+v", a)
	}
	refusedWithin(t, "the bootstrap token after the exchange through faults", join.RefusedBootstrapToken, func() error {
		_, err := join.Exchange(ctx, boot, name, time.Hour, nil)
		return err
	})
}

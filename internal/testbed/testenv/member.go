package testenv

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/testbed"
)

var (
	membersMu sync.Mutex
	members   = map[*testbed.Cluster]*member.Cluster{}
)

// Member returns rewind's access layer to a testbed cluster, one per cluster for the whole
// test package (as the controller keeps one per member).
func Member(t testing.TB, c *testbed.Cluster) *member.Cluster {
	t.Helper()
	membersMu.Lock()
	defer membersMu.Unlock()
	if cl := members[c]; cl != nil {
		return cl
	}
	cl, err := member.New(c.Name, c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	members[c] = cl
	return cl
}

// Reads records the paths of the full reads (GETs of whole objects or lists, not of their
// metadata alone) that a member.Cluster made; see RecordingMember.
type Reads struct {
	mu    sync.Mutex
	paths []string
}

// Paths returns the paths read since the last Reset, in order.
func (r *Reads) Paths() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.paths)
}

// Reset forgets the paths read so far.
func (r *Reads) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paths = nil
}

// RecordingMember returns a new access layer to a testbed cluster that records the path of
// every full read it makes, for tests of what a capture or a restore reads.
func RecordingMember(t testing.TB, c *testbed.Cluster) (*member.Cluster, *Reads) {
	t.Helper()
	reads := &Reads{}
	cfg := c.RESTConfig()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && !strings.Contains(req.Header.Get("Accept"), "PartialObjectMetadata") {
				reads.mu.Lock()
				reads.paths = append(reads.paths, req.URL.Path)
				reads.mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	cl, err := member.New(c.Name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl, reads
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

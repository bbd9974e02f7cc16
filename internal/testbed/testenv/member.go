package testenv

import (
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

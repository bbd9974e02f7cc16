package testenv

import (
	"testing"

	"github.com/rewind-dev/rewind/internal/testbed/freeport"
)

// FreeAddr returns a 127.0.0.1 address with a port that is free now and reserved against other
// test packages for a while (package freeport), for a server a test starts.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

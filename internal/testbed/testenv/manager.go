package testenv

import (
	"context"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// RunManager starts mgr and runs it until the returned stop is called or the test ends; a
// manager that stops with an error fails the test.
func RunManager(t testing.TB, mgr manager.Manager) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("the manager stopped with an error: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

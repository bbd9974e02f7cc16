package fleet

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// WriteHold holds, on their way to the API server, the PATCH requests of a client whose path
// ends with one of its paths and whose body contains its text: the first such request of each
// path waits until Release (or End) is called; Held(path) is closed once it waits. It is how
// a test makes a write land late: a plan written after the cluster it plans has moved on.
type WriteHold struct {
	text    []byte
	held    map[string]chan struct{}
	once    map[string]*sync.Once
	release chan struct{}
	end     chan struct{}
	endOnce sync.Once
}

// HoldWrites wraps cfg's transport with a WriteHold of paths and text.
func HoldWrites(cfg *rest.Config, text string, paths ...string) *WriteHold {
	h := &WriteHold{text: []byte(text), held: map[string]chan struct{}{}, once: map[string]*sync.Once{},
		release: make(chan struct{}), end: make(chan struct{})}
	for _, p := range paths {
		h.held[p], h.once[p] = make(chan struct{}), &sync.Once{}
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodPatch || req.Body == nil {
				return rt.RoundTrip(req)
			}
			for p := range h.held {
				if !strings.HasSuffix(req.URL.Path, p) {
					continue
				}
				body, err := io.ReadAll(req.Body)
				if err != nil {
					return nil, err
				}
				req.Body = io.NopCloser(bytes.NewReader(body))
				if bytes.Contains(body, h.text) {
					h.once[p].Do(func() {
						close(h.held[p])
						select {
						case <-h.release:
						case <-h.end:
						}
					})
				}
			}
			return rt.RoundTrip(req)
		})
	})
	return h
}

// Held is closed once the write to path waits.
func (h *WriteHold) Held(path string) <-chan struct{} { return h.held[path] }

// Release lets the held writes go on.
func (h *WriteHold) Release() { close(h.release) }

// End lets every write go (the test ends; call it before the client's manager stops).
func (h *WriteHold) End() { h.endOnce.Do(func() { close(h.end) }) }

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// A subscriber is one open page's event stream: what changed since its last send. Watch
// events only mark things changed; the stream reads them from the watch cache when it sends,
// so a burst of updates to one target is sent once, as it is now, and a slow page never holds
// the watches up.
type subscriber struct {
	// rollout is the Rollout the page shows ("" for the list of Rollouts).
	rollout string
	notify  chan struct{}

	mu       sync.Mutex
	targets  map[string]bool
	rollouts map[string]bool
	all, hub bool
}

func (s *subscriber) mark(f func()) {
	s.mu.Lock()
	f()
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

type broker struct {
	mu   sync.Mutex
	subs map[*subscriber]bool
}

func newBroker() *broker { return &broker{subs: map[*subscriber]bool{}} }

func (b *broker) subscribe(rollout string) *subscriber {
	s := &subscriber{rollout: rollout, notify: make(chan struct{}, 1), targets: map[string]bool{}, rollouts: map[string]bool{}, all: true, hub: true}
	s.notify <- struct{}{}
	b.mu.Lock()
	b.subs[s] = true
	b.mu.Unlock()
	return s
}

func (b *broker) unsubscribe(s *subscriber) {
	b.mu.Lock()
	delete(b.subs, s)
	b.mu.Unlock()
}

func (b *broker) each(f func(*subscriber)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		f(s)
	}
}

// hubChanged tells every page the hub's reachability changed, and sends it everything again.
func (b *broker) hubChanged() {
	b.each(func(s *subscriber) { s.mark(func() { s.hub, s.all = true, true }) })
}

// handlerFor returns the watch handler of a kind.
func (b *broker) handlerFor(obj client.Object) toolscache.ResourceEventHandler {
	on := func(o any) {
		if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		switch x := o.(type) {
		case *v1alpha1.RolloutTarget:
			ro := x.Labels[v1alpha1.LabelRollout]
			b.each(func(s *subscriber) {
				if s.rollout == ro && ro != "" {
					s.mark(func() { s.targets[x.Name] = true })
				}
			})
		case *v1alpha1.Rollout:
			b.each(func(s *subscriber) {
				if s.rollout == x.Name || s.rollout == "" {
					s.mark(func() { s.rollouts[x.Name] = true })
				}
			})
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { on(o) },
		UpdateFunc: func(_, o any) { on(o) },
		DeleteFunc: on,
	}
}

// cellEvent is one cell of the grid: its element id, its wave and its HTML ("" when the
// cluster left the rollout).
type cellEvent struct {
	ID       string `json:"id"`
	Wave     int32  `json:"wave"`
	WaveHTML string `json:"waveHTML,omitempty"`
	HTML     string `json:"html"`
}

// events streams a page's changes as server-sent events: "hub" (the hub answers or not),
// "cells" (grid cells), "rollout" (a Rollout page's header and history) and "rows" (rows of
// the list of Rollouts).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported", http.StatusInternalServerError)
		return
	}
	sub := s.broker.subscribe(r.URL.Query().Get("rollout"))
	defer s.broker.unsubscribe(sub)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case <-sub.notify:
			if err := s.send(w, r, sub); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// send writes what changed for sub since its last send.
func (s *Server) send(w http.ResponseWriter, r *http.Request, sub *subscriber) error {
	sub.mu.Lock()
	all, hub, targets, rollouts := sub.all, sub.hub, sub.targets, sub.rollouts
	sub.all, sub.hub, sub.targets, sub.rollouts = false, false, map[string]bool{}, map[string]bool{}
	sub.mu.Unlock()
	ctx := r.Context()
	ns := s.opts.Namespace
	if hub {
		ok, msg := s.hubState()
		if err := sendEvent(w, "hub", map[string]any{"ok": ok, "message": msg}); err != nil {
			return err
		}
	}
	if sub.rollout == "" {
		var list v1alpha1.RolloutList
		if err := s.cache.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return nil
		}
		var rows []cellEvent
		present := map[string]bool{}
		for i := range list.Items {
			ro := &list.Items[i]
			present[ro.Name] = true
			if all || rollouts[ro.Name] {
				rows = append(rows, cellEvent{ID: rowID(ro.Name), HTML: s.pages.fragment("row", rolloutRow(ro))})
			}
		}
		for name := range rollouts {
			if !present[name] {
				rows = append(rows, cellEvent{ID: rowID(name)})
			}
		}
		if len(rows) == 0 {
			return nil
		}
		return sendEvent(w, "rows", rows)
	}
	ro := &v1alpha1.Rollout{}
	if err := s.cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: sub.rollout}, ro); err != nil {
		return nil // gone: the page keeps what it shows
	}
	if all || rollouts[ro.Name] {
		if err := sendEvent(w, "rollout", map[string]string{
			"head":    s.pages.fragment("rollout-head", s.rolloutHead(ro)),
			"history": s.pages.fragment("history", historyView(ro)),
		}); err != nil {
			return err
		}
	}
	var cells []cellEvent
	if all {
		var list v1alpha1.RolloutTargetList
		if err := s.cache.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelRollout: ro.Name}); err != nil {
			return nil
		}
		for i := range list.Items {
			cells = append(cells, s.cellEvent(ro, &list.Items[i]))
		}
	} else {
		for name := range targets {
			t := &v1alpha1.RolloutTarget{}
			if err := s.cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, t); err != nil {
				cells = append(cells, cellEvent{ID: cellIDOfTarget(ro.Name, name)})
				continue
			}
			cells = append(cells, s.cellEvent(ro, t))
		}
	}
	if len(cells) == 0 {
		return nil
	}
	sort.Slice(cells, func(i, j int) bool { return cells[i].ID < cells[j].ID })
	return sendEvent(w, "cells", cells)
}

func (s *Server) cellEvent(ro *v1alpha1.Rollout, t *v1alpha1.RolloutTarget) cellEvent {
	c := targetCell(ro, t)
	wv := waveOf(ro, t.Spec.Wave, nil)
	return cellEvent{ID: c.ID, Wave: t.Spec.Wave, HTML: s.pages.fragment("cell", c), WaveHTML: s.pages.fragment("wave", wv)}
}

func sendEvent(w http.ResponseWriter, name string, v any) error {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, bytes.TrimRight(buf.Bytes(), "\n"))
	return err
}

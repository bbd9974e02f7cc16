package member

import (
	"context"
	"fmt"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/metrics"
)

// Defaults of the health probe.
const (
	DefaultProbeInterval         = 5 * time.Second
	DefaultProbeTimeout          = 5 * time.Second
	DefaultProbeFailureThreshold = 3
	// DefaultUnreachableTimeout is how long a member's probe may fail before its targets wait
	// (MemberCluster spec.unreachableTimeout when unset).
	DefaultUnreachableTimeout = 3 * time.Minute
	// probeConcurrency bounds the probes in flight at once.
	probeConcurrency = 64
)

// Probe is what the health probe knows of one member.
type Probe struct {
	// LastSuccess is when the member last answered (zero: never, since the controller
	// started).
	LastSuccess time.Time
	// ConsecutiveFailures counts the probes failed since the last success.
	ConsecutiveFailures int
	// FailingSince is when the first of those failures happened (zero while it answers).
	FailingSince time.Time
	// LastError is the last failure's message.
	LastError string
}

// Prober measures whether members are reachable, as cluster-api's ClusterCache does: a cheap
// request (GET /version, outside the client-side rate limit) to every MemberCluster on an
// interval, with a threshold of consecutive failures. One failed request of a step never
// decides that a member is unreachable; the prober does. It is a manager Runnable.
type Prober struct {
	// Hub lists the MemberClusters (the manager's cache).
	Hub client.Reader
	// Members gives the members' clients.
	Members *Cache
	// Interval, Timeout and FailureThreshold tune the probe (defaults above).
	Interval         time.Duration
	Timeout          time.Duration
	FailureThreshold int
	// Changed is called (from the probe's goroutine) with a member's name when its verdict
	// changed, reachable to unreachable or back, so that its status can be written.
	Changed func(name string)
	// Now is the clock.
	Now func() time.Time

	mu     sync.Mutex
	probes map[string]*Probe
}

func (p *Prober) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Prober) interval() time.Duration {
	if p.Interval > 0 {
		return p.Interval
	}
	return DefaultProbeInterval
}

// Threshold is the consecutive failures after which a member is unreachable.
func (p *Prober) Threshold() int {
	if p == nil || p.FailureThreshold <= 0 {
		return DefaultProbeFailureThreshold
	}
	return p.FailureThreshold
}

// Start probes every member each interval until ctx ends.
func (p *Prober) Start(ctx context.Context) error {
	t := time.NewTicker(p.interval())
	defer t.Stop()
	for {
		p.ProbeAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection: only the active replica probes (it is the one whose steps use it).
func (p *Prober) NeedLeaderElection() bool { return true }

// ProbeAll probes every push MemberCluster once, concurrently, and forgets members that are
// gone.
func (p *Prober) ProbeAll(ctx context.Context) {
	var list v1alpha1.MemberClusterList
	if err := p.Hub.List(ctx, &list); err != nil {
		return // the hub did not answer: the verdicts stand until the next round
	}
	names := make(map[string]bool, len(list.Items))
	sem := make(chan struct{}, probeConcurrency)
	var wg sync.WaitGroup
	for i := range list.Items {
		mc := &list.Items[i]
		if mc.Spec.Mode == v1alpha1.ModePull {
			continue // the hub cannot reach it: its agent's Lease says whether it is alive
		}
		names[mc.Name] = true
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			p.probe(ctx, mc)
		}()
	}
	wg.Wait()
	p.mu.Lock()
	for name := range p.probes {
		if !names[name] {
			delete(p.probes, name)
			metrics.MemberProbeFailures.DeleteLabelValues(name)
		}
	}
	p.mu.Unlock()
}

// probe probes one member and records the outcome.
func (p *Prober) probe(ctx context.Context, mc *v1alpha1.MemberCluster) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	cl, err := p.Members.For(pctx, mc)
	if err == nil {
		err = cl.Ping(pctx)
	}
	if ctx.Err() != nil {
		return // shutting down: not the member's fault
	}
	if p.Record(mc.Name, err) && p.Changed != nil {
		p.Changed(mc.Name)
	}
	pr, _ := p.Get(mc.Name)
	metrics.MemberProbeFailures.WithLabelValues(mc.Name).Set(float64(pr.ConsecutiveFailures))
}

// Record notes the outcome of one probe of a member (nil: it answered) and says whether the
// member's verdict changed.
func (p *Prober) Record(name string, err error) (changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.probes == nil {
		p.probes = map[string]*Probe{}
	}
	pr, ok := p.probes[name]
	if !ok {
		pr = &Probe{}
		p.probes[name] = pr
	}
	was := pr.ConsecutiveFailures >= p.Threshold()
	now := p.now()
	if err == nil {
		*pr = Probe{LastSuccess: now}
	} else {
		// The last success is kept: it says how long the member has been away.
		if pr.ConsecutiveFailures == 0 {
			pr.FailingSince = now
		}
		pr.ConsecutiveFailures++
		pr.LastError = err.Error()
	}
	return !ok || was != (pr.ConsecutiveFailures >= p.Threshold())
}

// Get returns what the probe knows of a member (ok false before its first probe).
func (p *Prober) Get(name string) (Probe, bool) {
	if p == nil {
		return Probe{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pr, ok := p.probes[name]
	if !ok {
		return Probe{}, false
	}
	return *pr, true
}

// Unreachable says whether the probe finds the member unreachable (at least the threshold of
// consecutive failures) and since when its probes have failed.
func (p *Prober) Unreachable(name string) (since time.Time, lastErr string, ok bool) {
	pr, known := p.Get(name)
	if !known || pr.ConsecutiveFailures < p.Threshold() {
		return time.Time{}, "", false
	}
	return pr.FailingSince, pr.LastError, true
}

// UnreachableTimeout is a member's spec.unreachableTimeout, or its default.
func UnreachableTimeout(mc *v1alpha1.MemberCluster) time.Duration {
	if mc != nil && mc.Spec.UnreachableTimeout != nil && mc.Spec.UnreachableTimeout.Duration > 0 {
		return mc.Spec.UnreachableTimeout.Duration
	}
	return DefaultUnreachableTimeout
}

// Ping asks the member's API server for its version, outside the client-side rate limit (a
// probe is not held behind a restore's writes). Any answer but a success is an error.
func (c *Cluster) Ping(ctx context.Context) error {
	if err := c.Lists.Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return fmt.Errorf("probing %s: %w", c.Host(), err)
	}
	return nil
}

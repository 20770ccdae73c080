package remote

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/compactrl/compactrl/infer"
)

// Backend is one endpoint of a Pool: an engine that makes one attempt per
// Sample call, and how many requests it may serve at once.
type Backend struct {
	Name          string        // for errors and Stats, e.g. the URL
	Sampler       infer.Sampler // one attempt per call; no retries inside
	MaxConcurrent int           // in-flight limit; ≤ 0 means DefaultMaxConcurrent
}

// DefaultMaxConcurrent is the in-flight limit of a Backend that sets none.
const DefaultMaxConcurrent = 8

// PoolConfig holds a Pool's retry and health policy; zero fields take the
// defaults shown.
type PoolConfig struct {
	Timeout       time.Duration // one attempt's deadline (default 5m)
	MaxAttempts   int           // attempts per request, across endpoints (default 5)
	BaseBackoff   time.Duration // first retry delay (default 200ms)
	MaxBackoff    time.Duration // delay cap, Retry-After included (default 10s)
	FailThreshold int           // consecutive failures that take an endpoint out (default 3)
	Cooldown      time.Duration // how long it stays out (default 30s)
	Seed          int64         // seeds the backoff jitter
	// VocabSize, when > 0, is the model's vocabulary size: a prompt id or a
	// sampled id ≥ VocabSize is rejected (an engine serving another model,
	// or a corrupt answer), so an engine fault is retried and, if it
	// persists, ends the episode infra_error instead of being scored as the
	// policy's format error.
	VocabSize int
}

func (c PoolConfig) withDefaults() PoolConfig {
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.BaseBackoff <= 0 {
		c.BaseBackoff = 200 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.MaxBackoff < c.BaseBackoff {
		c.MaxBackoff = c.BaseBackoff
	}
	if c.FailThreshold <= 0 {
		c.FailThreshold = 3
	}
	if c.Cooldown <= 0 {
		c.Cooldown = 30 * time.Second
	}
	return c
}

// Pool is an infer.Sampler over several endpoints serving the same model.
// Each request goes to the healthy endpoint with the fewest requests in
// flight that is under its concurrency limit (waiting for a free slot when
// all are full); a failed attempt is retried, preferably elsewhere, after
// a delay
//
//	d_k = min(MaxBackoff, max(BaseBackoff·2^(k−1)·(1+u)/2, Retry-After)),  u ~ U[0,1)
//
// for attempt k. FailThreshold consecutive failures take an endpoint out
// for Cooldown; when every endpoint is out, the one that comes back first
// is probed. After MaxAttempts the error is an *UnavailableError.
type Pool struct {
	cfg PoolConfig

	mu   sync.Mutex
	eps  []*endpoint
	wake chan struct{} // closed and replaced when a slot frees
	rng  *rand.Rand
}

type endpoint struct {
	Backend
	inflight  int
	fails     int // consecutive failed attempts
	downUntil time.Time
	requests  int64
	failures  int64
}

// NewPool returns a Pool over backends.
func NewPool(cfg PoolConfig, backends ...Backend) (*Pool, error) {
	if len(backends) == 0 {
		return nil, errors.New("remote pool: no endpoints")
	}
	p := &Pool{
		cfg:  cfg.withDefaults(),
		wake: make(chan struct{}),
		rng:  rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15)),
	}
	for i, b := range backends {
		if b.Sampler == nil {
			return nil, fmt.Errorf("remote pool: endpoint %d (%q) has no sampler", i, b.Name)
		}
		if b.MaxConcurrent <= 0 {
			b.MaxConcurrent = DefaultMaxConcurrent
		}
		if b.Name == "" {
			b.Name = fmt.Sprintf("endpoint-%d", i)
		}
		p.eps = append(p.eps, &endpoint{Backend: b})
	}
	return p, nil
}

// EndpointStats is one endpoint's state, for monitoring.
type EndpointStats struct {
	Name     string
	InFlight int
	Requests int64 // attempts sent
	Failures int64 // attempts failed
	Healthy  bool
}

// Stats returns every endpoint's state, in the order given to NewPool.
func (p *Pool) Stats() []EndpointStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	out := make([]EndpointStats, len(p.eps))
	for i, e := range p.eps {
		out[i] = EndpointStats{e.Name, e.inflight, e.requests, e.failures, !now.Before(e.downUntil)}
	}
	return out
}

// Sample sends req to the pool's endpoints until one answers with a valid
// completion, a non-retryable error occurs, ctx ends, or MaxAttempts
// attempts have failed (then the error matches ErrUnavailable).
func (p *Pool) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if err := checkRequest(req, p.cfg.VocabSize); err != nil {
		return infer.Completion{}, err
	}
	var last error
	avoid := -1
	for attempt := 1; attempt <= p.cfg.MaxAttempts; attempt++ {
		i, err := p.acquire(ctx, avoid)
		if err != nil {
			return infer.Completion{}, fmt.Errorf("wait for an endpoint slot: %w", err)
		}
		e := p.eps[i]
		actx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
		c, err := e.Sampler.Sample(actx, req)
		timedOut := errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		cancel()
		if err == nil {
			c, err = finish(req, c.Tokens, c.Logprobs, c.FinishReason, p.cfg.VocabSize)
		}
		p.release(i, err, ctx.Err() == nil)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return infer.Completion{}, fmt.Errorf("sample on %s: %w", e.Name, ctx.Err())
		}
		if timedOut {
			err = fmt.Errorf("%s: attempt timed out after %v: %w", e.Name, p.cfg.Timeout, err)
		} else {
			err = fmt.Errorf("%s: %w", e.Name, err)
		}
		last = err
		if !retryable(err) {
			return infer.Completion{}, err
		}
		avoid = i
		if attempt < p.cfg.MaxAttempts {
			t := time.NewTimer(p.backoff(attempt, retryAfter(err)))
			select {
			case <-ctx.Done():
				t.Stop()
				return infer.Completion{}, fmt.Errorf("backoff after %v: %w", last, ctx.Err())
			case <-t.C:
			}
		}
	}
	return infer.Completion{}, &UnavailableError{Attempts: p.cfg.MaxAttempts, Last: last}
}

// backoff is d_k of the Pool doc.
func (p *Pool) backoff(attempt int, hint time.Duration) time.Duration {
	d := p.cfg.BaseBackoff << min(attempt-1, 30)
	if d <= 0 || d > p.cfg.MaxBackoff {
		d = p.cfg.MaxBackoff
	}
	p.mu.Lock()
	u := p.rng.Float64()
	p.mu.Unlock()
	d = time.Duration(float64(d) * (1 + u) / 2)
	d = max(d, hint)
	return min(d, p.cfg.MaxBackoff)
}

// acquire takes a slot on the least-loaded usable endpoint, preferring
// healthy endpoints and, among those, any other than avoid (the one that
// just failed). It blocks while every candidate is at its limit.
func (p *Pool) acquire(ctx context.Context, avoid int) (int, error) {
	for {
		p.mu.Lock()
		i := p.pick(time.Now(), avoid)
		if i >= 0 {
			p.eps[i].inflight++
			p.eps[i].requests++
			p.mu.Unlock()
			return i, nil
		}
		w := p.wake
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-w:
		}
	}
}

// pick returns the endpoint to use now, or -1 to wait. Called with mu held.
func (p *Pool) pick(now time.Time, avoid int) int {
	best := -1
	better := func(i int) bool {
		if best < 0 {
			return true
		}
		if (i == avoid) != (best == avoid) {
			return best == avoid
		}
		return p.eps[i].inflight < p.eps[best].inflight
	}
	anyHealthy := false
	for i, e := range p.eps {
		if now.Before(e.downUntil) {
			continue
		}
		anyHealthy = true
		if e.inflight < e.MaxConcurrent && better(i) {
			best = i
		}
	}
	if best >= 0 || anyHealthy {
		return best
	}
	// Every endpoint is cooling down: probe the one due back first.
	for i, e := range p.eps {
		if e.inflight < e.MaxConcurrent && (best < 0 || e.downUntil.Before(p.eps[best].downUntil)) {
			best = i
		}
	}
	return best
}

// release frees the slot taken by acquire and records the outcome; an
// attempt the caller cancelled (count false) says nothing of the endpoint.
func (p *Pool) release(i int, err error, count bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.eps[i]
	e.inflight--
	switch {
	case !count:
	case err == nil:
		e.fails, e.downUntil = 0, time.Time{}
	case retryable(err):
		e.failures++
		e.fails++
		if e.fails >= p.cfg.FailThreshold {
			e.downUntil = time.Now().Add(p.cfg.Cooldown)
		}
	default:
		e.failures++
	}
	close(p.wake)
	p.wake = make(chan struct{})
}

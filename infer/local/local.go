// Package local is the built-in inference engine: an infer.Sampler over a
// model.Model that runs many concurrent Sample calls as one batched,
// KV-cached decode (continuous batching).
//
// Flow: Sample enqueues its request and waits. One engine goroutine admits
// queued requests at step boundaries (up to MaxBatch at once), runs
// model.Decoder steps — the prefill of newly admitted prompts and one
// decode token for every running sequence share a forward — and hands each
// finished completion back to its caller. Publish installs new weights: the
// engine lets the sequences in flight finish on the old weights, then
// switches, so every completion comes from exactly one policy.
//
// Which requests share a decode step depends on goroutine timing, but the
// results do not: a request's tokens and log-probabilities are, to the bit,
// those it gets alone (for given weights, prompt, sampling settings and
// Seed), whatever runs beside it, however its prompt is split into prefill
// chunks and whether its prefix comes from the prefix cache; they are also
// the trainer's scores of the same tokens (model.Decoder says how). So
// episodes sampled with the same seeds repeat exactly.
//
// Imports: local depends on model (the decoder it batches) and infer (the
// boundary it implements); model depends on infer only for the request
// and completion types, and on nothing that samples or trains. The arrow
// points down the list of docs/design.md §2: the engine knows the model,
// the model knows no engine, and nothing above infer (agent, rollout,
// train) imports local except the built-in wiring (train/builtin and
// cmd/compactrl).
package local

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/model"
)

// Options tune the engine.
type Options struct {
	MaxBatch int // most sequences decoded together; 0 means 64
	// PrefixCacheBytes bounds the KV caches kept from finished requests so
	// that a prompt extending an earlier one (an agent's next turn) skips
	// recomputing the shared prefix; 0 means 256 MiB, negative disables.
	PrefixCacheBytes int64
	// PrefillChunk bounds the prompt tokens fed per decode step, so that
	// long new prompts do not stall running sequences; 0 means 1024,
	// negative means no bound.
	PrefillChunk int
}

// DefaultPrefixCacheBytes is the prefix cache budget when Options leave it 0.
const DefaultPrefixCacheBytes = 256 << 20

type result struct {
	c   infer.Completion
	err error
}

type call struct {
	ctx context.Context
	req infer.Request
	res chan result // buffered: the engine never blocks on delivery
}

// Sampler is safe for concurrent use.
type Sampler struct {
	maxBatch int
	cacheMax int64
	chunk    int
	calls    chan *call
	quit     chan struct{}
	done     chan struct{}

	mu      sync.Mutex
	pending *model.Model // weights to switch to once idle
	closed  bool
	stats   model.DecoderStats // summed over every set of weights
}

var _ infer.Sampler = (*Sampler)(nil)

// ErrClosed is returned by Sample after Close.
var ErrClosed = errors.New("local sampler: closed")

// New starts an engine over a private copy of m's weights (m itself may be
// trained on afterwards). m must be a policy. Call Close to stop it.
func New(m *model.Model, opts Options) (*Sampler, error) {
	if m.Value {
		return nil, errors.New("local sampler: model is a critic")
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 64
	}
	if opts.PrefixCacheBytes == 0 {
		opts.PrefixCacheBytes = DefaultPrefixCacheBytes
	}
	if opts.PrefillChunk == 0 {
		opts.PrefillChunk = 1024
	}
	s := &Sampler{
		maxBatch: opts.MaxBatch,
		cacheMax: opts.PrefixCacheBytes,
		chunk:    opts.PrefillChunk,
		calls:    make(chan *call),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go s.loop(m.Clone())
	return s, nil
}

// Publish hands the engine new weights (copied before Publish returns, so
// the caller may keep training m). Sample calls that start after Publish
// returns are served by these weights or newer ones.
func (s *Sampler) Publish(m *model.Model) error {
	if m.Value {
		return errors.New("local sampler: publish: model is a critic")
	}
	c := m.Clone()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.pending = c
	return nil
}

// Sample implements infer.Sampler.
func (s *Sampler) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	c := &call{ctx: ctx, req: req, res: make(chan result, 1)}
	select {
	case s.calls <- c:
	case <-s.done:
		return infer.Completion{}, ErrClosed
	case <-ctx.Done():
		return infer.Completion{}, ctx.Err()
	}
	select {
	case r := <-c.res:
		return r.c, r.err
	case <-ctx.Done():
		return infer.Completion{}, ctx.Err()
	}
}

// Close stops the engine; calls in flight fail with ErrClosed.
func (s *Sampler) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.quit)
	}
	s.mu.Unlock()
	<-s.done
}

func (s *Sampler) takePending() *model.Model {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.pending
	s.pending = nil
	return m
}

func (s *Sampler) hasPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending != nil
}

// Stats sums the engine's decoder counters (forwards, positions computed,
// positions reused from the prefix cache, tokens generated).
func (s *Sampler) Stats() model.DecoderStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

func (s *Sampler) newDecoder(m *model.Model) *model.Decoder {
	d := m.NewDecoder()
	d.SetPrefixCache(s.cacheMax)
	d.SetPrefillChunk(s.chunk)
	return d
}

func (s *Sampler) addStats(before, after model.DecoderStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Steps += after.Steps - before.Steps
	s.stats.Fed += after.Fed - before.Fed
	s.stats.Reused += after.Reused - before.Reused
	s.stats.Generated += after.Generated - before.Generated
}

func (s *Sampler) loop(m *model.Model) {
	defer close(s.done)
	dec := s.newDecoder(m)
	running := map[int]*call{}
	var queue []*call
	fail := func(err error) {
		for _, c := range running {
			c.res <- result{err: err}
		}
		for _, c := range queue {
			c.res <- result{err: err}
		}
	}
	for {
		// Block only when there is nothing to decode.
		if len(running) == 0 && len(queue) == 0 {
			select {
			case c := <-s.calls:
				queue = append(queue, c)
			case <-s.quit:
				return
			}
		}
	drain:
		for {
			select {
			case c := <-s.calls:
				queue = append(queue, c)
			case <-s.quit:
				fail(ErrClosed)
				return
			default:
				break drain
			}
		}
		// New weights: admit nothing until the running sequences finish.
		if s.hasPending() {
			if len(running) == 0 {
				dec = s.newDecoder(s.takePending())
			}
		}
		if !s.hasPending() {
			for len(queue) > 0 && len(running) < s.maxBatch {
				c := queue[0]
				queue = queue[1:]
				if c.ctx.Err() != nil {
					c.res <- result{err: c.ctx.Err()}
					continue
				}
				id, err := dec.Add(c.req)
				if err != nil {
					c.res <- result{err: fmt.Errorf("local sampler: %w", err)}
					continue
				}
				running[id] = c
			}
		}
		for id, c := range running {
			if err := c.ctx.Err(); err != nil {
				dec.Remove(id)
				delete(running, id)
				c.res <- result{err: err}
			}
		}
		if len(running) == 0 {
			continue
		}
		before := dec.Stats()
		finished := dec.Step()
		s.addStats(before, dec.Stats())
		for _, f := range finished {
			if c, ok := running[f.ID]; ok {
				c.res <- result{c: f.Completion}
				delete(running, f.ID)
			}
		}
	}
}

package serve

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
)

// Metrics are the service's counters, written in the Prometheus text
// exposition format (version 0.0.4) by WriteText:
//
//	compactrl_episodes_in_flight                 gauge    episodes being played
//	compactrl_episodes_queued                    gauge    requests waiting for a slot
//	compactrl_episodes_finished_total{status}    counter  ok, overlong, infra_error, verifier_error, format_error, cancelled
//	compactrl_requests_rejected_total{reason}    counter  bad_request, queue_full, draining, body_too_large, body_timeout
//	compactrl_sandboxes_alive                    gauge    environments with a Close (sandbox, workspace) not yet closed
//	compactrl_compactions_total                  counter  compactions of finished episodes
//	compactrl_agent_turns_total                  counter  policy actions of finished episodes
//	compactrl_engine_request_seconds             histogram one engine call (a Sample of the pool, retries included)
//	compactrl_engine_errors_total                counter  engine calls that failed
type Metrics struct {
	inFlight, queued, sandboxes atomic.Int64
	compactions, turns          atomic.Int64
	engineErrors                atomic.Int64

	mu       sync.Mutex
	byStatus map[string]int64
	rejects  map[string]int64
	hist     histogram
}

// newMetrics returns zeroed metrics.
func newMetrics() *Metrics {
	return &Metrics{byStatus: map[string]int64{}, rejects: map[string]int64{}, hist: newHistogram(engineBuckets)}
}

// engineBuckets are the engine-latency histogram's upper bounds in seconds.
var engineBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

func (m *Metrics) finished(status string) {
	m.mu.Lock()
	m.byStatus[status]++
	m.mu.Unlock()
}

func (m *Metrics) rejected(reason string) {
	m.mu.Lock()
	m.rejects[reason]++
	m.mu.Unlock()
}

// InFlight returns the number of episodes being played.
func (m *Metrics) InFlight() int64 { return m.inFlight.Load() }

// SandboxesAlive returns the number of open environments that own a
// sandbox (implement io.Closer).
func (m *Metrics) SandboxesAlive() int64 { return m.sandboxes.Load() }

// Finished returns the number of episodes finished with status.
func (m *Metrics) Finished(status string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byStatus[status]
}

// WrapSampler returns s with each Sample call timed into
// compactrl_engine_request_seconds (and failures counted).
func (m *Metrics) WrapSampler(s infer.Sampler) infer.Sampler { return timedSampler{s, m} }

type timedSampler struct {
	s infer.Sampler
	m *Metrics
}

func (t timedSampler) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	start := time.Now()
	c, err := t.s.Sample(ctx, req)
	d := time.Since(start).Seconds()
	t.m.mu.Lock()
	t.m.hist.observe(d)
	t.m.mu.Unlock()
	if err != nil {
		t.m.engineErrors.Add(1)
	}
	return c, err
}

type histogram struct {
	bounds []float64
	counts []int64 // per bucket (not cumulative); last is +Inf
	sum    float64
	n      int64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]int64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound ≥ v: le is inclusive
	h.counts[i]++
	h.sum += v
	h.n++
}

func promFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return fmt.Sprint(v)
}

// WriteText writes every metric in the Prometheus text format.
func (m *Metrics) WriteText(w io.Writer) {
	gauge := func(name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v)
	}
	counter := func(name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	labelled := func(name, help, label string, vals map[string]int64, always []string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
		keys := append([]string(nil), always...)
		for k := range vals {
			found := false
			for _, a := range always {
				found = found || a == k
			}
			if !found {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%s{%s=%q} %d\n", name, label, k, vals[k])
		}
	}
	gauge("compactrl_episodes_in_flight", "Episodes being played.", m.inFlight.Load())
	gauge("compactrl_episodes_queued", "Requests waiting for an episode slot.", m.queued.Load())
	gauge("compactrl_sandboxes_alive", "Episode environments owning a sandbox or workspace that are not yet closed.", m.sandboxes.Load())
	counter("compactrl_compactions_total", "Context compactions in finished episodes.", m.compactions.Load())
	counter("compactrl_agent_turns_total", "Policy actions in finished episodes.", m.turns.Load())
	counter("compactrl_engine_errors_total", "Engine calls that failed (after the pool's retries).", m.engineErrors.Load())

	m.mu.Lock()
	defer m.mu.Unlock()
	labelled("compactrl_episodes_finished_total", "Episodes finished, by status (cancelled: the client went away).", "status", m.byStatus,
		[]string{string(episode.StatusOK), string(episode.StatusOverlong), string(episode.StatusInfraError),
			string(episode.StatusVerifierError), string(episode.StatusFormatError), "cancelled"})
	labelled("compactrl_requests_rejected_total", "Requests refused, by reason.", "reason", m.rejects,
		[]string{"bad_request", "queue_full", "draining", "body_too_large", "body_timeout"})
	const h = "compactrl_engine_request_seconds"
	fmt.Fprintf(w, "# HELP %s One engine call of the agent loop (retries included).\n# TYPE %s histogram\n", h, h)
	var cum int64
	for i, b := range m.hist.bounds {
		cum += m.hist.counts[i]
		fmt.Fprintf(w, "%s_bucket{le=%q} %d\n", h, promFloat(b), cum)
	}
	cum += m.hist.counts[len(m.hist.bounds)]
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %s\n%s_count %d\n", h, cum, h, promFloat(m.hist.sum), h, m.hist.n)
}

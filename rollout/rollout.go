// Package rollout runs many episodes concurrently and streams them to disk
// as they finish.
//
// Run serves `compactrl rollout` and the service (a Sink per episode);
// Collect serves training (the episodes back in the order of the jobs, a
// progress count): both are the same pool.
//
// Data flow: a feeder hands Jobs (episode seeds) to Workers goroutines; each
// builds its environment with the EnvFactory and plays it with the Runner
// (an *agent.Agent); finished episodes go over one channel to the single
// writer goroutine (the caller's), which writes each to the Sink and
// flushes it before the next, so a crash loses nothing already written.
// A failure inside one episode makes that episode infra_error; the others
// continue. Cancelling the context stops new episodes; episodes interrupted
// mid-way are dropped (they never finished), finished ones are written, and
// Run returns the statistics with the context's error.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
)

// Runner plays one episode; *agent.Agent implements it.
type Runner interface {
	Run(ctx context.Context, env agent.Environment, seed int64) (episode.Episode, error)
}

// RunnerFunc adapts a function to Runner.
type RunnerFunc func(ctx context.Context, env agent.Environment, seed int64) (episode.Episode, error)

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, env agent.Environment, seed int64) (episode.Episode, error) {
	return f(ctx, env, seed)
}

// EnvFactory builds the environment of one episode.
type EnvFactory func(seed int64) (agent.Environment, error)

// Sink receives finished episodes, from one goroutine at a time.
type Sink interface {
	Write(ep *episode.Episode) error
}

// Job is one episode to play.
type Job struct {
	Seed  int64  // the environment's seed and the agent's
	ID    string // the episode's ID
	Group string // the episode's group (the task identity)
}

// Jobs returns n jobs with seeds first … first+n−1, IDs and groups
// "<prefix>-<seed>".
func Jobs(prefix string, first int64, n int) []Job {
	jobs := make([]Job, n)
	for i := range jobs {
		s := first + int64(i)
		id := fmt.Sprintf("%s-%d", prefix, s)
		jobs[i] = Job{Seed: s, ID: id, Group: id}
	}
	return jobs
}

// Config configures a pool.
type Config struct {
	Workers int // concurrent episodes (≥ 1)
	// EpisodeTimeout bounds one episode (0: none); an episode past it is
	// infra_error.
	EpisodeTimeout time.Duration
	Meta           map[string]string // copied into every episode's Meta
}

// Run plays jobs with cfg.Workers workers and writes each finished episode
// to sink. progress, if not nil, is called after each write with the
// statistics so far (from the calling goroutine). The error is the sink's
// (which stops the pool) or the context's; the statistics cover what was
// written either way.
func Run(ctx context.Context, cfg Config, jobs []Job, r Runner, envs EnvFactory, sink Sink, progress func(Stats)) (Stats, error) {
	if cfg.Workers < 1 {
		return Stats{}, fmt.Errorf("rollout: workers %d must be ≥ 1", cfg.Workers)
	}
	if r == nil || envs == nil || sink == nil {
		return Stats{}, errors.New("rollout: runner, environment factory and sink are required")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	start := time.Now()
	done := startPool(ctx, cfg, jobs, r, envs)
	st, werr := drain(done, sink, progress, cancel, start, len(jobs))
	if werr != nil {
		return st, werr
	}
	if err := ctx.Err(); err != nil {
		return st, fmt.Errorf("rollout interrupted after %d of %d episodes: %w", st.Episodes, len(jobs), err)
	}
	return st, nil
}

// startPool starts the feeder of jobs and the workers that play them; the
// returned channel carries each finished episode and is closed once every
// worker has stopped. Cancelling ctx stops the feeder.
func startPool(ctx context.Context, cfg Config, jobs []Job, r Runner, envs EnvFactory) <-chan episode.Episode {
	todo := make(chan Job)
	done := make(chan episode.Episode)
	var wg sync.WaitGroup
	for range min(cfg.Workers, max(len(jobs), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range todo {
				if ep, ok := play(ctx, cfg, j, r, envs); ok {
					done <- ep // the writer drains until close: never blocks forever
				}
			}
		}()
	}
	go func() {
		defer close(todo)
		for _, j := range jobs {
			select {
			case todo <- j:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}

// drain writes each episode from done to sink, reporting the statistics to
// progress after each write, until done is closed. After a failed write it
// cancels the pool and discards the rest; the error is that write's.
func drain(done <-chan episode.Episode, sink Sink, progress func(Stats), cancel context.CancelFunc, start time.Time, total int) (Stats, error) {
	st := Stats{Total: total, Statuses: map[episode.Status]int{}}
	var werr error
	for ep := range done {
		if werr != nil {
			continue
		}
		if err := sink.Write(&ep); err != nil {
			werr = fmt.Errorf("rollout: write episode %s: %w", ep.ID, err)
			cancel()
			continue
		}
		st.add(&ep)
		st.Elapsed = time.Since(start)
		if progress != nil {
			progress(st)
		}
	}
	st.Elapsed = time.Since(start)
	return st, werr
}

// Collect plays jobs as Run does (panic recovery, the episode deadline,
// infra_error masking) and returns the episodes in the order of jobs,
// whatever order they finish in. progress, if not nil, is called after each
// finished episode with the count so far and len(jobs). Job IDs must be
// unique (they place each episode). The error is the context's: then no
// episodes are returned.
func Collect(ctx context.Context, cfg Config, jobs []Job, r Runner, envs EnvFactory, progress func(done, total int)) ([]episode.Episode, Stats, error) {
	index := make(map[string]int, len(jobs))
	for i, j := range jobs {
		if _, dup := index[j.ID]; dup {
			return nil, Stats{}, fmt.Errorf("rollout: job ID %q appears twice", j.ID)
		}
		index[j.ID] = i
	}
	out := make([]episode.Episode, len(jobs))
	var report func(Stats)
	if progress != nil {
		report = func(st Stats) { progress(st.Episodes, len(jobs)) }
	}
	st, err := Run(ctx, cfg, jobs, r, envs, orderedSink{out, index}, report)
	if err != nil {
		return nil, st, err
	}
	return out, st, nil
}

// orderedSink places each episode at its job's index.
type orderedSink struct {
	out   []episode.Episode
	index map[string]int
}

func (s orderedSink) Write(ep *episode.Episode) error {
	s.out[s.index[ep.ID]] = *ep
	return nil
}

// play runs one job; ok is false when the episode was interrupted by the
// pool's context and must not be written.
func play(ctx context.Context, cfg Config, j Job, r Runner, envs EnvFactory) (ep episode.Episode, ok bool) {
	if ctx.Err() != nil {
		return ep, false
	}
	ectx := ctx
	if cfg.EpisodeTimeout > 0 {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, cfg.EpisodeTimeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			ep = failed(j, fmt.Errorf("panic: %v\n%s", p, firstLines(string(debug.Stack()), 12)))
			ok = true
		}
		if ok {
			ep = label(cfg, j, ep)
		}
	}()
	env, err := envs(j.Seed)
	if err != nil {
		return failed(j, fmt.Errorf("environment for seed %d: %w", j.Seed, err)), true
	}
	ep, err = r.Run(ectx, env, j.Seed)
	if err != nil {
		if ctx.Err() != nil {
			return ep, false
		}
		ep.Status = agent.FailureStatus(err)
		ep.Reward = 0
		if ep.Meta == nil {
			ep.Meta = map[string]string{}
		}
		ep.Meta[agent.MetaError] = err.Error()
	}
	return ep, true
}

// label gives a finished episode its job's ID, group and seed and the
// pool's Meta (keys the episode set win); an episode that fails validation
// becomes infra_error.
func label(cfg Config, j Job, ep episode.Episode) episode.Episode {
	ep.ID, ep.Group = j.ID, j.Group
	if ep.Meta == nil {
		ep.Meta = map[string]string{}
	}
	for k, v := range cfg.Meta {
		if _, set := ep.Meta[k]; !set {
			ep.Meta[k] = v
		}
	}
	ep.Meta["seed"] = fmt.Sprint(j.Seed)
	if err := ep.Validate(); err != nil {
		ep = failed(j, fmt.Errorf("invalid episode: %w", err))
		ep.ID, ep.Group = j.ID, j.Group
	}
	return ep
}

func failed(j Job, err error) episode.Episode {
	return episode.Episode{ID: j.ID, Group: j.Group, Status: episode.StatusInfraError,
		Meta: map[string]string{agent.MetaError: err.Error(), "seed": fmt.Sprint(j.Seed)}}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// JSONLSink writes episodes with episode.Writer and flushes after each.
type JSONLSink struct{ w *episode.Writer }

// NewJSONLSink returns a Sink writing JSONL to w.
func NewJSONLSink(w io.Writer) *JSONLSink { return &JSONLSink{w: episode.NewWriter(w)} }

// Write writes and flushes one episode.
func (s *JSONLSink) Write(ep *episode.Episode) error {
	if err := s.w.Write(ep); err != nil {
		return err
	}
	return s.w.Flush()
}

// Stats summarises the episodes written so far.
type Stats struct {
	Total         int // jobs asked for
	Episodes      int // episodes written
	Successes     int // status ok with a full reward (episode.Success)
	Scored        int // episodes not infra_error (those are masked, never scored)
	Statuses      map[episode.Status]int
	Compactions   float64 // sums, for the means
	Turns         float64
	Quality       float64 // sum of summary_quality over episodes that have one
	WithQuality   int
	SampledTokens float64
	Elapsed       time.Duration
}

func (s *Stats) add(ep *episode.Episode) {
	s.Episodes++
	s.Statuses[ep.Status]++
	if ep.Status.Scored() {
		s.Scored++
	}
	if ep.Succeeded() {
		s.Successes++
	}
	m := ep.Metrics
	s.Compactions += m[agent.MetricCompactions]
	s.Turns += m[agent.MetricTurns]
	s.SampledTokens += m[agent.MetricSampledTokens]
	if q, ok := m[agent.MetricSummaryQuality]; ok {
		s.Quality += q
		s.WithQuality++
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// SuccessRate is successes / scored episodes: infra_error episodes are
// masked, never counted as failures (NaN when nothing was scored).
func (s Stats) SuccessRate() float64 { return ratio(float64(s.Successes), float64(s.Scored)) }

// InfraErrors is the number of infra_error episodes written.
func (s Stats) InfraErrors() int { return s.Statuses[episode.StatusInfraError] }

// MeanCompactions is the mean number of compactions per episode.
func (s Stats) MeanCompactions() float64 { return ratio(s.Compactions, float64(s.Episodes)) }

// MeanTurns is the mean number of policy actions per episode.
func (s Stats) MeanTurns() float64 { return ratio(s.Turns, float64(s.Episodes)) }

// MeanSummaryQuality is the mean summary_quality over episodes with at
// least one summary (NaN when none has).
func (s Stats) MeanSummaryQuality() float64 { return ratio(s.Quality, float64(s.WithQuality)) }

// TokensPerSecond is sampled tokens per second of wall time.
func (s Stats) TokensPerSecond() float64 { return ratio(s.SampledTokens, s.Elapsed.Seconds()) }

// EpisodesPerSecond is episodes written per second of wall time.
func (s Stats) EpisodesPerSecond() float64 { return ratio(float64(s.Episodes), s.Elapsed.Seconds()) }

// String is the final statistics line.
func (s Stats) String() string {
	keys := make([]string, 0, len(s.Statuses))
	for k := range s.Statuses {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, s.Statuses[episode.Status(k)])
	}
	q := "n/a" // no episode compacted
	if s.WithQuality > 0 {
		q = fmt.Sprintf("%.3f", s.MeanSummaryQuality())
	}
	succ := "n/a (nothing scored)"
	if s.Scored > 0 {
		succ = fmt.Sprintf("%.3f", s.SuccessRate())
	}
	return fmt.Sprintf("episodes %d  success %s over %d scored (%d infra_error, masked)  compactions %.2f  turns %.1f  summary_quality %s  tokens/s %.0f  episodes/s %.1f  [%s]",
		s.Episodes, succ, s.Scored, s.InfraErrors(), s.MeanCompactions(), s.MeanTurns(), q, s.TokensPerSecond(), s.EpisodesPerSecond(), strings.Join(parts, " "))
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/internal/splitmix"
)

// Metric and Meta keys the loop writes.
const (
	MetricTurns          = "turns"
	MetricCompactions    = "compactions"
	MetricSummaryQuality = "summary_quality" // mean over the episode's summaries; absent without one
	MetricSampledTokens  = "sampled_tokens"
	MetricFormatErrors   = "format_errors"
	MetricTruncatedObs   = "truncated_observations"
	MetaError            = "error"
	MetaFinalObservation = "final_observation"
	MetaEndReason        = "end_reason"
)

// run is one episode's state.
type run struct {
	a           *Agent
	env         Environment
	seed        int64
	calls       int64
	ep          episode.Episode
	seg         episode.Segment
	steps       [][]int // each step's ids: [Assistant] a [EOT] [Observation] o [EOT]
	stepStart   int     // where the open step begins in seg.ResponseIDs
	quality     []float64
	summaries   int
	sampled     int
	turns       int // action calls so far
	compactions int
	formatRun   int    // invalid actions in a row
	dropped     string // the fact the last drop-one summary dropped, until the resumed context is built
}

// Run plays one episode. Environment, sampler and budget failures end the
// episode as infra_error (the error text in Meta["error"]) and the episode is
// returned with a nil error; the error is non-nil only when ctx is done, with
// the partial episode (status infra_error) alongside. ID and Group are left
// to the caller; seed derives every request's Seed.
func (a *Agent) Run(ctx context.Context, env Environment, seed int64) (episode.Episode, error) {
	r := &run{a: a, env: env, seed: seed}
	r.ep.Meta = map[string]string{}
	r.ep.Metrics = map[string]float64{}
	if a.override != OverrideNone {
		r.ep.Meta[MetaSummaryOverride] = string(a.override)
		r.ep.Metrics[MetricSummaryOverrides] = 0
	}
	err := r.loop(ctx)
	r.closeSegment()
	if err != nil {
		r.fail(err)
	}
	if r.ep.Status != episode.StatusOK {
		r.ep.Reward = 0
	}
	// An episode whose summaries were replaced (WithSummaryOverride) is an
	// evaluation record: its reward is not the policy's alone.
	for i := range r.ep.Segments {
		r.ep.Segments[i].Trainable = a.override == OverrideNone
	}
	r.finalMetrics()
	if ctx.Err() != nil {
		return r.ep, fmt.Errorf("episode interrupted: %w", ctx.Err())
	}
	return r.ep, nil
}

// loop plays the episode turn by turn until it ends: the compaction trigger
// before every policy call (compact.go), then act → observe.
func (r *run) loop(ctx context.Context) error {
	if err := r.start(ctx); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if r.turns >= r.a.cfg.MaxTurns {
			r.end(episode.StatusOverlong, "max_turns")
			return nil
		}
		if r.needsCompaction() {
			if err := r.compact(ctx); err != nil {
				return err
			}
			continue
		}
		if reason, full := r.windowFull(); full {
			r.end(episode.StatusOverlong, reason)
			return nil
		}
		reply, err := r.act(ctx)
		if err != nil {
			return err
		}
		st, err := r.env.Step(ctx, reply)
		if err != nil {
			return fmt.Errorf("environment step %d: %w", r.turns, err)
		}
		if ended, err := r.observe(ctx, st); ended || err != nil {
			return err
		}
	}
}

// start resets the environment and opens the first segment with
// h = [system] ⊕ [task], which must leave room for the first policy call:
// q_sum and a summary, or an action turn without compaction.
func (r *run) start(ctx context.Context) error {
	a, cfg := r.a, r.a.cfg
	m := r.ep.Metrics
	m[MetricTurns], m[MetricCompactions], m[MetricFormatErrors], m[MetricTruncatedObs] = 0, 0, 0, 0
	task, err := r.env.Reset(ctx)
	if err != nil {
		return fmt.Errorf("environment reset: %w", err)
	}
	if len(task) > MaxTaskBytes {
		return fmt.Errorf("environment reset: task text of %d bytes is longer than the %d-byte limit (agent.MaxTaskBytes)", len(task), MaxTaskBytes)
	}
	r.ep.Task = task
	taskIDs, err := a.encode(ctx, a.f.Content(task))
	if err != nil {
		return fmt.Errorf("task: %w", err)
	}
	r.seg.PromptIDs = append(append([]int{}, a.system...), a.f.Task(taskIDs)...)
	first, need := "summary", a.budget.SummaryPrompt+cfg.MaxSummaryTokens
	if cfg.NoCompaction {
		first, need = "action", a.actionTurnMax()
	}
	if r.len()+need > cfg.Context {
		return fmt.Errorf("initial context of %d tokens (system %d + task) leaves no room for the first %s in context %d",
			r.len(), len(a.system), first, cfg.Context)
	}
	return nil
}

// windowFull reports whether an action turn no longer fits, C − |h| <
// actionTurnMax, when no compaction can make room (the reason names why).
func (r *run) windowFull() (reason string, full bool) {
	if r.a.cfg.Context-r.len() >= r.a.actionTurnMax() {
		return "", false
	}
	if r.a.cfg.NoCompaction {
		return "window_full", true
	}
	return "max_compactions", true
}

// act opens a step with an action turn: Action() ⊕ a ⊕ Close, where a is
// sampled (≤ A tokens) and Close depends on whether a ended with its stop
// token. It returns a decoded, without the stop token.
func (r *run) act(ctx context.Context) (string, error) {
	a := r.a
	r.stepStart = len(r.seg.ResponseIDs)
	r.template(a.f.Action()...)
	c, err := r.sample(ctx, a.cfg.MaxActionTokens)
	if err != nil {
		return "", err
	}
	r.sampledTokens(c)
	action, stopped := a.stripStop(c.Tokens)
	r.template(a.f.Close(stopped)...)
	r.turns++
	r.ep.Metrics[MetricTurns] = float64(r.turns)
	reply, err := a.decode(ctx, action)
	if err != nil {
		return "", fmt.Errorf("action %d: %w", r.turns, err)
	}
	return reply, nil
}

// observe ends the episode on Done (reward R) or on too many invalid
// actions; otherwise it appends the observation turn, capped to fit, and
// closes the step. ended reports that the episode is over.
func (r *run) observe(ctx context.Context, st Step) (ended bool, err error) {
	if st.Done {
		r.ep.Reward = st.Reward
		if st.Observation != "" {
			r.ep.Meta[MetaFinalObservation] = st.Observation
		}
		r.end(episode.StatusOK, "done")
		return true, nil
	}
	obs, ended := r.checkFormat(st)
	if ended {
		return true, nil
	}
	ids, err := r.a.encode(ctx, r.a.f.Content(obs))
	if err != nil {
		return false, fmt.Errorf("observation %d: %w", r.turns, err)
	}
	block, truncated, ok, err := r.fitObservation(ctx, ids)
	if err != nil {
		return false, fmt.Errorf("observation %d: %w", r.turns, err)
	}
	if !ok {
		r.end(episode.StatusOverlong, "window_full")
		return true, nil
	}
	if truncated {
		r.ep.Metrics[MetricTruncatedObs]++
	}
	r.turn(block)
	r.steps = append(r.steps, append([]int(nil), r.seg.ResponseIDs[r.stepStart:]...))
	return false, nil
}

// checkFormat counts an invalid action; the MaxFormatErrors-th in a row
// ends the episode as format_error. It returns the observation to show, the
// default of prompts/invalid_action.txt when the environment gave none.
func (r *run) checkFormat(st Step) (obs string, ended bool) {
	if !st.Invalid {
		r.formatRun = 0
		return st.Observation, false
	}
	r.formatRun++
	r.ep.Metrics[MetricFormatErrors]++
	obs = st.Observation
	if obs == "" {
		obs = invalidActionObservation()
	}
	if r.formatRun >= r.a.cfg.MaxFormatErrors {
		r.end(episode.StatusFormatError, fmt.Sprintf("%d invalid actions in a row", r.formatRun))
		return "", true
	}
	return obs, false
}

// fitObservation caps an observation's content ids to
// limit = min(O, C − |h| − |Observation(∅)|) and renders its turn. ok is
// false when a non-empty observation cannot fit at all.
func (r *run) fitObservation(ctx context.Context, ids []int) (block []int, truncated, ok bool, err error) {
	a := r.a
	overhead := len(a.f.Observation(nil))
	limit := min(a.budget.ObservationCap, a.cfg.Context-r.len()-overhead)
	capped, err := a.capObservation(ctx, ids, limit)
	if err != nil {
		return nil, false, false, err
	}
	block = a.f.Observation(capped)
	// A Format that encodes a content jointly with its template's text
	// (ChatFormat) can render it in a few more tokens than the content
	// alone: cap tighter until the turn fits what the budget allows.
	for len(ids) > 0 && capped != nil && len(block) > limit+overhead {
		limit -= len(block) - (limit + overhead)
		if capped, err = a.capObservation(ctx, ids, limit); err != nil {
			return nil, false, false, err
		}
		if capped != nil {
			block = a.f.Observation(capped)
		}
	}
	if capped == nil && len(ids) > 0 {
		return nil, false, false, nil
	}
	return block, len(capped) < len(ids), true, nil
}

// finalMetrics adds the sampled-token count, the mean summary quality and
// the environment's own metrics (those with a free, finite key).
func (r *run) finalMetrics() {
	m := r.ep.Metrics
	m[MetricSampledTokens] = float64(r.sampled)
	if len(r.quality) > 0 {
		s := 0.0
		for _, q := range r.quality {
			s += q
		}
		m[MetricSummaryQuality] = s / float64(len(r.quality))
	}
	if mr, ok := r.env.(MetricsReporter); ok {
		for k, v := range mr.Metrics() {
			if _, taken := m[k]; !taken && !math.IsNaN(v) && !math.IsInf(v, 0) {
				m[k] = v
			}
		}
	}
}

// context is h = segment.prompt ⊕ segment.response-so-far.
func (r *run) context() []int {
	h := make([]int, 0, len(r.seg.PromptIDs)+len(r.seg.ResponseIDs)+1)
	h = append(h, r.seg.PromptIDs...)
	return append(h, r.seg.ResponseIDs...)
}

// len is |h|.
func (r *run) len() int { return len(r.seg.PromptIDs) + len(r.seg.ResponseIDs) }

// template appends format tokens: not trained, log-prob 0.
func (r *run) template(ids ...int) {
	r.seg.ResponseIDs = append(r.seg.ResponseIDs, ids...)
	for range ids {
		r.seg.LossMask = append(r.seg.LossMask, 0)
		r.seg.Logprobs = append(r.seg.Logprobs, 0)
	}
}

// turn appends a block that follows a sampled turn: when the policy's stop
// token is already the block's first token (GLM-4.x's roles are its stop
// tokens), the block continues after it.
func (r *run) turn(block []int) {
	if n := len(r.seg.ResponseIDs); n > 0 && len(block) > 0 && r.a.stop[block[0]] && r.seg.ResponseIDs[n-1] == block[0] && r.seg.LossMask[n-1] == 1 {
		block = block[1:]
	}
	r.template(block...)
}

// sampledTokens appends the policy's tokens: trained, with their log-probs.
func (r *run) sampledTokens(c infer.Completion) {
	r.seg.ResponseIDs = append(r.seg.ResponseIDs, c.Tokens...)
	for i := range c.Tokens {
		r.seg.LossMask = append(r.seg.LossMask, 1)
		r.seg.Logprobs = append(r.seg.Logprobs, c.Logprobs[i])
	}
	r.sampled += len(c.Tokens)
}

func (r *run) closeSegment() {
	if r.seg.Kind == "" {
		r.seg.Kind = episode.KindExec
	}
	if len(r.seg.ResponseIDs) > 0 {
		r.ep.Segments = append(r.ep.Segments, r.seg)
	}
	r.seg = episode.Segment{}
}

// sample asks the policy to continue the current context, which must end
// with the open marker, with the seed splitmix.Pair(episode seed, call
// index). It checks the sampler's contract.
func (r *run) sample(ctx context.Context, maxTokens int) (infer.Completion, error) {
	r.calls++
	req := infer.Request{
		Prompt:      r.context(),
		MaxTokens:   maxTokens,
		Temperature: r.a.cfg.Temperature,
		TopP:        r.a.cfg.TopP,
		Stop:        r.a.f.Stop(),
		Seed:        splitmix.Pair(r.seed, r.calls),
	}
	c, err := r.a.sampler.Sample(ctx, req)
	if err != nil {
		return c, fmt.Errorf("sample call %d: %w", r.calls, err)
	}
	if len(c.Tokens) > maxTokens {
		return c, fmt.Errorf("sample call %d: sampler returned %d tokens, limit %d", r.calls, len(c.Tokens), maxTokens)
	}
	if len(c.Logprobs) != len(c.Tokens) {
		return c, fmt.Errorf("sample call %d: %d log-probs for %d tokens", r.calls, len(c.Logprobs), len(c.Tokens))
	}
	for i, id := range c.Tokens {
		if i < len(c.Tokens)-1 && r.a.stop[id] {
			return c, fmt.Errorf("sample call %d: stop token at %d of %d", r.calls, i, len(c.Tokens))
		}
		if math.IsNaN(c.Logprobs[i]) || math.IsInf(c.Logprobs[i], 0) || c.Logprobs[i] > 0 {
			return c, fmt.Errorf("sample call %d: log-prob %v at %d", r.calls, c.Logprobs[i], i)
		}
	}
	return c, nil
}

func (r *run) end(status episode.Status, reason string) {
	r.ep.Status = status
	if reason != "" {
		r.ep.Meta[MetaEndReason] = reason
	}
}

func (r *run) fail(err error) {
	r.ep.Status = FailureStatus(err)
	r.ep.Reward = 0
	r.ep.Meta[MetaError] = err.Error()
}

// ErrVerifier marks an environment error that is the task's verifier's:
// it could not run or finish. Environments wrap it; the episode's status is
// then verifier_error instead of infra_error.
var ErrVerifier = errors.New("verifier error")

// FailureStatus is the status of an episode that ended in err.
func FailureStatus(err error) episode.Status {
	if errors.Is(err, ErrVerifier) {
		return episode.StatusVerifierError
	}
	return episode.StatusInfraError
}

// Package agent runs one episode of a policy (an infer.Sampler) in an
// Environment with context compaction (CompactionRL, DESIGN.md §1), and
// records it as segments of exact token ids (DESIGN.md §3).
//
// Data flow: Environment.Reset gives the task u; the loop builds the context
// h = [system] ⊕ [task] in tokens and, before every policy call, checks the
// trigger C − |h| < T_comp. Each action is sampled (token ids + log-probs),
// decoded and passed to Environment.Step; the observation is capped (head +
// tail with a marker) and appended. When the trigger fires the policy writes
// a summary after q_sum, the segment closes, and the next context is
// [system] ⊕ resume(S) ⊕ the last k steps. The context at every policy call is
// exactly segment.prompt ⊕ segment.response-so-far ⊕ the open marker, so the
// trainer scores the very tokens the sampler saw.
//
// The default summary instruction and resume text are files under prompts/,
// embedded in the binary (prompts.go); Config's texts override them.
//
// How turns are laid out in tokens is a Format (format.go): the built-in
// model's six special ids (Template), or a real model's chat template
// (ChatFormat, chat.go: Qwen3, Llama 3, DeepSeek-V3, Gemma 3, GPT-OSS,
// ChatML, GLM-4.5 presets, token-exact with the models' own Jinja templates).
package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/internal/splitmix"
)

// SummaryAuditor is implemented by environments that can say which of the
// decisive facts seen so far a summary kept and which it lost; the loop
// records them in the episode's Meta (summary_N_kept, summary_N_lost) for
// transcripts.
type SummaryAuditor interface {
	SummaryAudit(summary string) (kept, lost []string)
}

// Agent runs episodes with one configuration, tokenizer and policy. It is
// safe for concurrent use: Run keeps all episode state on its own stack.
type Agent struct {
	cfg     Config
	tok     Tokenizer
	f       Format
	stop    map[int]bool // f.Stop()
	sampler infer.Sampler
	budget  Budget

	system     []int // System(s)
	qsum       []int // SummaryRequest(instruction)
	resumeText []int // the resume text's content ids
	resume     []int // the resume turn up to the summary
	closeMax   int   // the longer of Close(true) and Close(false)
}

// New checks cfg against the token arithmetic of Budget and precomputes the
// template blocks, with the built-in model's six-id Template.
func New(cfg Config, tok Tokenizer, tmpl Template, s infer.Sampler) (*Agent, error) {
	if err := tmpl.validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	return NewWithFormat(cfg, tok, tmpl.Format(), s)
}

// NewWithFormat is New with any Format, e.g. a real model's ChatFormat.
func NewWithFormat(cfg Config, tok Tokenizer, f Format, s infer.Sampler) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	if tok == nil || s == nil || f == nil {
		return nil, errors.New("agent config: tokenizer, format and sampler are required")
	}
	if len(f.Stop()) == 0 {
		return nil, errors.New("agent config: the format has no stop token")
	}
	a := &Agent{cfg: cfg, tok: tok, f: f, sampler: s, stop: map[int]bool{}}
	for _, id := range f.Stop() {
		a.stop[id] = true
	}
	a.system = f.System(a.content(cfg.SystemPrompt))
	a.qsum = f.SummaryRequest(a.content(cfg.SummaryInstruction))
	a.resumeText = a.content(cfg.ResumeText)
	a.closeMax = max(len(f.Close(true)), len(f.Close(false)))
	overhead := len(f.Action()) + a.closeMax + len(f.Observation(nil))
	resume := len(f.Resume(a.resumeText, nil))
	probe := f.Resume(a.resumeText, []int{-1})
	if p := slices.Index(probe, -1); p >= 0 && len(probe) == resume+1 {
		a.resume = probe[:p]
	} else {
		return nil, errors.New("agent config: the format's Resume does not place the summary once, as given")
	}

	b := Budget{
		Window:        cfg.Window,
		Reserve:       cfg.Reserve,
		SystemTokens:  len(a.system),
		SummaryPrompt: len(a.qsum),
		MarkerMax:     len(a.marker(math.MaxInt32)),
	}
	b.ResumeMax = len(a.system) + resume + cfg.MaxSummaryTokens
	room := cfg.Reserve - b.SummaryPrompt - cfg.MaxSummaryTokens - cfg.MaxActionTokens - overhead
	switch {
	case cfg.MaxObservationTokens == 0:
		b.ObservationCap = room
	case cfg.MaxObservationTokens > room:
		return nil, fmt.Errorf("agent config: max_observation_tokens %d exceeds what reserve %d allows (%d = reserve − q_sum %d − summary %d − action %d − turn markers %d)",
			cfg.MaxObservationTokens, cfg.Reserve, room, b.SummaryPrompt, cfg.MaxSummaryTokens, cfg.MaxActionTokens, overhead)
	default:
		b.ObservationCap = cfg.MaxObservationTokens
	}
	if b.ObservationCap < b.MarkerMax+minObservationCap {
		return nil, fmt.Errorf("agent config: reserve %d leaves an observation cap of %d tokens, below the minimum %d (marker %d + %d); raise the reserve or lower max_summary_tokens/max_action_tokens",
			cfg.Reserve, b.ObservationCap, b.MarkerMax+minObservationCap, b.MarkerMax, minObservationCap)
	}
	b.StepMax = cfg.MaxActionTokens + b.ObservationCap + overhead
	if cfg.Window-b.ResumeMax < cfg.Reserve {
		return nil, fmt.Errorf("agent config: window %d − resumed context %d (system %d + resume turn %d + summary %d) < reserve %d: a compaction could not make room",
			cfg.Window, b.ResumeMax, len(a.system), resume, cfg.MaxSummaryTokens, cfg.Reserve)
	}
	a.budget = b
	return a, nil
}

// Budget returns the derived token arithmetic.
func (a *Agent) Budget() Budget { return a.budget }

// Config returns the configuration the agent was built with.
func (a *Agent) Config() Config { return a.cfg }

// content encodes a fixed text (system prompt, instruction) as the format
// wants its contents.
func (a *Agent) content(text string) []int { return a.tok.Encode(a.f.Content(text)) }

// turn appends a block that follows a sampled turn: when the policy's stop
// token is already the block's first token (GLM-4.x's roles are its stop
// tokens), the block continues after it.
func (r *run) turn(block []int) {
	if n := len(r.seg.ResponseIDs); n > 0 && len(block) > 0 && r.a.stop[block[0]] && r.seg.ResponseIDs[n-1] == block[0] && r.seg.LossMask[n-1] == 1 {
		block = block[1:]
	}
	r.template(block...)
}

// encode tokenises text inside an episode, through ContextTokenizer when
// the tokenizer has it.
func (a *Agent) encode(ctx context.Context, text string) ([]int, error) {
	if ct, ok := a.tok.(ContextTokenizer); ok {
		ids, err := ct.EncodeContext(ctx, text)
		if err != nil {
			return nil, fmt.Errorf("tokenize: %w", err)
		}
		return ids, nil
	}
	return a.tok.Encode(text), nil
}

// decode is encode's inverse.
func (a *Agent) decode(ctx context.Context, ids []int) (string, error) {
	if ct, ok := a.tok.(ContextTokenizer); ok {
		text, err := ct.DecodeContext(ctx, ids)
		if err != nil {
			return "", fmt.Errorf("detokenize: %w", err)
		}
		return text, nil
	}
	return a.tok.Decode(ids), nil
}

func (a *Agent) marker(n int) []int {
	return a.tok.Encode(fmt.Sprintf(" …[%d tokens omitted]… ", n))
}

// CapObservation returns ids unchanged when len(ids) ≤ limit, else
// head ⊕ marker(n) ⊕ tail with len ≤ limit, where n ids are left out and the
// head gets the odd token. It returns nil when limit cannot hold the marker
// and one token of each side.
func (a *Agent) CapObservation(ids []int, limit int) []int {
	if len(ids) <= limit {
		return ids
	}
	// keep + |marker(len(ids) − keep)| ≤ limit, searched down from the
	// marker of the largest n (marker lengths need not be monotone in n).
	for keep := limit - len(a.marker(len(ids))); keep >= 2; keep-- {
		m := a.marker(len(ids) - keep)
		if keep+len(m) > limit {
			continue
		}
		head := (keep + 1) / 2
		out := make([]int, 0, keep+len(m))
		out = append(out, ids[:head]...)
		out = append(out, m...)
		return append(out, ids[len(ids)-(keep-head):]...)
	}
	return nil
}

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
	a         *Agent
	env       Environment
	seed      int64
	calls     int64
	ep        episode.Episode
	seg       episode.Segment
	steps     [][]int // each step's ids: [Assistant] a [EOT] [Observation] o [EOT]
	quality   []float64
	summaries int
	sampled   int
}

func (r *run) context() []int {
	h := make([]int, 0, len(r.seg.PromptIDs)+len(r.seg.ResponseIDs)+1)
	h = append(h, r.seg.PromptIDs...)
	return append(h, r.seg.ResponseIDs...)
}

func (r *run) len() int { return len(r.seg.PromptIDs) + len(r.seg.ResponseIDs) }

func (r *run) template(ids ...int) {
	r.seg.ResponseIDs = append(r.seg.ResponseIDs, ids...)
	for range ids {
		r.seg.LossMask = append(r.seg.LossMask, 0)
		r.seg.Logprobs = append(r.seg.Logprobs, 0)
	}
}

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
// with the open marker. It checks the sampler's contract.
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
	r.ep.Status = episode.StatusInfraError
	r.ep.Reward = 0
	r.ep.Meta[MetaError] = err.Error()
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
	err := r.loop(ctx)
	r.closeSegment()
	if err != nil {
		r.fail(err)
	}
	if r.ep.Status != episode.StatusOK {
		r.ep.Reward = 0
	}
	for i := range r.ep.Segments {
		r.ep.Segments[i].Trainable = true
	}
	m := r.ep.Metrics
	m[MetricSampledTokens] = float64(r.sampled)
	if len(r.quality) > 0 {
		s := 0.0
		for _, q := range r.quality {
			s += q
		}
		m[MetricSummaryQuality] = s / float64(len(r.quality))
	}
	if mr, ok := env.(MetricsReporter); ok {
		for k, v := range mr.Metrics() {
			if _, taken := m[k]; !taken && !math.IsNaN(v) && !math.IsInf(v, 0) {
				m[k] = v
			}
		}
	}
	if ctx.Err() != nil {
		return r.ep, fmt.Errorf("episode interrupted: %w", ctx.Err())
	}
	return r.ep, nil
}

func (r *run) loop(ctx context.Context) error {
	a, cfg, b := r.a, r.a.cfg, r.a.budget
	m := r.ep.Metrics
	m[MetricTurns], m[MetricCompactions], m[MetricFormatErrors], m[MetricTruncatedObs] = 0, 0, 0, 0

	task, err := r.env.Reset(ctx)
	if err != nil {
		return fmt.Errorf("environment reset: %w", err)
	}
	r.ep.Task = task
	taskIDs, err := a.encode(ctx, a.f.Content(task))
	if err != nil {
		return fmt.Errorf("task: %w", err)
	}
	r.seg.PromptIDs = append(append([]int{}, a.system...), a.f.Task(taskIDs)...)
	need := b.SummaryPrompt + cfg.MaxSummaryTokens
	if cfg.NoCompaction {
		need = cfg.MaxActionTokens + len(a.f.Action()) + a.closeMax
	}
	if r.len()+need > cfg.Window {
		return fmt.Errorf("initial context of %d tokens (system %d + task) leaves no room for the first %s in window %d",
			r.len(), len(a.system), map[bool]string{true: "action", false: "summary"}[cfg.NoCompaction], cfg.Window)
	}

	turns, compactions, formatRun := 0, 0, 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if turns >= cfg.MaxTurns {
			r.end(episode.StatusOverlong, "max_turns")
			return nil
		}
		canCompact := !cfg.NoCompaction && compactions < cfg.MaxCompactions
		if cfg.Window-r.len() < cfg.Reserve && canCompact {
			if err := r.compact(ctx); err != nil {
				return err
			}
			compactions++
			m[MetricCompactions] = float64(compactions)
			continue
		}
		// Without compaction (or with none left) the window-full rule:
		// room for Action() a Close.
		if cfg.Window-r.len() < cfg.MaxActionTokens+len(a.f.Action())+a.closeMax {
			reason := "window_full"
			if !cfg.NoCompaction {
				reason = "max_compactions"
			}
			r.end(episode.StatusOverlong, reason)
			return nil
		}
		stepStart := len(r.seg.ResponseIDs)
		r.template(a.f.Action()...)
		c, err := r.sample(ctx, cfg.MaxActionTokens)
		if err != nil {
			return err
		}
		r.sampledTokens(c)
		action := c.Tokens
		if n := len(action); n > 0 && a.stop[action[n-1]] {
			action = action[:n-1]
			r.template(a.f.Close(true)...)
		} else {
			r.template(a.f.Close(false)...)
		}
		turns++
		m[MetricTurns] = float64(turns)
		reply, err := a.decode(ctx, action)
		if err != nil {
			return fmt.Errorf("action %d: %w", turns, err)
		}
		st, err := r.env.Step(ctx, reply)
		if err != nil {
			return fmt.Errorf("environment step %d: %w", turns, err)
		}
		if st.Done {
			r.ep.Reward = st.Reward
			if st.Observation != "" {
				r.ep.Meta[MetaFinalObservation] = st.Observation
			}
			r.end(episode.StatusOK, "done")
			return nil
		}
		obs := st.Observation
		if st.Invalid {
			formatRun++
			m[MetricFormatErrors]++
			if obs == "" {
				obs = "invalid action: it could not be parsed; reply with one action in the format the system prompt gives"
			}
			if formatRun >= cfg.MaxFormatErrors {
				r.end(episode.StatusFormatError, fmt.Sprintf("%d invalid actions in a row", formatRun))
				return nil
			}
		} else {
			formatRun = 0
		}
		ids, err := a.encode(ctx, a.f.Content(obs))
		if err != nil {
			return fmt.Errorf("observation %d: %w", turns, err)
		}
		overhead := len(a.f.Observation(nil))
		limit := min(b.ObservationCap, cfg.Window-r.len()-overhead)
		capped := a.CapObservation(ids, limit)
		block := a.f.Observation(capped)
		// A Format that encodes a content jointly with its template's text
		// (ChatFormat) can render it in a few more tokens than the content
		// alone: cap tighter until the turn fits what the budget allows.
		for len(ids) > 0 && capped != nil && len(block) > limit+overhead {
			limit -= len(block) - (limit + overhead)
			if capped = a.CapObservation(ids, limit); capped != nil {
				block = a.f.Observation(capped)
			}
		}
		if capped == nil && len(ids) > 0 {
			r.end(episode.StatusOverlong, "window_full")
			return nil
		}
		if len(capped) < len(ids) {
			m[MetricTruncatedObs]++
		}
		r.turn(block)
		r.steps = append(r.steps, append([]int(nil), r.seg.ResponseIDs[stepStart:]...))
	}
}

// compact writes the summary at the end of the current segment and starts
// the next one from [system] ⊕ resume(S) ⊕ the last k steps that fit.
func (r *run) compact(ctx context.Context) error {
	a, cfg := r.a, r.a.cfg
	r.turn(a.qsum)
	c, err := r.sample(ctx, cfg.MaxSummaryTokens)
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	r.sampledTokens(c)
	r.seg.Kind = episode.KindSummary
	summary := c.Tokens
	if n := len(summary); n > 0 && a.stop[summary[n-1]] {
		summary = summary[:n-1]
	}
	text, err := a.decode(ctx, summary)
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	r.summaries++
	idx := r.summaries
	q := math.NaN()
	if sc, ok := r.env.(SummaryScorer); ok {
		q = sc.SummaryQuality(text)
	}
	if au, ok := r.env.(SummaryAuditor); ok {
		kept, lost := au.SummaryAudit(text)
		r.ep.Meta[fmt.Sprintf("summary_%d_kept", idx)] = strings.Join(kept, " ")
		r.ep.Meta[fmt.Sprintf("summary_%d_lost", idx)] = strings.Join(lost, " ")
	}
	if !math.IsNaN(q) && !math.IsInf(q, 0) {
		r.quality = append(r.quality, q)
		r.ep.Metrics[fmt.Sprintf("summary_%d_quality", idx)] = q
	}
	r.closeSegment()

	prompt := append([]int{}, a.system...)
	prompt = append(prompt, a.f.Resume(a.resumeText, summary)...)
	k := min(cfg.KeepLast, len(r.steps))
	for ; k >= 0; k-- {
		n := len(prompt)
		for _, s := range r.steps[len(r.steps)-k:] {
			n += len(s)
		}
		if cfg.Window-n >= cfg.Reserve {
			break
		}
	}
	if k < 0 {
		return fmt.Errorf("resumed context of %d tokens does not leave the reserve %d in window %d", len(prompt), cfg.Reserve, cfg.Window)
	}
	for _, s := range r.steps[len(r.steps)-k:] {
		prompt = append(prompt, s...)
	}
	r.seg.PromptIDs = prompt
	return nil
}

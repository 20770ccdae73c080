// Package agent runs one episode of a policy (an infer.Sampler) in an
// Environment with context compaction (CompactionRL, docs/design.md §1), and
// records it as segments of exact token ids (docs/design.md §3).
//
// Data flow: Environment.Reset gives the task u; the loop (loop.go) builds
// the context h = [system] ⊕ [task] in tokens and, before every policy call,
// checks the trigger C − |h| < T_comp (compact.go). Each action is sampled
// (token ids + log-probs), decoded and passed to Environment.Step; the
// observation is capped (head + tail with a marker) and appended. When the
// trigger fires the policy writes a summary after q_sum, the segment closes,
// and the next context is [system] ⊕ resume(S) ⊕ the last k steps. The
// context at every policy call is exactly segment.prompt ⊕
// segment.response-so-far ⊕ the open marker, so the trainer scores the very
// tokens the sampler saw. Budget (compact.go) is the token arithmetic that
// keeps every segment inside the window. For evaluation only, an agent
// made WithSummaryOverride replaces every summary by a reference summary,
// one with a fact dropped, or an empty one (override.go), to measure what
// the summary alone decides.
//
// The default summary instruction and resume text are files under prompts/,
// embedded in the binary (prompts.go); Config's texts override them.
//
// How turns are laid out in tokens is a Format (format.go): the built-in
// model's six special ids (Template), or a real model's chat template
// (ChatFormat, chat.go: Qwen3, Llama 3, DeepSeek-V3, Gemma 3, GPT-OSS,
// ChatML, GLM-4.5 presets, token-exact with the models' own Jinja
// templates). The presets are embedded data files, templates/NAME.json,
// with golden renderings in testdata/golden/NAME.txt.
package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/compactrl/compactrl/infer"
)

// ErrConfig is wrapped by every error New and NewWithFormat return: the
// configuration, template or format cannot make an agent (a budget that
// does not fit, a missing part). Callers tell such a refusal from other
// failures with errors.Is; serve answers it naming the request's agent
// field.
var ErrConfig = errors.New("agent config")

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

	override SummaryOverride // evaluation only: WithSummaryOverride
}

// New checks cfg against the token arithmetic of Budget and precomputes the
// template blocks, with the built-in model's six-id Template. ctx bounds
// the encoding of the fixed texts (system prompt, summary instruction,
// resume text); a tokenizer failure is returned as it is, not as ErrConfig.
func New(ctx context.Context, cfg Config, tok Tokenizer, tmpl Template, s infer.Sampler) (*Agent, error) {
	if err := tmpl.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return NewWithFormat(ctx, cfg, tok, tmpl.Format(), s)
}

// NewWithFormat is New with any Format, e.g. a real model's ChatFormat.
func NewWithFormat(ctx context.Context, cfg Config, tok Tokenizer, f Format, s infer.Sampler) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if tok == nil || s == nil || f == nil {
		return nil, fmt.Errorf("%w: tokenizer, format and sampler are required", ErrConfig)
	}
	if len(f.Stop()) == 0 {
		return nil, fmt.Errorf("%w: the format has no stop token", ErrConfig)
	}
	a := &Agent{cfg: cfg, tok: tok, f: f, sampler: s, stop: map[int]bool{}}
	for _, id := range f.Stop() {
		a.stop[id] = true
	}
	system, err := a.encode(ctx, f.Content(cfg.SystemPrompt))
	if err != nil {
		return nil, fmt.Errorf("system prompt: %w", err)
	}
	instruction, err := a.encode(ctx, f.Content(cfg.SummaryInstruction))
	if err != nil {
		return nil, fmt.Errorf("summary instruction: %w", err)
	}
	if a.resumeText, err = a.encode(ctx, f.Content(cfg.ResumeText)); err != nil {
		return nil, fmt.Errorf("resume text: %w", err)
	}
	a.system, a.qsum = f.System(system), f.SummaryRequest(instruction)
	a.closeMax = max(len(f.Close(true)), len(f.Close(false)))
	resume := len(f.Resume(a.resumeText, nil))
	probe := f.Resume(a.resumeText, []int{-1})
	if p := slices.Index(probe, -1); p >= 0 && len(probe) == resume+1 {
		a.resume = probe[:p]
	} else {
		return nil, fmt.Errorf("%w: the format's Resume does not place the summary once, as given", ErrConfig)
	}
	markerMax, err := a.marker(ctx, maxOmitted)
	if err != nil {
		return nil, err
	}
	b, err := a.deriveBudget(resume, len(markerMax))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	a.budget = b
	return a, nil
}

// Budget returns the derived token arithmetic.
func (a *Agent) Budget() Budget { return a.budget }

// Config returns the configuration the agent was built with.
func (a *Agent) Config() Config { return a.cfg }

// actionTurnMax is the most tokens one action turn adds to the context:
// Action() ⊕ a (≤ A tokens) ⊕ the longer Close.
func (a *Agent) actionTurnMax() int {
	return a.cfg.MaxActionTokens + len(a.f.Action()) + a.closeMax
}

// stripStop returns ids without a final stop token, and whether it had one.
func (a *Agent) stripStop(ids []int) ([]int, bool) {
	if n := len(ids); n > 0 && a.stop[ids[n-1]] {
		return ids[:n-1], true
	}
	return ids, false
}

// encode tokenises text, naming the call in its error.
func (a *Agent) encode(ctx context.Context, text string) ([]int, error) {
	ids, err := a.tok.Encode(ctx, text)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	return ids, nil
}

// decode is encode's inverse.
func (a *Agent) decode(ctx context.Context, ids []int) (string, error) {
	text, err := a.tok.Decode(ctx, ids)
	if err != nil {
		return "", fmt.Errorf("detokenize: %w", err)
	}
	return text, nil
}

// OmissionMarker is the text that stands for n tokens a capped observation
// leaves out.
func OmissionMarker(n int) string { return fmt.Sprintf(" …[%d tokens omitted]… ", n) }

func (a *Agent) marker(ctx context.Context, n int) ([]int, error) {
	ids, err := a.encode(ctx, OmissionMarker(n))
	if err != nil {
		return nil, fmt.Errorf("omission marker: %w", err)
	}
	return ids, nil
}

// minKeptTokens is the least a capped observation keeps: one token of its
// head and one of its tail.
const minKeptTokens = 2

// capObservation returns ids unchanged when len(ids) ≤ limit, else
// head ⊕ marker(n) ⊕ tail with len ≤ limit, where n ids are left out and the
// head gets the odd token. It returns nil when limit cannot hold the marker
// and one token of each side.
func (a *Agent) capObservation(ctx context.Context, ids []int, limit int) ([]int, error) {
	if len(ids) <= limit {
		return ids, nil
	}
	// keep + |marker(len(ids) − keep)| ≤ limit, searched down from the
	// marker of the largest n (marker lengths need not be monotone in n).
	longest, err := a.marker(ctx, len(ids))
	if err != nil {
		return nil, err
	}
	for keep := limit - len(longest); keep >= minKeptTokens; keep-- {
		m, err := a.marker(ctx, len(ids)-keep)
		if err != nil {
			return nil, err
		}
		if keep+len(m) > limit {
			continue
		}
		head := (keep + 1) / 2
		out := make([]int, 0, keep+len(m))
		out = append(out, ids[:head]...)
		out = append(out, m...)
		return append(out, ids[len(ids)-(keep-head):]...), nil
	}
	return nil, nil
}

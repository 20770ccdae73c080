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
// template blocks, with the built-in model's six-id Template.
func New(cfg Config, tok Tokenizer, tmpl Template, s infer.Sampler) (*Agent, error) {
	if err := tmpl.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return NewWithFormat(cfg, tok, tmpl.Format(), s)
}

// NewWithFormat is New with any Format, e.g. a real model's ChatFormat.
func NewWithFormat(cfg Config, tok Tokenizer, f Format, s infer.Sampler) (*Agent, error) {
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
	a.system = f.System(a.content(cfg.SystemPrompt))
	a.qsum = f.SummaryRequest(a.content(cfg.SummaryInstruction))
	a.resumeText = a.content(cfg.ResumeText)
	a.closeMax = max(len(f.Close(true)), len(f.Close(false)))
	resume := len(f.Resume(a.resumeText, nil))
	probe := f.Resume(a.resumeText, []int{-1})
	if p := slices.Index(probe, -1); p >= 0 && len(probe) == resume+1 {
		a.resume = probe[:p]
	} else {
		return nil, fmt.Errorf("%w: the format's Resume does not place the summary once, as given", ErrConfig)
	}
	b, err := a.deriveBudget(resume)
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

// content encodes a fixed text (system prompt, instruction) as the format
// wants its contents.
func (a *Agent) content(text string) []int { return a.tok.Encode(a.f.Content(text)) }

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

// OmissionMarker is the text that stands for n tokens a capped observation
// leaves out.
func OmissionMarker(n int) string { return fmt.Sprintf(" …[%d tokens omitted]… ", n) }

func (a *Agent) marker(n int) []int { return a.tok.Encode(OmissionMarker(n)) }

// minKeptTokens is the least a capped observation keeps: one token of its
// head and one of its tail.
const minKeptTokens = 2

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
	for keep := limit - len(a.marker(len(ids))); keep >= minKeptTokens; keep-- {
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

package agent

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/compactrl/compactrl/episode"
)

// Compaction (docs/design.md §1.2–§1.4): the trigger C − |h| < T_comp before a policy
// call, the Budget that makes every segment fit the window, the summary call
// after q_sum, and the resumed context [system] ⊕ resume(S) ⊕ the last k
// steps.

// Budget is the loop's derived token arithmetic. With
//
//	Q = |q_sum|, S = MaxSummaryTokens, A = MaxActionTokens, O = ObservationCap,
//	M = StepMarkers = |Action()| + max(|Close(true)|, |Close(false)|) + |Observation(∅)|
//	    (4 with Template: [Assistant], an EndOfTurn forced when the action
//	    hit its limit, [Observation], EndOfTurn)
//	Step = A + O + M
//
// the loop keeps these invariants, checked by New:
//
//	Reserve ≥ Q + S + Step            a step taken with C − |h| ≥ Reserve leaves room for q_sum and the longest summary
//	C − ResumeMax ≥ Reserve          the resumed context with k = 0 never triggers again at once
//	ResumeMax = |s| + |resume(·)| + S
//
// so every segment (prompt + response) stays ≤ C.
type Budget struct {
	Context        int // C: Config.Context
	Reserve        int // T_comp: Config.Reserve
	SystemTokens   int // |[System] s [EndOfTurn]|
	SummaryPrompt  int // Q
	ObservationCap int // O
	StepMarkers    int // M
	StepMax        int // A + O + M
	ResumeMax      int // |s| + resume overhead + S
	MarkerMax      int // the longest omission marker
}

// minObservationCap is the least cap New accepts beyond the marker: an
// observation must keep some head and tail.
const minObservationCap = 8

// maxOmitted is the omitted count the longest marker is measured at (a
// marker's length grows with its count's digits).
const maxOmitted = math.MaxInt32

// deriveBudget computes Budget from the config and the format's block
// lengths (resumeTurn = |resume(·)| without the summary; markerMax = the
// longest omission marker's) and checks its invariants. O is the
// configured cap, or the room the reserve leaves, Reserve − Q − S − A − M.
func (a *Agent) deriveBudget(resumeTurn, markerMax int) (Budget, error) {
	cfg := a.cfg
	b := Budget{
		Context:       cfg.Context,
		Reserve:       cfg.Reserve,
		SystemTokens:  len(a.system),
		SummaryPrompt: len(a.qsum),
		StepMarkers:   len(a.f.Action()) + a.closeMax + len(a.f.Observation(nil)),
		ResumeMax:     len(a.system) + resumeTurn + cfg.MaxSummaryTokens,
		MarkerMax:     markerMax,
	}
	room := cfg.Reserve - b.SummaryPrompt - cfg.MaxSummaryTokens - cfg.MaxActionTokens - b.StepMarkers
	switch {
	case cfg.MaxObservationTokens == 0:
		b.ObservationCap = room
	case cfg.MaxObservationTokens > room:
		return b, fmt.Errorf("max_observation_tokens %d exceeds what reserve %d allows (%d = reserve − q_sum %d − summary %d − action %d − turn markers %d)",
			cfg.MaxObservationTokens, cfg.Reserve, room, b.SummaryPrompt, cfg.MaxSummaryTokens, cfg.MaxActionTokens, b.StepMarkers)
	default:
		b.ObservationCap = cfg.MaxObservationTokens
	}
	if b.ObservationCap < b.MarkerMax+minObservationCap {
		return b, fmt.Errorf("reserve %d leaves an observation cap of %d tokens, below the minimum %d (marker %d + %d); raise the reserve or lower max_summary_tokens/max_action_tokens",
			cfg.Reserve, b.ObservationCap, b.MarkerMax+minObservationCap, b.MarkerMax, minObservationCap)
	}
	b.StepMax = cfg.MaxActionTokens + b.ObservationCap + b.StepMarkers
	if cfg.Context-b.ResumeMax < cfg.Reserve {
		return b, fmt.Errorf("context %d − resumed context %d (system %d + resume turn %d + summary %d) < reserve %d: a compaction could not make room",
			cfg.Context, b.ResumeMax, len(a.system), resumeTurn, cfg.MaxSummaryTokens, cfg.Reserve)
	}
	return b, nil
}

// needsCompaction is the trigger before a policy call, C − |h| < T_comp,
// while a compaction is allowed (not NoCompaction, fewer than
// MaxCompactions so far).
func (r *run) needsCompaction() bool {
	cfg := r.a.cfg
	return !cfg.NoCompaction && r.compactions < cfg.MaxCompactions && cfg.Context-r.len() < cfg.Reserve
}

// compact writes the summary S at the end of the current segment, closes
// it, and opens the next one from the resumed context.
func (r *run) compact(ctx context.Context) error {
	summary, err := r.summarize(ctx)
	if err != nil {
		return err
	}
	r.closeSegment()
	prompt, err := r.resumeContext(summary)
	if err != nil {
		return err
	}
	if err := r.noteDropVisible(ctx, prompt, summary); err != nil {
		return err
	}
	r.seg.PromptIDs = prompt
	r.compactions++
	r.ep.Metrics[MetricCompactions] = float64(r.compactions)
	return nil
}

// summarize appends q_sum, samples the summary (≤ S tokens) into a summary
// segment, records its grade, and returns its ids without the stop token.
func (r *run) summarize(ctx context.Context) ([]int, error) {
	a := r.a
	if a.override != OverrideNone {
		return r.overrideSummary(ctx)
	}
	r.turn(a.qsum)
	c, err := r.sample(ctx, a.cfg.MaxSummaryTokens)
	if err != nil {
		return nil, fmt.Errorf("summary: %w", err)
	}
	r.sampledTokens(c)
	r.seg.Kind = episode.KindSummary
	summary, _ := a.stripStop(c.Tokens)
	text, err := a.decode(ctx, summary)
	if err != nil {
		return nil, fmt.Errorf("summary: %w", err)
	}
	r.gradeSummary(text)
	return summary, nil
}

// gradeSummary records the N-th summary's quality (summary_N_quality, when
// the environment is a SummaryScorer and the grade is finite) and which
// facts it kept and lost (summary_N_kept/lost, for a SummaryAuditor).
func (r *run) gradeSummary(text string) {
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
}

// resumeContext is [system] ⊕ resume(S) ⊕ the last k steps, with k the
// largest k ≤ KeepLast for which C − |context| ≥ T_comp.
func (r *run) resumeContext(summary []int) ([]int, error) {
	a, cfg := r.a, r.a.cfg
	prompt := append([]int{}, a.system...)
	prompt = append(prompt, a.f.Resume(a.resumeText, summary)...)
	k := min(cfg.KeepLast, len(r.steps))
	for ; k >= 0; k-- {
		n := len(prompt)
		for _, s := range r.steps[len(r.steps)-k:] {
			n += len(s)
		}
		if cfg.Context-n >= cfg.Reserve {
			break
		}
	}
	if k < 0 {
		return nil, fmt.Errorf("resumed context of %d tokens does not leave the reserve %d in context %d", len(prompt), cfg.Reserve, cfg.Context)
	}
	for _, s := range r.steps[len(r.steps)-k:] {
		prompt = append(prompt, s...)
	}
	return prompt, nil
}

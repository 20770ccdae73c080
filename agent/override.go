package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/internal/splitmix"
)

// SummaryOverride replaces the policy's summaries with another text at
// every compaction: an intervention for evaluation, to measure how much
// the summary alone decides the outcome. The policy is not asked for a
// summary at all; the replacement is written into the summary segment with
// loss mask 0 and log-prob 0 (the policy did not sample it), graded by the
// environment like a summary of the policy's own (summary_N_quality,
// summary_N_kept, summary_N_lost grade the text actually used), and the
// resumed context carries it. Every episode of such an agent records the
// override (Meta summary_override, and per summary summary_N_override,
// summary_N_dropped, summary_N_dropped_visible), compacted or not, and none of its segments is
// trainable: its reward is not the policy's alone, and train
// refuses such episodes.
type SummaryOverride string

const (
	// OverrideNone keeps the policy's own summaries (the control).
	OverrideNone SummaryOverride = ""
	// OverrideExpert writes the environment's complete reference summary
	// of everything seen so far in the episode (SummaryOracle).
	OverrideExpert SummaryOverride = "expert"
	// OverrideDropOne writes the reference summary with one needed fact
	// (an asked fact already seen) replaced by unknown; when none was seen
	// yet it is the reference summary unchanged (summary_N_dropped is
	// empty and the metric summary_drop_none counts it).
	OverrideDropOne SummaryOverride = "drop-one"
	// OverrideEmpty writes an empty summary.
	OverrideEmpty SummaryOverride = "empty"
)

// Metric and Meta keys of overridden summaries.
const (
	// MetaSummaryOverride is the episode's override; absent without one.
	MetaSummaryOverride = episode.MetaSummaryOverride
	// MetricSummaryOverrides counts the summaries replaced.
	MetricSummaryOverrides = "summary_overrides"
	// MetricSummaryDropNone counts drop-one summaries written when no
	// needed fact had been seen, so nothing was dropped.
	MetricSummaryDropNone = "summary_drop_none"
	// MetricSummaryOverrideCut counts replacements cut to max_summary_tokens.
	MetricSummaryOverrideCut = "summary_override_truncated"
)

// SummaryOverrides lists the accepted values of ParseSummaryOverride.
var SummaryOverrides = []SummaryOverride{OverrideNone, OverrideExpert, OverrideDropOne, OverrideEmpty}

// ParseSummaryOverride reads "", "none", "expert", "drop-one" or "empty".
func ParseSummaryOverride(s string) (SummaryOverride, error) {
	switch o := SummaryOverride(strings.TrimSpace(s)); o {
	case "none", OverrideNone:
		return OverrideNone, nil
	case OverrideExpert, OverrideDropOne, OverrideEmpty:
		return o, nil
	}
	return "", fmt.Errorf("summary override %q: want none, expert, drop-one or empty", s)
}

// SummaryOracle is implemented by environments that can write the
// reference summary of the episode so far — what a perfect summariser
// would write given everything the episode has shown: the goal, every
// decisive fact seen, the position. With drop, one decisive fact seen so
// far, chosen with seed, is written as unknown; dropped names it ("" when
// none was seen yet, and the summary is then the full one).
type SummaryOracle interface {
	ReferenceSummary(drop bool, seed int64) (summary, dropped string)
}

// WithSummaryOverride returns a copy of the agent whose episodes replace
// every summary by o (OverrideNone: the agent's own behaviour). It is for
// evaluation only: see SummaryOverride.
func (a *Agent) WithSummaryOverride(o SummaryOverride) (*Agent, error) {
	if _, err := ParseSummaryOverride(string(o)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if o != OverrideNone && a.cfg.NoCompaction {
		return nil, fmt.Errorf("%w: summary override %q with no_compaction: there is no summary to replace", ErrConfig, o)
	}
	b := *a
	b.override = o
	return &b, nil
}

// SummaryOverride returns the agent's override (OverrideNone by default).
func (a *Agent) SummaryOverride() SummaryOverride { return a.override }

// errNoOracle is returned when an override needs a SummaryOracle and the
// environment is not one.
var errNoOracle = errors.New("the environment cannot write a reference summary (no SummaryOracle)")

// overrideSummary appends q_sum and the override's summary, in place of a
// sampled one, to the summary segment, grades it, and returns its ids. The
// call index advances as a sampled summary would, so the actions' seeds
// match those of the same episode without the override.
func (r *run) overrideSummary(ctx context.Context) ([]int, error) {
	a := r.a
	r.turn(a.qsum)
	r.calls++
	idx := r.summaries + 1
	var text, dropped string
	switch a.override {
	case OverrideExpert, OverrideDropOne:
		or, ok := r.env.(SummaryOracle)
		if !ok {
			return nil, fmt.Errorf("summary override %s: %w", a.override, errNoOracle)
		}
		drop := a.override == OverrideDropOne
		text, dropped = or.ReferenceSummary(drop, splitmix.Pair(r.seed, r.calls))
		if drop && dropped == "" {
			r.ep.Metrics[MetricSummaryDropNone]++
		}
		if drop {
			r.ep.Meta[fmt.Sprintf("summary_%d_dropped", idx)] = dropped
			r.dropped = dropped
		}
	}
	ids, err := a.encode(ctx, a.f.Content(text))
	if err != nil {
		return nil, fmt.Errorf("summary override: %w", err)
	}
	if text == "" {
		ids = nil
	}
	// The replacement ends with the stop token as a sampled summary does,
	// and is cut to max_summary_tokens (the stop token included) as a
	// sampler's would be.
	ids = append(ids, a.f.Stop()[0])
	if len(ids) > a.cfg.MaxSummaryTokens {
		ids = ids[:a.cfg.MaxSummaryTokens]
		r.ep.Metrics[MetricSummaryOverrideCut]++
	}
	r.template(ids...)
	r.seg.Kind = episode.KindSummary
	summary, _ := a.stripStop(ids)
	used, err := a.decode(ctx, summary)
	if err != nil {
		return nil, fmt.Errorf("summary override: %w", err)
	}
	r.ep.Meta[fmt.Sprintf("summary_%d_override", idx)] = string(a.override)
	r.ep.Metrics[MetricSummaryOverrides]++
	r.gradeSummary(used)
	return summary, nil
}

// noteDropVisible records, after a drop-one summary that dropped a fact,
// whether the fact's text still shows in the steps the resumed context
// re-includes (summary_N_dropped_visible: true or false): there the policy
// can read it again, and the drop costs nothing.
func (r *run) noteDropVisible(ctx context.Context, prompt, summary []int) error {
	dropped := r.dropped
	r.dropped = ""
	if dropped == "" {
		return nil
	}
	head := len(r.a.system) + len(r.a.f.Resume(r.a.resumeText, summary))
	steps, err := r.a.decode(ctx, prompt[min(head, len(prompt)):])
	if err != nil {
		return fmt.Errorf("summary override: re-included steps: %w", err)
	}
	r.ep.Meta[fmt.Sprintf("summary_%d_dropped_visible", r.summaries)] = strconv.FormatBool(strings.Contains(steps, dropped))
	return nil
}

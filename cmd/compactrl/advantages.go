package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/rl"
)

// runAdvantages reads episode JSONL on stdin, fills every segment's
// advantages and returns (rl.ComputeAdvantages), and writes the episodes,
// otherwise unchanged and in the same order, as JSONL on stdout. The GAE
// estimators stream one episode at a time; grpo and dr-grpo hold all
// episodes, since a group's members may be anywhere in the input. On a bad
// line it stops with an error naming the line and field; the episodes
// before it have been written.
func runAdvantages(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("advantages", "advantages [flags] < episodes.jsonl > episodes-with-advantages.jsonl")
	fs.examples = []string{"compactrl advantages --estimator cross-gae < runs/x/episodes.jsonl > adv.jsonl",
		"compactrl advantages --estimator grpo --group-by-task < episodes.jsonl > adv.jsonl"}
	// The flags are rl.AdvantageConfig's settings under their YAML names
	// (a training config's rl section), bound into the struct; rl's
	// Validate is their one check.
	cfg := rl.DefaultAdvantageConfig()
	est := fs.String("estimator", string(cfg.Estimator), fmt.Sprintf("advantage estimator: one of %v", rl.EstimatorNames()))
	fs.Float64Var(&cfg.Gamma, "gamma", cfg.Gamma, "discount γ in [0, 1] (0 is legal: each token's advantage is its own δ)")
	fs.Float64Var(&cfg.Lambda, "lambda", cfg.Lambda, "fixed GAE λ in [0, 1], used with --alpha 0 (the rule of a training config's rl section)")
	fs.Float64Var(&cfg.Alpha, "alpha", cfg.Alpha, "length-adaptive λ = 1 − 1/(α·l), l the episode's optimised tokens (0: the fixed --lambda)")
	fs.Float64Var(&cfg.Eps, "eps", cfg.Eps, "ε of grpo's (R − mean)/(std + ε)")
	fs.BoolVar(&cfg.GroupByTask, "group-by-task", cfg.GroupByTask, "grpo groups: episodes of one task (default: the group field)")
	noMask := fs.Bool("no-mask-overlong", !cfg.MaskOverlong, "give overlong episodes advantages (default: masked, zero); infra_error episodes are always masked")
	fs.BoolVar(&cfg.ScaledReturns, "scaled-returns", cfg.ScaledReturns, "critic target Â + V instead of A^loc + V (cross-gae)")
	unknown := fs.Bool("allow-unknown-fields", false, "ignore (and drop) JSON fields outside the episode schema instead of rejecting the line")
	fs.about = "Episodes come on stdin; the GAE estimators stream, grpo and dr-grpo hold all episodes (a group's members may be anywhere)."
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	cfg.Estimator, cfg.MaskOverlong = rl.Estimator(*est), !*noMask
	if err := cfg.Validate(); err != nil {
		return err
	}

	r := episode.NewReader(e.stdin)
	r.AllowUnknownFields = *unknown
	w := episode.NewWriter(e.stdout)
	var err error
	if cfg.Estimator.UsesValues() {
		err = advantagesStreamed(ctx, r, w, cfg)
	} else {
		err = advantagesGrouped(ctx, r, w, cfg)
	}
	if ferr := w.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("write: %w", ferr)
	}
	return err
}

func advantagesStreamed(ctx context.Context, r *episode.Reader, w *episode.Writer, cfg rl.AdvantageConfig) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		ep, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := rl.EpisodeAdvantages(&ep, cfg); err != nil {
			return fmt.Errorf("line %d: %w", r.Line(), err)
		}
		if err := w.Write(&ep); err != nil {
			return err
		}
	}
}

func advantagesGrouped(ctx context.Context, r *episode.Reader, w *episode.Writer, cfg rl.AdvantageConfig) error {
	var eps []episode.Episode
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		ep, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		eps = append(eps, ep)
	}
	if err := rl.ComputeAdvantages(eps, cfg); err != nil {
		return err
	}
	for i := range eps {
		if err := w.Write(&eps[i]); err != nil {
			return err
		}
	}
	return nil
}

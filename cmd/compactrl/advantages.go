package main

import (
	"context"
	"errors"
	"flag"
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
	def := rl.DefaultAdvantageConfig()
	est := fs.String("estimator", string(def.Estimator), fmt.Sprintf("advantage estimator: one of %v", rl.EstimatorNames()))
	gamma := fs.Float64("gamma", def.Gamma, "discount γ in [0, 1]")
	lambda := fs.Float64("lambda", 0, "fixed GAE λ in [0, 1] (instead of the length-adaptive λ)")
	alpha := fs.Float64("alpha", def.Alpha, "length-adaptive λ = 1 − 1/(α·l), l the episode's optimised tokens")
	eps := fs.Float64("eps", def.Eps, "ε of grpo's (R − mean)/(std + ε)")
	byTask := fs.Bool("group-by-task", false, "grpo groups: episodes of one task (default: the group field)")
	noMask := fs.Bool("no-mask-overlong", false, "give overlong episodes advantages (default: masked, zero); infra_error episodes are always masked")
	scaled := fs.Bool("scaled-returns", false, "critic target Â + V instead of A^loc + V (cross-gae)")
	unknown := fs.Bool("allow-unknown-fields", false, "ignore (and drop) JSON fields outside the episode schema instead of rejecting the line")
	fs.about = "Episodes come on stdin; the GAE estimators stream, grpo and dr-grpo hold all episodes (a group's members may be anywhere)."
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["lambda"] && set["alpha"] {
		return errors.New("--lambda and --alpha exclude each other")
	}

	cfg := def
	var err error
	if cfg.Estimator, err = rl.ParseEstimator(*est); err != nil {
		return err
	}
	cfg.Gamma, cfg.Alpha, cfg.Eps = *gamma, *alpha, *eps
	if set["lambda"] {
		cfg.Alpha, cfg.Lambda = 0, *lambda
	}
	cfg.GroupByTask, cfg.MaskOverlong, cfg.ScaledReturns = *byTask, !*noMask, *scaled
	if err := cfg.Validate(); err != nil {
		return err
	}

	r := episode.NewReader(e.stdin)
	r.AllowUnknownFields = *unknown
	w := episode.NewWriter(e.stdout)
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

package main

import (
	"context"
	"fmt"

	"github.com/compactrl/compactrl/eval"
	"github.com/compactrl/compactrl/recipe"
	"github.com/compactrl/compactrl/train"
)

// runEvalCheckpoint is `compactrl eval checkpoint DIR`: held-out pass@1
// of a trained policy (a run's checkpoint or a base policy directory) with
// compaction and in a single window, with the settings it was trained for.
func runEvalCheckpoint(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("eval checkpoint", "eval checkpoint DIR [flags]")
	fs.about = "DIR is a checkpoint directory, a run directory (its latest checkpoint) or a base policy directory (models/vault-base)."
	fs.examples = []string{"compactrl eval checkpoint models/vault-base --seed 1000 --episodes 256", "compactrl eval checkpoint runs/demo --quiet"}
	fs.maxArgs = 1
	dir := fs.String("checkpoint", "", "deprecated: the DIR argument")
	episodes := fs.Int("episodes", 0, "held-out episodes per mode (0: the run's eval_episodes)")
	seed := fs.Int64("seed", 0, "offset into the evaluation range: episodes play task seeds start+S … start+S+N−1")
	rng := fs.String("range", "", "evaluation range: dev (suite.test_seed_start on, for choosing settings) or test (the sealed test range, run.sealed_seed_start on, for final numbers only); empty: the run's run.eval_range")
	outcomes := fs.String("outcomes", "", "write the per-task outcomes (JSON: the evaluation and one entry per task seed) to this file")
	workers := fs.Int("workers", 0, "concurrent episodes (0: the run's)")
	temp := fs.Float64("temperature", -1, "sampling temperature (<0: the run's eval_temperature)")
	quiet := fs.Bool("quiet", false, "no progress bars")
	config := fs.String("config", "", "with a GGUF model file as DIR: the run config (`FILE.yaml`, e.g. configs/smollm2.yaml) whose suite and agent settings it is evaluated with")
	pos, err := fs.parse(e, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 1 && *dir != "":
		return fs.usageErr("give DIR once (the argument; --checkpoint is its deprecated spelling)")
	case len(pos) == 1:
		*dir = pos[0]
	case *dir == "":
		return fs.usageErr("need a checkpoint DIR")
	}
	if *seed < 0 {
		return fmt.Errorf("--seed %d must not be negative", *seed)
	}
	if *rng != "" && *rng != train.RangeDev && *rng != train.RangeTest {
		return fs.usageErr("--range %q: want dev or test", *rng)
	}
	o := recipe.EvalOptions{Episodes: *episodes, Workers: *workers, Temperature: *temp, SetTemp: *temp >= 0, Range: *rng, SeedOffset: *seed, Progress: e.stderr, Config: *config}
	if *quiet {
		o.Progress = nil
	}
	ev, cfg, err := recipe.EvaluateCheckpoint(ctx, *dir, o)
	if err != nil {
		return err
	}
	eval.WriteHeldOut(e.stdout, ev, cfg.Agent.Context, cfg.Agent.EvalTemperature)
	if *outcomes != "" {
		return train.WriteOutcomes(*outcomes, ev)
	}
	return nil
}

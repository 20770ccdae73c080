package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"

	"github.com/compactrl/compactrl/eval"
	"github.com/compactrl/compactrl/recipe"
	"github.com/compactrl/compactrl/report"
	"github.com/compactrl/compactrl/stats"
	"github.com/compactrl/compactrl/train"
)

// runTrain runs CompactionRL from a YAML config, or resumes a run directory.
func runTrain(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("train", "train --config FILE.yaml [--dir RUN_DIR] [KEY=VALUE ...]", "train --resume RUN_DIR [KEY=VALUE ...]")
	fs.about = "Warm start on the scripted expert, then PPO with compaction; metrics in RUN_DIR/metrics.jsonl, report in RUN_DIR/report.html.\n" + overridesHelp
	fs.examples = []string{"compactrl train --config configs/demo.yaml --dir runs/mine",
		"compactrl train --config configs/demo.yaml rl.estimator=grpo run.iterations=5",
		"compactrl train --resume runs/mine"}
	cfgPath := fs.String("config", "", "YAML config (every knob; see configs/demo.yaml); fields left out keep their defaults")
	resume := fs.String("resume", "", "run directory to resume from its latest checkpoint (uses its config.yaml unless --config is given)")
	dir := fs.String("dir", "", "run directory (overrides run.dir)")
	quiet := fs.Bool("quiet", false, "no progress bars")
	overrides, err := parseOverrides(fs, e, args)
	if err != nil {
		return err
	}
	var cfg recipe.Config
	switch {
	case *cfgPath != "":
		cfg, err = loadConfig(*cfgPath, recipe.Config{}, overrides)
	case *resume != "":
		cfg, err = loadConfig(filepath.Join(*resume, "config.yaml"), recipe.Config{}, overrides)
	default:
		return fs.usageErr("need --config or --resume")
	}
	if err != nil {
		return err
	}
	if *resume != "" {
		cfg.Run.Dir = *resume
	}
	if *dir != "" {
		cfg.Run.Dir = *dir
	}
	res, err := trainRun(ctx, e, cfg, *resume != "", *quiet)
	if err != nil {
		return err
	}
	printResult(e, res)
	return nil
}

// runSetup sets GOMAXPROCS to a run's threads (0: leaves it; restore
// undoes it) and says where progress bars go (nil when quiet).
func runSetup(e env, threads int, quiet bool) (progress io.Writer, restore func()) {
	restore = func() {}
	if threads > 0 {
		prev := runtime.GOMAXPROCS(threads)
		restore = func() { runtime.GOMAXPROCS(prev) }
	}
	if quiet {
		return nil, restore
	}
	return e.stderr, restore
}

// trainRun builds and runs one training run, then writes its report.
func trainRun(ctx context.Context, e env, cfg recipe.Config, resume, quiet bool) (train.Result, error) {
	progress, restore := runSetup(e, cfg.Run.Threads, quiet)
	defer restore()
	s, err := recipe.Build(cfg, progress, e.stderr)
	if err != nil {
		return train.Result{}, err
	}
	defer s.Close()
	s.Trainer.Resume = resume
	res, err := s.Trainer.Run(ctx)
	if err != nil {
		return res, err
	}
	if _, err := report.Generate(cfg.Run.Dir); err != nil {
		return res, err
	}
	return res, nil
}

func printResult(e env, res train.Result) {
	ci := stats.RateCI
	b, a := res.Before, res.After
	fmt.Fprintf(e.stdout, "\nheld-out pass@1 (95%% Wilson)        %-22s %-22s\n", "with compaction", "single window")
	// An evaluation that did not run (run.eval_every: 0 skips the one
	// before RL) has no episodes: it is "not evaluated", never 0.000.
	cell := func(p float64, n int) string {
		if n == 0 {
			return "not evaluated"
		}
		return ci(p, n)
	}
	fmt.Fprintf(e.stdout, "%-34s %-22s %-22s\n", "before RL (base policy)", cell(b.Pass1Compact, b.Episodes), cell(b.Pass1Single, b.Episodes))
	fmt.Fprintf(e.stdout, "%-34s %-22s %-22s\n", fmt.Sprintf("after %d CompactionRL iterations", res.Iterations), cell(a.Pass1Compact, a.Episodes), cell(a.Pass1Single, a.Episodes))
	if b.Episodes > 0 && a.Episodes > 0 {
		fmt.Fprintf(e.stdout, "\nheld-out (%d episodes, with compaction): mean reward %.3f → %.3f; summary quality %s → %s; compactions/episode %.2f → %.2f\n",
			a.Episodes, b.Reward, a.Reward, eval.FormatOptional(&b.SummaryQuality, "%.3f"), eval.FormatOptional(&a.SummaryQuality, "%.3f"), b.Compactions, a.Compactions)
	}
	fmt.Fprintf(e.stdout, "wall %.1fs: warm start %.1fs, rollouts %.1fs, training %.1fs, evaluation %.1fs\n",
		res.Wall.Seconds(), res.TimeSFT.Seconds(), res.TimeRollout.Seconds(), res.TimeTrain.Seconds(), res.TimeEval.Seconds())
	if res.TimeRollout > 0 && res.TimeTrain > 0 {
		fmt.Fprintf(e.stdout, "throughput: rollout %.0f sampled tokens/s, training %.0f tokens/s (forward+backward)\n",
			float64(res.RolloutTokens)/res.TimeRollout.Seconds(), float64(res.TrainTokens)/res.TimeTrain.Seconds())
	}
	fmt.Fprintf(e.stdout, "report: %s\n", filepath.Join(res.RunDir, "report.html"))
}

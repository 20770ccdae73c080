package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/compactrl/compactrl/experiment"
	"github.com/compactrl/compactrl/models"
	"github.com/compactrl/compactrl/recipe"
	"github.com/compactrl/compactrl/train"
)

// runExperiment runs the arms of the paper's tables on the built-in suite,
// several seeds each, and writes DIR/results.md and DIR/report.html.
func runExperiment(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("experiment", "experiment [flags] [KEY=VALUE ...]")
	fs.about = "Runs the base policy, RL without compaction, CompactionRL and its ablations on the vault suite,\nevery arm and seed from the same base policy (seeds vary only RL), every arm evaluated on the same tasks of\n" +
		"the development range (--range dev: choosing settings) or the sealed test range (--range test: final tables only).\n" +
		"Writes DIR/results.md (pass@1 per seed, with a 95% bootstrap interval over RL seeds and tasks, and each arm's paired\n" +
		"effect against the base and against CompactionRL), DIR/outcomes.jsonl (every task of every run) and DIR/report.html.\n" + overridesHelp
	fs.examples = []string{"compactrl experiment --seeds 5 --dir runs/experiment",
		"compactrl experiment --arms base,compactionrl --seeds 2 run.episodes=8",
		"compactrl experiment --config configs/vault-long.yaml --base models/vault-long-base --seeds 5 --seed-start 201 --range test --resume --dir runs/long-table"}
	var f experimentFlags
	f.bind(fs)
	overrides, err := parseOverrides(fs, e, args)
	if err != nil {
		return err
	}
	base, err := f.config(overrides)
	if err != nil {
		return err
	}
	arms, err := f.selectArms()
	if err != nil {
		return err
	}
	baseDir, expertP, err := f.basePolicy()
	if err != nil {
		return err
	}
	out := &experiment.ResultsFile{Dir: f.dir, BaseDir: baseDir, Start: time.Now(),
		Cmdline: strings.TrimSpace("compactrl experiment " + strings.Join(args, " "))}
	results, err := f.experiment(e, base, baseDir, arms, expertP, out).Run(ctx)
	if err != nil {
		return err
	}
	md, err := out.Write(results, true)
	if err != nil {
		return err
	}
	htmlPath, err := experiment.WriteReport(f.dir, out.Cmdline, results)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, md)
	fmt.Fprintf(e.stdout, "results: %s\nreport: %s\n", filepath.Join(f.dir, "results.md"), htmlPath)
	return nil
}

// experimentFlags are the experiment command's flags.
type experimentFlags struct {
	configPath, base, dir, arms, evalRange string
	seeds, iterations, evalEvery           int
	seedStart                              int64
	quiet, resume                          bool
}

func (f *experimentFlags) bind(fs *cmdLine) {
	fs.StringVar(&f.configPath, "config", "", "RL YAML config (default: the demo's)")
	fs.StringVar(&f.base, "base", "", "base policy directory every arm starts from (default: the shipped models/vault-base)")
	fs.StringVar(&f.dir, "dir", "runs/experiment", "output directory: DIR/ARM/seed-S per run, DIR/results.md, DIR/report.html")
	fs.IntVar(&f.seeds, "seeds", 3, "RL seeds per arm: S…S+N−1 with S = --seed-start")
	fs.Int64Var(&f.seedStart, "seed-start", 1, "first RL seed")
	fs.StringVar(&f.evalRange, "range", "", "evaluation range of every arm: dev (task seeds from suite.test_seed_start: for choosing settings) or test (the sealed test range from run.sealed_seed_start: final tables only); empty: the config's run.eval_range")
	fs.BoolVar(&f.resume, "resume", false, "keep every run whose final evaluation (DIR/ARM/seed-S/outcomes/final.json) is on the same tasks, and run only the others")
	fs.StringVar(&f.arms, "arms", "", "comma-separated arms (default all: "+armNames()+")")
	fs.IntVar(&f.iterations, "iterations", 0, "RL iterations per arm (0: the config's)")
	fs.IntVar(&f.evalEvery, "eval-every", 0, "held-out evaluation every N RL iterations of an arm (0: only at the end; the base arm is the evaluation before RL)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bars")
}

// config is the RL config every arm starts from: --config (or the demo's)
// with the overrides, --iterations and --eval-every applied.
func (f *experimentFlags) config(overrides []string) (recipe.Config, error) {
	base, err := loadConfig(f.configPath, recipe.DemoConfig(), overrides)
	if err != nil {
		return recipe.Config{}, err
	}
	if f.iterations > 0 {
		base.Run.Iterations = f.iterations
	}
	if f.evalEvery < 0 {
		return recipe.Config{}, fmt.Errorf("--eval-every %d must not be negative", f.evalEvery)
	}
	base.Run.EvalEvery = f.evalEvery
	if f.seeds < 1 {
		return recipe.Config{}, fmt.Errorf("--seeds %d must be at least 1", f.seeds)
	}
	if f.seedStart < 0 {
		return recipe.Config{}, fmt.Errorf("--seed-start %d must not be negative", f.seedStart)
	}
	switch f.evalRange {
	case "":
	case train.RangeDev, train.RangeTest:
		base.Run.EvalRange = f.evalRange
	default:
		return recipe.Config{}, fmt.Errorf("--range %q: want dev or test", f.evalRange)
	}
	return base, base.Train().Validate()
}

// selectArms is --arms (default: every arm).
func (f *experimentFlags) selectArms() ([]experiment.Arm, error) {
	var names []string
	if f.arms != "" {
		names = strings.Split(f.arms, ",")
	}
	return experiment.SelectArms(names)
}

// basePolicy is the directory of --base, or else of the shipped base policy
// written afresh to DIR/base-policy, and the summary keep probability of
// its scripted expert.
func (f *experimentFlags) basePolicy() (dir string, expertP float64, err error) {
	baseDir := f.base
	if baseDir == "" {
		baseDir = filepath.Join(f.dir, "base-policy")
		if err := os.RemoveAll(baseDir); err != nil {
			return "", 0, fmt.Errorf("experiment dir %s: %w", f.dir, err)
		}
		if err := models.WriteVaultBase(baseDir); err != nil {
			return "", 0, err
		}
	}
	baseRecipe, err := recipe.LoadBase(baseDir)
	if err != nil {
		return "", 0, err
	}
	return baseDir, baseRecipe.SFT.ExpertP, nil
}

// experiment runs every arm for seeds 1…--seeds, each run in a fresh
// DIR/ARM/seed-S, rewriting the results table after each.
func (f *experimentFlags) experiment(e env, base recipe.Config, baseDir string, arms []experiment.Arm, expertP float64, out *experiment.ResultsFile) *experiment.Experiment {
	refs := []float64{expertP, 1}
	if expertP == 1 {
		refs = refs[1:]
	}
	x := &experiment.Experiment{Base: base, BaseDir: baseDir, Arms: arms, Dir: f.dir, Progress: e.stderr, ExpertP: refs,
		RunOne: func(ctx context.Context, cfg recipe.Config) (train.Result, error) {
			if f.resume {
				if ev, ok := experiment.FinishedRun(cfg); ok {
					fmt.Fprintf(e.stderr, "   kept: %s (%s range, %d tasks from %d)\n", cfg.Run.Dir, ev.Range, ev.Episodes, ev.FirstSeed)
					return train.Result{After: ev, RunDir: cfg.Run.Dir}, nil
				}
			}
			// The experiment owns DIR/ARM/seed-S: a rerun replaces it.
			if err := os.RemoveAll(cfg.Run.Dir); err != nil {
				return train.Result{}, fmt.Errorf("experiment run %s: %w", cfg.Run.Dir, err)
			}
			return trainRun(ctx, e, cfg, false, f.quiet)
		},
		Done: func(results []experiment.ArmResult) error { _, err := out.Write(results, false); return err }}
	for s := range f.seeds {
		x.Seeds = append(x.Seeds, f.seedStart+int64(s))
	}
	return x
}

func armNames() string {
	var n []string
	for _, a := range experiment.Arms() {
		n = append(n, a.Name)
	}
	return strings.Join(n, ",")
}

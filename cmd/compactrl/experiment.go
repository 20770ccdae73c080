package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/compactrl/compactrl/experiment"
	"github.com/compactrl/compactrl/kernel"
	"github.com/compactrl/compactrl/models"
	"github.com/compactrl/compactrl/recipe"
	"github.com/compactrl/compactrl/report"
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
	out := &resultsFile{dir: f.dir, baseDir: baseDir, start: time.Now(),
		cmdline: strings.TrimSpace("compactrl experiment " + strings.Join(args, " "))}
	results, err := f.experiment(e, base, baseDir, arms, expertP, out).Run(ctx)
	if err != nil {
		return err
	}
	md, err := out.write(results, true)
	if err != nil {
		return err
	}
	htmlPath, err := writeExperimentReport(f.dir, out.cmdline, results)
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
func (f *experimentFlags) experiment(e env, base recipe.Config, baseDir string, arms []experiment.Arm, expertP float64, out *resultsFile) *experiment.Experiment {
	refs := []float64{expertP, 1}
	if expertP == 1 {
		refs = refs[1:]
	}
	x := &experiment.Experiment{Base: base, BaseDir: baseDir, Arms: arms, Dir: f.dir, Progress: e.stderr, ExpertP: refs,
		RunOne: func(ctx context.Context, cfg recipe.Config) (train.Result, error) {
			if f.resume {
				if ev, ok := finishedRun(cfg); ok {
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
		Done: func(results []experiment.ArmResult) error { _, err := out.write(results, false); return err }}
	for s := range f.seeds {
		x.Seeds = append(x.Seeds, f.seedStart+int64(s))
	}
	return x
}

// finishedRun is the final evaluation of a run directory that an earlier
// experiment finished with the same settings (config.yaml as cfg's) on
// the same tasks (range, first task seed and count), if there is one.
func finishedRun(cfg recipe.Config) (train.EvalResult, bool) {
	ev, err := train.ReadOutcomes(train.FinalOutcomes(cfg.Run.Dir))
	if err != nil || ev.Range != cfg.Train().EvalRangeName() || ev.FirstSeed != cfg.Train().EvalSeedStart() || ev.Episodes != cfg.Run.EvalEpisodes {
		return ev, false
	}
	old, err := recipe.LoadConfig(filepath.Join(cfg.Run.Dir, "config.yaml"))
	if err != nil {
		return ev, false
	}
	a, errA := old.YAML()
	b, errB := cfg.YAML()
	return ev, errA == nil && errB == nil && bytes.Equal(a, b)
}

// resultsFile is DIR/results.md: the results table and the command that
// made it.
type resultsFile struct {
	dir, cmdline, baseDir string
	start                 time.Time
}

// write writes the table of the results so far (final: of every run) and
// returns its Markdown.
func (r *resultsFile) write(results []experiment.ArmResult, final bool) (string, error) {
	state := "complete"
	if !final {
		state = "in progress: the rows so far"
	}
	credit, err := experiment.CreditTable(results, report.Load)
	if err != nil {
		return "", err
	}
	dyn, err := experiment.DynamicsTable(results, report.Load)
	if err != nil {
		return "", err
	}
	md := fmt.Sprintf("%s\n\n%s\n\n%s\n\n%s\nCommand: `%s` (%s wall, %s); kernel path %s; base policy %s.\n",
		experiment.Markdown(experiment.Table(results)), experiment.Markdown(experiment.EffectsTable(results)), experiment.Markdown(dyn), experiment.Markdown(credit), r.cmdline, time.Since(r.start).Round(time.Second), state, kernel.Path(), r.baseDir)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return "", fmt.Errorf("experiment dir %s: %w", r.dir, err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "results.md"), []byte(md), 0o644); err != nil {
		return "", fmt.Errorf("experiment results: %w", err)
	}
	var o bytes.Buffer
	if err := experiment.WriteOutcomes(&o, results); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(r.dir, "outcomes.jsonl"), o.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("experiment outcomes: %w", err)
	}
	return md, nil
}

// writeExperimentReport writes DIR/report.html (the results and credit
// tables, the arms' pass@1 with their intervals, one learning curve per arm
// and seed) and DIR/arms.svg (that plot alone); it returns the report's path.
func writeExperimentReport(dir, cmdline string, results []experiment.ArmResult) (string, error) {
	// Each run's metrics are read once, for its learning curve and for the
	// credit table.
	loaded := map[string]report.Run{}
	var runs []report.Run
	for _, r := range results {
		for i, d := range r.Runs {
			run, err := report.Load(d)
			if err != nil {
				return "", err
			}
			loaded[d] = run
			run.Name = fmt.Sprintf("%s s%d", r.Arm.Name, r.Seeds[i])
			run.Config = ""
			runs = append(runs, run)
		}
	}
	credit, err := experiment.CreditTable(results, func(d string) (report.Run, error) { return loaded[d], nil })
	if err != nil {
		return "", err
	}
	dyn, err := experiment.DynamicsTable(results, func(d string) (report.Run, error) { return loaded[d], nil })
	if err != nil {
		return "", err
	}
	svg := report.IntervalsSVG("Pass@1 with compaction per arm: mean over seeds, 95% bootstrap interval over seeds and tasks, each seed", "pass@1", experiment.Intervals(results))
	if err := os.WriteFile(filepath.Join(dir, "arms.svg"), []byte(svg), 0o644); err != nil {
		return "", fmt.Errorf("experiment plot: %w", err)
	}
	page := report.Page{Title: "CompactionRL experiment", Tables: []report.Table{experiment.Table(results), experiment.EffectsTable(results), dyn, credit}, Figures: []string{svg},
		Notes: []string{"Command: " + cmdline, "Learning curves: one line per arm and seed."}, Runs: runs}
	htmlPath := filepath.Join(dir, "report.html")
	if err := report.WriteFile(htmlPath, page); err != nil {
		return "", err
	}
	return htmlPath, nil
}

func armNames() string {
	var n []string
	for _, a := range experiment.Arms() {
		n = append(n, a.Name)
	}
	return strings.Join(n, ",")
}

package main

import (
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
	fs.about = "Runs the base policy, RL without compaction, CompactionRL and its ablations on the vault suite,\nevery arm and seed from the same base policy (seeds vary only RL).\n" + overridesHelp
	fs.examples = []string{"compactrl experiment --seeds 5 --dir runs/experiment",
		"compactrl experiment --arms base,compactionrl --seeds 2 run.episodes=8"}
	cfgPath := fs.String("config", "", "RL YAML config (default: the demo's)")
	baseFlag := fs.String("base", "", "base policy directory every arm starts from (default: the shipped models/vault-base)")
	dir := fs.String("dir", "runs/experiment", "output directory: DIR/ARM/seed-S per run, DIR/results.md, DIR/report.html")
	seeds := fs.Int("seeds", 3, "seeds per arm (1…N)")
	armList := fs.String("arms", "", "comma-separated arms (default all: "+armNames()+")")
	iters := fs.Int("iterations", 0, "RL iterations per arm (0: the config's)")
	evalEvery := fs.Int("eval-every", 0, "held-out evaluation every N RL iterations of an arm (0: only at the end; the base arm is the evaluation before RL)")
	quiet := fs.Bool("quiet", false, "no progress bars")
	overrides, err := parseOverrides(fs, e, args)
	if err != nil {
		return err
	}
	base, err := loadConfig(*cfgPath, recipe.DemoConfig(), overrides)
	if err != nil {
		return err
	}
	if *iters > 0 {
		base.Run.Iterations = *iters
	}
	if *evalEvery < 0 {
		return fmt.Errorf("--eval-every %d must not be negative", *evalEvery)
	}
	base.Run.EvalEvery = *evalEvery
	if *seeds < 1 {
		return fmt.Errorf("--seeds %d must be at least 1", *seeds)
	}
	var names []string
	if *armList != "" {
		names = strings.Split(*armList, ",")
	}
	arms, err := experiment.SelectArms(names)
	if err != nil {
		return err
	}
	baseDir := *baseFlag
	if baseDir == "" {
		baseDir = filepath.Join(*dir, "base-policy")
		if err := os.RemoveAll(baseDir); err != nil {
			return fmt.Errorf("experiment dir %s: %w", *dir, err)
		}
		if err := models.WriteVaultBase(baseDir); err != nil {
			return err
		}
	}
	baseRecipe, err := recipe.LoadBase(baseDir)
	if err != nil {
		return err
	}
	cmdline := strings.TrimSpace("compactrl experiment " + strings.Join(args, " "))
	start := time.Now()
	writeTable := func(results []experiment.ArmResult, final bool) (string, error) {
		state := "complete"
		if !final {
			state = "in progress: the rows so far"
		}
		md := fmt.Sprintf("%s\n\nCommand: `%s` (%s wall, %s); kernel path %s; base policy %s.\n",
			experiment.Markdown(experiment.Table(results)), cmdline, time.Since(start).Round(time.Second), state, kernel.Path(), baseDir)
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			return "", fmt.Errorf("experiment dir %s: %w", *dir, err)
		}
		if err := os.WriteFile(filepath.Join(*dir, "results.md"), []byte(md), 0o644); err != nil {
			return "", fmt.Errorf("experiment results: %w", err)
		}
		return md, nil
	}
	x := &experiment.Experiment{Base: base, BaseDir: baseDir, Arms: arms, Dir: *dir, Progress: e.stderr, ExpertP: []float64{baseRecipe.SFT.ExpertP, 1},
		RunOne: func(ctx context.Context, cfg recipe.Config) (train.Result, error) {
			// The experiment owns DIR/ARM/seed-S: a rerun replaces it.
			if err := os.RemoveAll(cfg.Run.Dir); err != nil {
				return train.Result{}, fmt.Errorf("experiment run %s: %w", cfg.Run.Dir, err)
			}
			return trainRun(ctx, e, cfg, false, *quiet)
		},
		Done: func(results []experiment.ArmResult) error { _, err := writeTable(results, false); return err }}
	for s := 1; s <= *seeds; s++ {
		x.Seeds = append(x.Seeds, int64(s))
	}
	results, err := x.Run(ctx)
	if err != nil {
		return err
	}
	md, err := writeTable(results, true)
	if err != nil {
		return err
	}
	table := experiment.Table(results)
	page := report.Page{Title: "CompactionRL experiment", Tables: []report.Table{table},
		Notes: []string{"Command: " + cmdline, "Learning curves: one line per arm and seed."}}
	for _, r := range results {
		for i, d := range r.Runs {
			run, err := report.Load(d)
			if err != nil {
				return err
			}
			run.Name = fmt.Sprintf("%s s%d", r.Arm.Name, r.Seeds[i])
			run.Config = ""
			page.Runs = append(page.Runs, run)
		}
	}
	htmlPath := filepath.Join(*dir, "report.html")
	if err := report.WriteFile(htmlPath, page); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, md)
	fmt.Fprintf(e.stdout, "results: %s\nreport: %s\n", filepath.Join(*dir, "results.md"), htmlPath)
	return nil
}

func armNames() string {
	var n []string
	for _, a := range experiment.Arms() {
		n = append(n, a.Name)
	}
	return strings.Join(n, ",")
}

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/compactrl/compactrl/internal/cputime"
	"github.com/compactrl/compactrl/kernel"
	"github.com/compactrl/compactrl/models"
	"github.com/compactrl/compactrl/recipe"
)

// runDemo is the README's first command: CompactionRL from the shipped base
// policy (models/vault-base, embedded in the binary) on the demo config
// (configs/demo.yaml), held-out pass@1 before and after with 95%
// intervals, and the HTML report. --from-scratch pretrains the base first
// (configs/pretrain.yaml).
func runDemo(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("demo", "demo [flags]")
	fs.about = "CompactionRL from the shipped base policy on the built-in vault suite (about 2 minutes on 2 cores)."
	fs.examples = []string{"compactrl demo", "compactrl demo --seed 2 --dir runs/demo-seed2"}
	cfg := recipe.DemoConfig()
	dir := fs.String("dir", cfg.Run.Dir, "run directory (replaced)")
	iters := fs.Int("iterations", cfg.Run.Iterations, "CompactionRL iterations")
	seed := fs.Int64("seed", cfg.Seed, "RL seed (sampling, critic initialisation, data order)")
	scratch := fs.Bool("from-scratch", false, "pretrain the base policy first (configs/pretrain.yaml; tens of minutes) instead of the shipped one")
	quiet := fs.Bool("quiet", false, "no progress bars")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (pprof) of the whole demo to this file")
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	if err := os.RemoveAll(*dir); err != nil {
		return fmt.Errorf("demo dir %s: %w", *dir, err)
	}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	start, cpu0 := time.Now(), cputime.Process()
	baseDir := filepath.Join(*dir, "base")
	pretrainS, err := demoBase(ctx, e, baseDir, *scratch, *quiet)
	if err != nil {
		return err
	}
	cfg.Run.Dir, cfg.Run.Iterations, cfg.Seed = *dir, *iters, *seed
	cfg, err = recipe.FromBase(baseDir, cfg)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "compactrl demo: %d CompactionRL iterations of %d episodes from the base policy in %s\n", cfg.Run.Iterations, cfg.Run.Episodes, baseDir)
	fmt.Fprintf(e.stdout, "(window %d tokens, %s, %s loss, kernel path %s), %d held-out episodes per evaluation.\n",
		cfg.Agent.Context, cfg.RL.Estimator, cfg.RL.LossAggMode, kernel.Path(), cfg.Run.EvalEpisodes)
	res, err := trainRun(ctx, e, cfg, false, *quiet)
	if err != nil {
		return err
	}
	printResult(e, res)
	printDemoTime(e, time.Since(start), cputime.Process()-cpu0, pretrainS)
	return nil
}

// printDemoTime writes the demo's wall and CPU time, the cores busy on
// average (CPU / wall), and the pretraining's share of the wall time.
func printDemoTime(e env, wall, cpu time.Duration, pretrainS float64) {
	if pretrainS > 0 {
		fmt.Fprintf(e.stdout, "pretraining took %.0f s of it\n", pretrainS)
	}
	fmt.Fprintf(e.stdout, "demo finished in %s wall, %s CPU (%.2f cores busy on average, GOMAXPROCS %d)\n",
		wall.Round(time.Second), cpu.Round(time.Second), cpu.Seconds()/wall.Seconds(), runtime.GOMAXPROCS(0))
}

// demoBase writes the base policy to baseDir: the shipped one, or (scratch)
// one pretrained on configs/pretrain.yaml, whose wall seconds it returns.
func demoBase(ctx context.Context, e env, baseDir string, scratch, quiet bool) (pretrainS float64, err error) {
	if !scratch {
		return 0, models.WriteVaultBase(baseDir)
	}
	pc := recipe.PretrainConfig()
	fmt.Fprintf(e.stdout, "compactrl demo --from-scratch: pretraining the base policy (%d copy, %d recall, %d SFT steps) into %s\n",
		pc.SFT.CopySteps, pc.SFT.RecallSteps, pc.SFT.Steps, baseDir)
	pc.Run.Dir = filepath.Join(baseDir, "run")
	_, info, err := pretrain(ctx, e, pc, baseDir, "compactrl demo --from-scratch", quiet)
	if err != nil {
		return 0, err
	}
	return info.WallS, nil
}

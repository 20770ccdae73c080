package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/compactrl/compactrl/eval"
	"github.com/compactrl/compactrl/kernel"
	"github.com/compactrl/compactrl/recipe"
)

// runPretrain makes a base policy: the whole warm start of a config
// (copy, recall and SFT phases on the scripted expert), a held-out
// evaluation, and the base directory with its model card.
func runPretrain(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("pretrain", "pretrain --out DIR [--config FILE.yaml] [--seed S] [KEY=VALUE ...]")
	fs.about = "Warm-starts a policy on the vault suite's scripted expert and writes a base policy directory\n(model.safetensors, config.json, tokenizer.json, compactrl.yaml, pretrain.jsonl, eval.json, README.md).\n" + overridesHelp
	fs.examples = []string{"compactrl pretrain --config configs/pretrain.yaml --seed 2 --out runs/base-seed2",
		"compactrl pretrain --out runs/base-short sft.steps=200"}
	cfgPath := fs.String("config", "", "YAML recipe (default: the shipped base's, configs/pretrain.yaml)")
	out := fs.String("out", "", "base policy directory to write (must not exist or be empty)")
	seed := fs.Int64("seed", 0, "pretraining seed (0: the config's)")
	quiet := fs.Bool("quiet", false, "no progress bars")
	overrides, err := parseOverrides(fs, e, args)
	if err != nil {
		return err
	}
	if *out == "" {
		return fs.usageErr("need --out DIR")
	}
	cfg, err := loadConfig(*cfgPath, recipe.PretrainConfig(), overrides)
	if err != nil {
		return err
	}
	if *seed != 0 {
		cfg.Seed = *seed
	}
	if ents, err := os.ReadDir(*out); err == nil && len(ents) > 0 {
		return fmt.Errorf("--out %s is not empty: a base directory is written whole, into a new directory", *out)
	}
	cfg.Run.Iterations = 0
	cfg.Run.Dir = filepath.Join(*out, "run")
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.SFT.Steps+cfg.SFT.CopySteps+cfg.SFT.RecallSteps == 0 {
		return errors.New("the recipe has no warm-start step (sft.steps, copy_steps and recall_steps are 0)")
	}
	command := "compactrl pretrain " + strings.Join(args, " ")
	base, info, err := pretrain(ctx, e, cfg, *out, command, *quiet)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "base policy written to %s (%.0f s)\n", base, info.WallS)
	eval.WriteHeldOut(e.stdout, info.Eval, cfg.Agent.Context, cfg.Agent.EvalTemperature)
	return nil
}

// pretrain runs cfg's warm start (no RL iteration) in out/run, writes the
// base policy directory out and removes the run directory.
func pretrain(ctx context.Context, e env, cfg recipe.Config, out, command string, quiet bool) (string, recipe.BaseInfo, error) {
	progress, restore := runSetup(e, cfg.Run.Threads, quiet)
	defer restore()
	start := time.Now()
	s, err := recipe.Build(cfg, progress, e.stderr)
	if err != nil {
		return "", recipe.BaseInfo{}, err
	}
	defer s.Close()
	res, err := s.Trainer.Run(ctx)
	if err != nil {
		return "", recipe.BaseInfo{}, err
	}
	info := recipe.BaseInfo{Command: command, Commit: recipe.Commit(), KernelPath: kernel.Path(), Threads: runtime.GOMAXPROCS(0),
		WallS: time.Since(start).Seconds()}
	if err := recipe.WriteBase(ctx, out, s, res, info); err != nil {
		return "", info, err
	}
	if err := os.RemoveAll(cfg.Run.Dir); err != nil {
		return "", info, fmt.Errorf("pretrain: remove %s: %w", cfg.Run.Dir, err)
	}
	info, err = recipe.ReadBaseInfo(out)
	return out, info, err
}

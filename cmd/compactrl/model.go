package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/tokenizer"
)

// runModel dispatches `compactrl model init|logits`.
func runModel(ctx context.Context, e env, args []string) error {
	c := newCmdLine("model", modelInitSynopsis, modelLogitsSynopsis)
	c.about = "init writes a randomly initialised checkpoint; logits prints a checkpoint's logits (compactrl model init -h, compactrl model logits -h)."
	c.examples = []string{modelInitExample, modelLogitsExample}
	return dispatch(ctx, e, c, []subcommand{{"init", runModelInit}, {"logits", runModelLogits}}, nil, args)
}

// Synopses and examples of model's subcommands.
const (
	modelInitSynopsis   = "model init --preset NAME --seed N --out DIR [--tokenizer tokenizer.json] [--critic]"
	modelLogitsSynopsis = "model logits --checkpoint DIR --tokens 1,2,3"
	modelInitExample    = "compactrl model init --preset tiny --seed 1 --out runs/tiny"
	modelLogitsExample  = "compactrl model logits --checkpoint runs/tiny --tokens 1,2,3"
)

// runModelInit writes a randomly initialised checkpoint (config.json +
// model.safetensors). With --tokenizer, the vocabulary size comes from that
// tokenizer.json, which is copied into the checkpoint.
func runModelInit(_ context.Context, e env, args []string) error {
	fs := newCmdLine("model init", modelInitSynopsis)
	fs.examples = []string{modelInitExample}
	preset := fs.String("preset", "tiny", "architecture preset (tiny, small, bench, medium)")
	seed := fs.Int64("seed", 0, "initialisation seed")
	out := fs.String("out", "", "checkpoint directory to create")
	value := fs.Bool("critic", false, "write a value model (score head) instead of a policy")
	tokPath := fs.String("tokenizer", "", "tokenizer.json to copy into the checkpoint (sets the vocabulary size)")
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	if *out == "" {
		return fs.usageErr("model init: --out is required")
	}
	cfg, err := model.Preset(*preset)
	if err != nil {
		return fmt.Errorf("model init: %w", err)
	}
	var tok *tokenizer.Tokenizer
	if *tokPath != "" {
		if tok, err = tokenizer.Load(*tokPath); err != nil {
			return fmt.Errorf("model init: %w", err)
		}
		cfg.Vocab = tok.VocabSize()
	}
	m, err := model.New(cfg, *seed, *value)
	if err != nil {
		return fmt.Errorf("model init: %w", err)
	}
	if err := m.Save(*out); err != nil {
		return fmt.Errorf("model init: %w", err)
	}
	if tok != nil {
		b, err := os.ReadFile(*tokPath)
		if err != nil {
			return fmt.Errorf("model init: %w", err)
		}
		if err := os.WriteFile(filepath.Join(*out, "tokenizer.json"), b, 0o644); err != nil {
			return fmt.Errorf("model init: %w", err)
		}
	}
	return json.NewEncoder(e.stdout).Encode(map[string]any{"checkpoint": *out, "preset": *preset, "params": m.NumParams()})
}

// runModelLogits prints the logits at every position as a JSON array of
// vocab-sized arrays.
func runModelLogits(_ context.Context, e env, args []string) error {
	fs := newCmdLine("model logits", modelLogitsSynopsis)
	fs.examples = []string{modelLogitsExample}
	dir := fs.String("checkpoint", "", "checkpoint directory, or a GGUF model file")
	toks := fs.String("tokens", "", "comma-separated token ids")
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	if *dir == "" || *toks == "" {
		return fs.usageErr("model logits: --checkpoint and --tokens are required")
	}
	var ids []int
	for i, f := range strings.Split(*toks, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("model logits: --tokens item %d %q: %w", i, f, err)
		}
		ids = append(ids, v)
	}
	m, err := model.Load(*dir)
	if err != nil {
		return fmt.Errorf("model logits: %w", err)
	}
	rows, err := m.NewScorer().Logits(ids)
	if err != nil {
		return fmt.Errorf("model logits: %w", err)
	}
	return json.NewEncoder(e.stdout).Encode(rows)
}

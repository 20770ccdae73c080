package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/tokenizer"
)

// runExport dispatches the export modes:
//
//	compactrl export gguf --checkpoint DIR --out FILE     model → llama.cpp GGUF
//	compactrl export --format verl|slime|jsonl ...        episodes → trainer records (runExportEpisodes)
func runExport(ctx context.Context, e env, args []string) error {
	return dispatch(ctx, e, nil, []subcommand{{"gguf", runExportGGUF}}, runExportEpisodes, args)
}

// runExportGGUF converts a checkpoint directory (config.json,
// model.safetensors or its shards, tokenizer.json) to a GGUF file
// llama.cpp serves.
func runExportGGUF(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("export gguf", "export gguf --checkpoint DIR --out FILE.gguf")
	fs.about = "Converts a policy checkpoint (config.json, model.safetensors or its shards, tokenizer.json) to a GGUF file llama-server serves."
	fs.examples = []string{"compactrl export gguf --checkpoint models/vault-base --out vault-base.gguf"}
	dir := fs.String("checkpoint", "", "checkpoint directory with config.json, "+format.WeightsFile+" (or sharded, with "+format.WeightsIndexFile+") and "+tokenizer.File)
	out := fs.String("out", "", "GGUF file to write")
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	if *dir == "" || *out == "" {
		return fs.usageErr("--checkpoint and --out are required")
	}
	for _, name := range []string{format.ConfigFile, tokenizer.File} {
		if _, err := os.Stat(filepath.Join(*dir, name)); err != nil {
			return fmt.Errorf("checkpoint %s: %s missing (a GGUF needs the config, the weights and the tokenizer): %w", *dir, name, err)
		}
	}
	cfg, err := format.ReadConfig(*dir)
	if err != nil {
		return err
	}
	if slices.Contains(cfg.Architectures, "LlamaForSequenceClassification") {
		return fmt.Errorf("checkpoint %s is a value model (LlamaForSequenceClassification): only policies export to GGUF", *dir)
	}
	// Before any tensor is read or sized: the config's weights fit the
	// memory ceiling, and the files hold exactly the tensors it implies.
	if err := cfg.CheckMemory(filepath.Join(*dir, format.ConfigFile)); err != nil {
		return fmt.Errorf("export gguf: %w", err)
	}
	hdr, path, err := format.ReadWeightsHeader(*dir)
	if err != nil {
		return fmt.Errorf("export gguf: %w", err)
	}
	if err := cfg.CheckTensors(path, hdr); err != nil {
		return fmt.Errorf("export gguf: %w", err)
	}
	ts, err := format.ReadWeights(*dir)
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(filepath.Join(*dir, tokenizer.File))
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := format.WriteGGUF(*out, cfg, ts, tok); err != nil {
		return err
	}
	st, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d layers, hidden %d, vocab %d, %.1f MB\n", *out, cfg.NumHiddenLayers, cfg.HiddenSize, cfg.VocabSize, float64(st.Size())/1e6)
	return nil
}

package main

import (
	"context"
	"fmt"
	"os"

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
	fs := newCmdLine("export gguf", "export gguf --checkpoint DIR|FILE.gguf --out FILE.gguf [--type f32|f16|bf16] [--tokenizer FILE.gguf]")
	fs.about = "Converts a policy checkpoint (config.json, model.safetensors or its shards, tokenizer.json; or a GGUF file, any quantization, dequantized) to a GGUF file llama-server serves."
	fs.examples = []string{"compactrl export gguf --checkpoint models/vault-base --out vault-base.gguf",
		"compactrl export gguf --checkpoint SmolLM2-135M-Instruct.Q4_1.gguf --type f32 --out smollm2-f32.gguf",
		"compactrl export gguf --checkpoint runs/smollm2/checkpoints/000006/policy --tokenizer SmolLM2-135M-Instruct.Q4_1.gguf --out trained.gguf"}
	dir := fs.String("checkpoint", "", "checkpoint directory with config.json, "+format.WeightsFile+" (or sharded, with "+format.WeightsIndexFile+") and "+tokenizer.File+", or a GGUF file")
	out := fs.String("out", "", "GGUF file to write")
	typ := fs.String("type", "f32", "tensor type of the matrices: f32, f16, or bf16 (the weights a model.precision bf16 policy samples with); norms stay f32")
	tokFrom := fs.String("tokenizer", "", "take the vocabulary, pre-tokenizer and chat template from this GGUF (a checkpoint of a run that imported its model from GGUF has no tokenizer.json)")
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	if *dir == "" || *out == "" {
		return fs.usageErr("--checkpoint and --out are required")
	}
	matrices, ok := map[string]uint32{"f32": format.GGMLTypeF32, "f16": format.GGMLTypeF16, "bf16": format.GGMLTypeBF16}[*typ]
	if !ok {
		return fs.usageErr("--type %q: want f32, f16 or bf16", *typ)
	}
	if *tokFrom != "" && !format.IsGGUF(*tokFrom) {
		return fs.usageErr("--tokenizer %s: want a GGUF file", *tokFrom)
	}
	cfg, err := format.ExportGGUF(ctx, *dir, *out, *tokFrom, format.GGUFOptions{Matrices: matrices})
	if err != nil {
		return err
	}
	return reportGGUF(e, *out, cfg)
}

func reportGGUF(e env, out string, cfg format.LlamaConfig) error {
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d layers, hidden %d, vocab %d, %.1f MB\n", out, cfg.NumHiddenLayers, cfg.HiddenSize, cfg.VocabSize, float64(st.Size())/1e6)
	return nil
}

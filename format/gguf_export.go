package format

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/compactrl/compactrl/tokenizer"
)

// ExportGGUF writes the policy checkpoint src as a GGUF file out that
// llama-server serves, and returns its config. src is a checkpoint
// directory (config.json, the weights, tokenizer.json and, if there, the
// chat template of tokenizer_config.json) or a GGUF file (any quantization,
// dequantized). tokFrom, when given, is a GGUF file whose vocabulary,
// pre-tokenizer and chat template are used instead of the directory's
// tokenizer (a checkpoint of a run that imported its model from GGUF has no
// tokenizer.json). A value model (LlamaForSequenceClassification) is
// refused; sizes are checked before anything is read in full.
func ExportGGUF(ctx context.Context, src, out, tokFrom string, opts GGUFOptions) (LlamaConfig, error) {
	if IsGGUF(src) {
		return exportFromGGUF(ctx, src, out, opts)
	}
	need := []string{ConfigFile}
	if tokFrom == "" {
		need = append(need, tokenizer.File)
	}
	for _, name := range need {
		if _, err := os.Stat(filepath.Join(src, name)); err != nil {
			return LlamaConfig{}, fmt.Errorf("checkpoint %s: %s missing (a GGUF needs the config, the weights and the tokenizer; --tokenizer FILE.gguf gives the last): %w", src, name, err)
		}
	}
	cfg, err := ReadConfig(src)
	if err != nil {
		return cfg, err
	}
	if slices.Contains(cfg.Architectures, "LlamaForSequenceClassification") {
		return cfg, fmt.Errorf("checkpoint %s is a value model (LlamaForSequenceClassification): only policies export to GGUF", src)
	}
	if err := cfg.CheckMemory(filepath.Join(src, ConfigFile)); err != nil {
		return cfg, fmt.Errorf("export gguf: %w", err)
	}
	hdr, path, err := ReadWeightsHeader(src)
	if err != nil {
		return cfg, fmt.Errorf("export gguf: %w", err)
	}
	if err := cfg.CheckTensors(path, hdr); err != nil {
		return cfg, fmt.Errorf("export gguf: %w", err)
	}
	ts, err := ReadWeights(src)
	if err != nil {
		return cfg, err
	}
	var tok *tokenizer.Tokenizer
	if tokFrom != "" {
		if tok, err = ReadTokenizer(tokFrom); err != nil {
			return cfg, fmt.Errorf("export gguf: --tokenizer: %w", err)
		}
		tc, err := ReadTokenizerConfig(tokFrom)
		if err != nil {
			return cfg, fmt.Errorf("export gguf: --tokenizer: %w", err)
		}
		opts.ChatTemplate = tc.ChatTemplate
	} else {
		if tok, err = tokenizer.Load(filepath.Join(src, tokenizer.File)); err != nil {
			return cfg, err
		}
		if tc, err := tokenizer.LoadConfig(filepath.Join(src, tokenizer.ConfigFile)); err == nil {
			opts.ChatTemplate = tc.ChatTemplate
		} else if !errors.Is(err, os.ErrNotExist) {
			return cfg, fmt.Errorf("export gguf: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return cfg, err
	}
	return cfg, WriteGGUFWith(out, cfg, ts, tok, opts)
}

// exportFromGGUF rewrites a GGUF model (any quantization, dequantized).
func exportFromGGUF(ctx context.Context, in, out string, opts GGUFOptions) (LlamaConfig, error) {
	cfg, ts, err := ReadGGUFCheckpoint(in)
	if err != nil {
		return cfg, fmt.Errorf("export gguf: %w", err)
	}
	tok, err := ReadTokenizer(in)
	if err != nil {
		return cfg, fmt.Errorf("export gguf: %w", err)
	}
	tc, err := ReadTokenizerConfig(in)
	if err != nil {
		return cfg, fmt.Errorf("export gguf: %w", err)
	}
	opts.ChatTemplate = tc.ChatTemplate
	if err := ctx.Err(); err != nil {
		return cfg, err
	}
	return cfg, WriteGGUFWith(out, cfg, ts, tok, opts)
}

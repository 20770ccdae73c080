package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/tokenizer"
)

// `model logits` and `export gguf` on a checkpoint whose config.json has
// absurd dimensions end with an error naming config.json, the field and
// the value (before: Go's "fatal error: out of memory"); dimensions within
// the bounds that the weights file does not hold are an error naming the
// file and the tensor, found from the file's header before any allocation.
func TestAbsurdModelConfigIsAnError(t *testing.T) {
	dir, tok, _ := tinyCheckpoint(t)
	if err := tok.Save(filepath.Join(dir, tokenizer.File)); err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(filepath.Join(dir, format.ConfigFile))
	set := func(field string, v any) {
		var c map[string]any
		json.Unmarshal(orig, &c)
		c[field] = v
		b, _ := json.Marshal(c)
		os.WriteFile(filepath.Join(dir, format.ConfigFile), b, 0o644)
	}
	runIt := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb}, args)
		return code, errb.String()
	}
	for _, c := range []struct {
		field string
		v     any
		want  []string
	}{
		{"vocab_size", 2_000_000_000, []string{"config.json", "vocab_size 2000000000", "above the limit"}},
		{"hidden_size", 1 << 24, []string{"config.json", "hidden_size 16777216", "above the limit"}},
		{"num_hidden_layers", 100_000_000, []string{"config.json", "num_hidden_layers 100000000", "above the limit"}},
		{"intermediate_size", 1 << 28, []string{"config.json", "intermediate_size 268435456", "above the limit"}},
		{"max_position_embeddings", 1 << 40, []string{"config.json", "max_position_embeddings", "above the limit"}},
		{"vocab_size", 4_000_000, []string{"model.safetensors", "model.embed_tokens.weight", "vocab_size 4000000"}},
		{"num_hidden_layers", 900, []string{"model.safetensors", "num_hidden_layers 900"}},
	} {
		set(c.field, c.v)
		for _, args := range [][]string{
			{"model", "logits", "--checkpoint", dir, "--tokens", "1,2"},
			{"export", "gguf", "--checkpoint", dir, "--out", filepath.Join(t.TempDir(), "m.gguf")},
		} {
			code, stderr := runIt(args...)
			for _, w := range c.want {
				if code == 0 || !strings.Contains(stderr, w) {
					t.Errorf("%s %s = %v: exit %d, %q lacks %q", args[0], c.field, c.v, code, stderr, w)
					break
				}
			}
		}
	}
	os.WriteFile(filepath.Join(dir, format.ConfigFile), orig, 0o644)
	if code, stderr := runIt("model", "logits", "--checkpoint", dir, "--tokens", "1,2"); code != 0 {
		t.Fatalf("the checkpoint itself: exit %d %s", code, stderr)
	}
}

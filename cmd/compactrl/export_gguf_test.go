package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/tokenizer"
)

// tinyCheckpoint saves a one-layer model (random weights) in a fresh
// directory and returns it with its tokenizer (not saved there).
func tinyCheckpoint(t *testing.T) (string, *tokenizer.Tokenizer, *model.Model) {
	t.Helper()
	dir := t.TempDir()
	tok, err := tokenizer.Train([]string{"hello world, hello agent"}, 270, []string{"<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(model.Config{Vocab: tok.VocabSize(), Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, FFN: 24, MaxSeq: 32, RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	return dir, tok, m
}

func TestExportGGUF(t *testing.T) {
	dir, tok, m := tinyCheckpoint(t)
	runCmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb}, args)
		return code, out.String(), errb.String()
	}
	gguf := filepath.Join(t.TempDir(), "m.gguf")
	if code, _, stderr := runCmd("export", "gguf", "--checkpoint", dir, "--out", gguf); code == 0 || !strings.Contains(stderr, "tokenizer.json missing") {
		t.Errorf("without tokenizer: exit %d, stderr %q", code, stderr)
	}
	if err := tok.Save(filepath.Join(dir, tokenizer.File)); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd("export", "gguf", "--checkpoint", dir, "--out", gguf)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "wrote "+gguf) {
		t.Errorf("stdout %q", stdout)
	}
	meta, ts, err := format.ReadGGUF(gguf)
	if err != nil {
		t.Fatal(err)
	}
	if meta["llama.block_count"] != uint32(1) || len(ts) != 1+9+1 {
		t.Errorf("block_count %v, %d tensors", meta["llama.block_count"], len(ts))
	}
	// --type picks the matrices' ggml type; the norms stay F32.
	for typ, want := range map[string]uint32{"f16": format.GGMLTypeF16, "bf16": format.GGMLTypeBF16} {
		out := filepath.Join(t.TempDir(), typ+".gguf")
		if code, _, stderr := runCmd("export", "gguf", "--checkpoint", dir, "--out", out, "--type", typ); code != 0 {
			t.Fatalf("--type %s: exit %d: %s", typ, code, stderr)
		}
		f, err := format.ReadGGUFMeta(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range f.Tensors {
			if w := map[bool]uint32{true: want, false: format.GGMLTypeF32}[len(ti.Shape) == 2]; ti.Type != w {
				t.Errorf("--type %s: %s is %s", typ, ti.Name, format.GGMLTypeName(ti.Type))
			}
		}
	}
	if code, _, stderr := runCmd("export", "gguf", "--checkpoint", dir, "--out", gguf, "--type", "q4_1"); code == 0 || !strings.Contains(stderr, "want f32, f16 or bf16") {
		t.Errorf("--type q4_1: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd("export", "gguf", "--out", gguf); code == 0 || !strings.Contains(stderr, "required") {
		t.Errorf("no checkpoint: exit %d, stderr %q", code, stderr)
	}
	critic := t.TempDir()
	if err := model.NewCritic(m).Save(critic); err != nil {
		t.Fatal(err)
	}
	tok.Save(filepath.Join(critic, tokenizer.File))
	if code, _, stderr := runCmd("export", "gguf", "--checkpoint", critic, "--out", gguf); code == 0 || !strings.Contains(stderr, "value model") {
		t.Errorf("critic: exit %d, stderr %q", code, stderr)
	}
	os.Remove(gguf)
}

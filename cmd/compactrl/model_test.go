package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/tokenizer"
)

func TestModelInitAndLogits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	var out, errb bytes.Buffer
	e := env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb}
	if code := run(context.Background(), e, []string{"model", "init", "--preset", "tiny", "--seed", "3", "--out", dir}); code != 0 {
		t.Fatalf("model init: exit %d: %s", code, errb.String())
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Cfg != model.Presets["tiny"] {
		t.Fatalf("checkpoint config %+v", m.Cfg)
	}
	out.Reset()
	if code := run(context.Background(), e, []string{"model", "logits", "--checkpoint", dir, "--tokens", "1,2,3"}); code != 0 {
		t.Fatalf("model logits: exit %d: %s", code, errb.String())
	}
	var rows [][]float32
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("logits output is not JSON: %v", err)
	}
	want, err := m.NewScorer().Logits([]int{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || len(rows[2]) != m.Cfg.Vocab || rows[2][7] != want[2][7] {
		t.Fatalf("logits %d rows × %d, want 3 × %d", len(rows), len(rows[0]), m.Cfg.Vocab)
	}
	errb.Reset()
	if code := run(context.Background(), e, []string{"model", "logits", "--checkpoint", dir, "--tokens", "1,99999"}); code == 0 || !strings.Contains(errb.String(), "vocab") {
		t.Fatalf("out-of-vocab token: exit %d, %q", code, errb.String())
	}
	if code := run(context.Background(), e, []string{"model", "init", "--preset", "huge", "--out", dir}); code == 0 {
		t.Fatal("unknown preset accepted")
	}

	// --tokenizer sets the vocabulary and lands beside the weights.
	tok, err := tokenizer.Train([]string{"hello world, hello model", "a tiny corpus for a tiny tokenizer"}, 300, []string{"<|eos|>"})
	if err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "tok.json")
	if err := tok.Save(tokFile); err != nil {
		t.Fatal(err)
	}
	dir2 := filepath.Join(t.TempDir(), "ck2")
	if code := run(context.Background(), e, []string{"model", "init", "--preset", "tiny", "--tokenizer", tokFile, "--out", dir2}); code != 0 {
		t.Fatalf("model init --tokenizer: exit %d: %s", code, errb.String())
	}
	m2, err := model.Load(dir2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tokenizer.Load(filepath.Join(dir2, "tokenizer.json")); err != nil || m2.Cfg.Vocab != tok.VocabSize() {
		t.Fatalf("vocab %d, tokenizer %d (%v)", m2.Cfg.Vocab, tok.VocabSize(), err)
	}
}

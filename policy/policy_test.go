package policy

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/env/tasks"
	_ "github.com/compactrl/compactrl/env/vault" // registers the vault suite
	"github.com/compactrl/compactrl/model"
)

func vault(t *testing.T) Suite {
	t.Helper()
	name, s, ok, err := tasks.OpenSuite("vault")
	if err != nil || !ok {
		t.Fatalf("vault suite: %v %v", ok, err)
	}
	return Suite{Suite: s, Name: name}
}

func TestOpen(t *testing.T) {
	s := vault(t)
	p, err := Open("scripted:p=0.5", "", 1, 640, s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Sampler == nil || p.Format != nil || p.TokName != "vault-default" || p.Vocab == 0 {
		t.Fatalf("scripted policy %+v", p)
	}
	for spec, want := range map[string]string{"human": "want scripted", "checkpoint:": "needs a directory", "scripted:bogus=1": "--policy scripted:bogus=1",
		"checkpoint:" + filepath.Join(t.TempDir(), "none"): "--policy"} {
		if _, err := Open(spec, "", 1, 640, s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", spec, err, want)
		}
	}
}

// A checkpoint whose model cannot hold the context, or whose vocabulary
// is smaller than the tokenizer's, is refused before any episode.
func TestCheckpointFits(t *testing.T) {
	cfg, err := model.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Vocab, cfg.Dim, cfg.Layers, cfg.FFN, cfg.MaxSeq = 1024, 32, 1, 64, 256
	m, err := model.New(cfg, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Open("checkpoint:"+dir, "", 1, 640, vault(t)); err == nil || !strings.Contains(err.Error(), "below --context 640") {
		t.Fatalf("a 256-token model for a 640-token context: %v", err)
	}
	p, err := Open("checkpoint:"+dir, "", 2, 256, vault(t))
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
}

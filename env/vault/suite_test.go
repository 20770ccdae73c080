package vault

import (
	"strings"
	"testing"

	"github.com/compactrl/compactrl/env/tasks"
)

// The registered vault suite has every optional capability of a
// tasks.Suite, each the package's own definition: the system prompt, the
// train/test seed split, the Expert with its options, the default
// tokenizer.
func TestSuiteCapabilities(t *testing.T) {
	name, s, ok, err := tasks.OpenSuite("vault:files=2")
	if err != nil || !ok || name != "vault" {
		t.Fatalf("OpenSuite: %q %v %v", name, ok, err)
	}
	if p, ok := s.(tasks.SystemPrompter); !ok || p.SystemPrompt() != SystemPrompt {
		t.Error("no SystemPrompter with the suite's prompt")
	}
	sp, ok := s.(tasks.SeedSplitter)
	if !ok {
		t.Fatal("not a SeedSplitter")
	}
	for _, w := range []struct {
		name string
		r    SeedRange
	}{{"train", TrainSeeds()}, {"test", TestSeeds()}} {
		if start, end, err := sp.Split(w.name); err != nil || start != w.r.Start || end != w.r.End {
			t.Errorf("Split(%s) = %d, %d, %v; want %v", w.name, start, end, err, w.r)
		}
	}
	if _, _, err := sp.Split("dev"); err == nil || !strings.Contains(err.Error(), "train or test") {
		t.Errorf("Split(dev): %v, want an error naming the splits", err)
	}
	dt, ok := s.(tasks.DefaultTokenizer)
	if !ok {
		t.Fatal("not a DefaultTokenizer")
	}
	tok, tmpl, err := dt.DefaultTokenizer()
	if err != nil || tok.VocabSize() > DefaultVocabSize {
		t.Fatalf("DefaultTokenizer: %v", err)
	}
	sc, ok := s.(tasks.Scripter)
	if !ok {
		t.Fatal("not a Scripter")
	}
	for _, opts := range []string{"", "p=0.5", "p=0,seed=3", "seed=-1"} {
		pol, err := sc.Scripted(opts, tok, tmpl)
		if err != nil {
			t.Fatalf("Scripted(%q): %v", opts, err)
		}
		if _, ok := pol.(*Expert); !ok {
			t.Fatalf("Scripted(%q) is a %T, want the *Expert", opts, pol)
		}
	}
	for opts, want := range map[string]string{
		"p=2": "not in [0, 1]", "p=x": "invalid syntax", "seed=1.5": "invalid syntax",
		"q=1": `unknown option "q" (p, seed)`, "p": `"p": want name=value`,
	} {
		if pol, err := sc.Scripted(opts, tok, tmpl); err == nil || pol != nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Scripted(%q) = %v, %v; want an error with %q", opts, pol, err, want)
		}
	}
}

// NewSuite is the suite of a Config given whole (a run config's suite
// section), refusing knobs out of range as ParseConfig does.
func TestNewSuite(t *testing.T) {
	s, err := NewSuite(DefaultConfig())
	if err != nil || !s.Has("7") || s.Has("x") {
		t.Fatalf("NewSuite(DefaultConfig()): %v", err)
	}
	if _, err := NewSuite(Config{}); err == nil || !strings.Contains(err.Error(), "files 0") {
		t.Errorf("NewSuite(Config{}): %v", err)
	}
}

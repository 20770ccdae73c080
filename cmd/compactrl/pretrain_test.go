package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/recipe"
	"github.com/compactrl/compactrl/train"
)

// tinyRecipe writes a pretraining recipe of PretrainConfig with a few steps
// of every phase and a small evaluation.
func tinyRecipe(t *testing.T) string {
	t.Helper()
	c := recipe.PretrainConfig()
	c.SFT.Episodes, c.SFT.Steps, c.SFT.CopySteps, c.SFT.RecallSteps, c.SFT.RecallMix = 16, 6, 3, 3, 4
	c.Run.EvalEpisodes, c.Run.Workers = 8, 8
	y, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "tiny.yaml")
	if err := os.WriteFile(p, y, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPretrainWritesABaseThatEvaluatesAndTrains(t *testing.T) {
	out := filepath.Join(t.TempDir(), "base")
	stdout, stderr, code := runCmd(t, "pretrain", "--config", tinyRecipe(t), "--seed", "3", "--out", out, "--quiet")
	if code != 0 {
		t.Fatalf("pretrain exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "pass@1 with compaction") || !strings.Contains(stdout, "base policy written to") {
		t.Errorf("pretrain output:\n%s", stdout)
	}
	for _, f := range []string{"model.safetensors", "config.json", "tokenizer.json", recipe.BaseConfigFile, recipe.BaseCurveFile, recipe.BaseInfoFile, "README.md"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("base lacks %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "run")); !os.IsNotExist(err) {
		t.Errorf("the pretraining run directory is left in the base: %v", err)
	}
	info, err := recipe.ReadBaseInfo(out)
	if err != nil {
		t.Fatal(err)
	}
	if info.Seed != 3 || info.Eval.Episodes != 8 || info.PhaseLoss["copy"] == 0 || info.PhaseLoss["sft-recall"] == 0 || !strings.HasPrefix(info.Command, "compactrl pretrain") {
		t.Errorf("eval.json %+v", info)
	}
	card, _ := os.ReadFile(filepath.Join(out, "README.md"))
	for _, want := range []string{"seed 3", "pass@1 with compaction", "3 copy, 3 recall, 6 SFT steps on 16 demonstrations", info.Command} {
		if !strings.Contains(string(card), want) {
			t.Errorf("model card lacks %q:\n%s", want, card)
		}
	}
	// The curve has one record per step of every phase.
	b, _ := os.ReadFile(filepath.Join(out, recipe.BaseCurveFile))
	if n := strings.Count(string(b), "\n"); n != 12 {
		t.Errorf("pretrain.jsonl has %d records, want 3+3+6", n)
	}
	var rec train.SFTRecord
	if err := json.Unmarshal([]byte(strings.Split(string(b), "\n")[6]), &rec); err != nil || rec.Phase != "sft" || rec.MixedLoss == nil {
		t.Errorf("first SFT record %+v (%v): want a recall loss of the mixed-in sequences", rec, err)
	}

	// A base is not overwritten.
	if _, stderr, code := runCmd(t, "pretrain", "--config", tinyRecipe(t), "--out", out, "--quiet"); code == 0 || !strings.Contains(stderr, "not empty") {
		t.Errorf("pretrain into a non-empty dir: exit %d, %s", code, stderr)
	}

	// eval --checkpoint takes the base alone, at a seed offset.
	stdout, stderr, code = runCmd(t, "eval", "--checkpoint", out, "--episodes", "4", "--seed", "10", "--quiet")
	if code != 0 {
		t.Fatalf("eval of the base exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "dev range, task seeds 1000010…1000013 (4 episodes per mode)") || !strings.Contains(stdout, "pass@1 single window") {
		t.Errorf("eval output:\n%s", stdout)
	}
	// The sealed test range, with the per-task outcomes written.
	outFile := filepath.Join(t.TempDir(), "outcomes.json")
	stdout, stderr, code = runCmd(t, "eval", "checkpoint", out, "--episodes", "3", "--range", "test", "--outcomes", outFile, "--quiet")
	if code != 0 || !strings.Contains(stdout, "test range, task seeds 5000000…5000002 (3 episodes per mode)") {
		t.Errorf("eval --range test exit %d: %s\n%s", code, stdout, stderr)
	}
	if ev, err := train.ReadOutcomes(outFile); err != nil || len(ev.Outcomes) != 3 || ev.Outcomes[2].TaskSeed != 5000002 || ev.Range != "test" {
		t.Errorf("outcomes of eval --range test: %+v, %v", ev, err)
	}
	if _, stderr, code := runCmd(t, "eval", "checkpoint", out, "--range", "sealed"); code == 0 || !strings.Contains(stderr, "--range") {
		t.Errorf("unknown --range: exit %d, %s", code, stderr)
	}
	if _, stderr, code := runCmd(t, "eval", "--checkpoint", out, "--seed", "-1"); code == 0 || !strings.Contains(stderr, "--seed") {
		t.Errorf("negative --seed: exit %d, %s", code, stderr)
	}

	// experiment runs every arm from that base: two arms, one seed, one iteration.
	dir := filepath.Join(t.TempDir(), "x")
	stdout, stderr, code = runCmd(t, "experiment", "--base", out, "--arms", "base,compactionrl", "--seeds", "1", "--iterations", "1", "--dir", dir, "--quiet")
	if code != 0 {
		t.Fatalf("experiment exit %d: %s", code, stderr)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| base policy (no RL) | 1 |", "| CompactionRL | 1 |", "scripted expert, p = 0.5", "scripted expert, p = 1", "complete"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	_ = stdout
	// Every task outcome of every arm and seed, on the same tasks.
	rows, err := os.ReadFile(filepath.Join(dir, "outcomes.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(rows), `"arm":"base"`); n == 0 || n != strings.Count(string(rows), `"arm":"compactionrl"`) {
		t.Errorf("outcomes.jsonl: %d base rows, want as many as compactionrl's:\n%s", n, rows)
	}
	// --resume keeps the finished runs: nothing trains again.
	before, err := os.Stat(filepath.Join(dir, "compactionrl", "seed-1", "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runCmd(t, "experiment", "--base", out, "--arms", "base,compactionrl", "--seeds", "1", "--iterations", "1", "--dir", dir, "--quiet", "--resume")
	if code != 0 || strings.Count(stderr, "kept: ") != 2 {
		t.Fatalf("experiment --resume exit %d, want both runs kept: %s", code, stderr)
	}
	if after, err := os.Stat(filepath.Join(dir, "compactionrl", "seed-1", "metrics.jsonl")); err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("--resume retrained compactionrl seed 1 (%v)", err)
	}
	// eval compare pairs the two arms' runs on their tasks.
	stdout, stderr, code = runCmd(t, "eval", "compare", "base="+filepath.Join(dir, "base"), "cr="+filepath.Join(dir, "compactionrl", "seed-1"))
	if code != 0 || !strings.Contains(stdout, "| cr | 1 |") || !strings.Contains(stdout, "Δ vs base [95%]") || !strings.Contains(stdout, "dev range, task seeds 1000000…") {
		t.Errorf("eval compare exit %d:\n%s\n%s", code, stdout, stderr)
	}
	if _, stderr, code := runCmd(t, "eval", "compare", filepath.Join(dir, "base")); code == 0 || !strings.Contains(stderr, "two arms") {
		t.Errorf("eval compare of one arm: exit %d, %s", code, stderr)
	}
	// Another range is other tasks: nothing is kept.
	_, stderr, code = runCmd(t, "experiment", "--base", out, "--arms", "base", "--seeds", "1", "--iterations", "1", "--dir", dir, "--quiet", "--resume", "--range", "test")
	if code != 0 || strings.Contains(stderr, "kept: ") {
		t.Errorf("experiment --resume --range test exit %d, want nothing kept: %s", code, stderr)
	}
}

// The demo runs RL from the shipped base with no warm start, prints pass@1
// before and after with intervals and writes a report with the held-out
// transcripts and the base's pretraining curves.
func TestDemoStartsFromTheShippedBase(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	stdout, stderr, code := runCmd(t, "demo", "--iterations", "1", "--dir", dir, "--quiet")
	if code != 0 {
		t.Fatalf("demo exit %d: %s", code, stderr)
	}
	for _, want := range []string{"from the base policy in", "before RL (base policy)", "after 1 CompactionRL iterations", "warm start 0.0s", "report: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout)
		}
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Held-out pass@1 before and after RL", "Pretraining loss", "Held-out transcript before RL", "Held-out transcript after RL", "The same task before RL (the base fails)", "The same task after RL (the trained policy succeeds)"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if _, stderr, code := runCmd(t, "demo", "stray"); code == 0 || !strings.Contains(stderr, "stray") {
		t.Errorf("a stray argument: exit %d, %s", code, stderr)
	}
}

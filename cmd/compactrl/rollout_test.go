package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/model"
)

func runCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb}, args)
	return out.String(), errb.String(), code
}

func readFileEpisodes(t *testing.T, path string) []episode.Episode {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return readEpisodes(t, string(b))
}

func TestRolloutScriptedAndShow(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "ep.jsonl")
	stdout, stderr, code := runCmd(t, "rollout", "--episodes", "40", "--workers", "4", "--out", out)
	if code != 0 {
		t.Fatalf("rollout: %s", stderr)
	}
	for _, want := range []string{"episodes 40", "success 1.000", "compactions ", "turns ", "summary_quality 1.000", "tokens/s ", "episodes/s "} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("stats line %q lacks %q", stdout, want)
		}
	}
	eps := readFileEpisodes(t, out)
	if len(eps) != 40 || eps[0].Meta["policy"] != "scripted" || eps[0].Meta["tokenizer"] != "vault-default" {
		t.Fatalf("%d episodes, meta %v", len(eps), eps[0].Meta)
	}
	// The baseline without compaction runs out of window.
	base := filepath.Join(dir, "base.jsonl")
	stdout, stderr, code = runCmd(t, "rollout", "--episodes", "40", "--no-compaction", "--out", base)
	if code != 0 || !strings.Contains(stdout, "overlong=") || strings.Contains(stdout, "success 1.000") {
		t.Fatalf("no-compaction: %s %s", stdout, stderr)
	}
	// Lossy summaries.
	lossy := filepath.Join(dir, "lossy.jsonl")
	stdout, _, code = runCmd(t, "rollout", "--episodes", "40", "--policy", "scripted:p=0.5,seed=2", "--out", lossy)
	if code != 0 || strings.Contains(stdout, "success 1.000") {
		t.Fatalf("p=0.5: %s", stdout)
	}
	// The transcript marks compactions with what was kept and lost.
	var id string
	for _, ep := range readFileEpisodes(t, lossy) {
		if ep.Meta["summary_1_lost"] != "" {
			id = ep.ID
			break
		}
	}
	if id == "" {
		t.Fatal("no p=0.5 episode lost a fact in its first summary")
	}
	stdout, stderr, code = runCmd(t, "show", lossy, "--episode", id)
	if code != 0 {
		t.Fatalf("show: %s", stderr)
	}
	for _, want := range []string{"episode " + id, "── segment 1 · summary", "══ compaction 1", "kept: ", "lost: ", "summary*", "assistant*", "(re-included)", "summary request"} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("transcript lacks %q:\n%s", want, stdout)
		}
	}
	stdout, _, code = runCmd(t, "show", out)
	if code != 0 || strings.Count(stdout, "\n") != 41 || !strings.Contains(stdout, "vault-1000000") {
		t.Fatalf("list: %s", stdout)
	}
	if _, _, code := runCmd(t, "show", out, "--episode", "nope"); code == 0 {
		t.Fatal("unknown episode accepted")
	}
}

// TestRolloutSummaryOverride: --summary-override replaces the summaries,
// the episodes say so, and show marks each replaced summary.
func TestRolloutSummaryOverride(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "drop.jsonl")
	stdout, stderr, code := runCmd(t, "rollout", "--episodes", "20", "--workers", "2", "--policy", "scripted:p=0.5", "--summary-override", "drop-one", "--out", out)
	if code != 0 {
		t.Fatalf("rollout: %s", stderr)
	}
	var id string
	for _, ep := range readFileEpisodes(t, out) {
		if ep.Meta["summary_override"] != "drop-one" || (len(ep.Segments) > 0 && ep.Segments[0].Trainable) {
			t.Fatalf("episode %s: meta %v, trainable %v", ep.ID, ep.Meta, ep.Segments[0].Trainable)
		}
		if ep.Meta["summary_1_dropped"] != "" && id == "" {
			id = ep.ID
		}
	}
	if id == "" {
		t.Fatalf("no episode dropped a fact in its first summary: %s", stdout)
	}
	stdout, stderr, code = runCmd(t, "show", out, "--episode", id)
	if code != 0 || !strings.Contains(stdout, "summary replaced: drop-one (dropped: ") || !strings.Contains(stdout, "summary_override: drop-one") || !strings.Contains(stdout, "segment not trainable") || strings.Contains(stdout, "summary*") {
		t.Fatalf("show: %s %s", stdout, stderr)
	}
	// report --episodes tabulates it beside the policy's own summaries.
	own := filepath.Join(dir, "own.jsonl")
	if _, stderr, code := runCmd(t, "rollout", "--episodes", "20", "--workers", "2", "--policy", "scripted:p=0.5", "--out", own); code != 0 {
		t.Fatalf("rollout: %s", stderr)
	}
	svg := filepath.Join(dir, "q.svg")
	stdout, stderr, code = runCmd(t, "report", "--episodes", "--svg", svg, "own="+own, out)
	if code != 0 || !strings.Contains(stdout, "| own | own | 20 | ") || !strings.Contains(stdout, "| drop | drop-one | 20 | ") {
		t.Fatalf("report --episodes: %s %s", stdout, stderr)
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.Contains(string(b), "<svg") {
		t.Fatalf("svg: %v", err)
	}
	if _, _, code := runCmd(t, "report", "--episodes"); code == 0 {
		t.Fatal("report --episodes without files accepted")
	}
	// --config takes the suite and the agent from a run config.
	demo := filepath.Join(dir, "demo.jsonl")
	if _, stderr, code := runCmd(t, "rollout", "--config", filepath.Join("..", "..", "configs", "demo.yaml"), "--episodes", "8", "--summary-override", "expert", "--out", demo); code != 0 {
		t.Fatalf("rollout --config: %s", stderr)
	}
	for _, ep := range readFileEpisodes(t, demo) {
		if ep.Meta["context"] != "512" || ep.Meta["reserve"] != "192" || ep.Reward != 1 || !strings.Contains(ep.Task, "the vault has 3 files") {
			t.Fatalf("--config demo.yaml: meta %v reward %v task %q", ep.Meta, ep.Reward, ep.Task)
		}
	}
	for _, args := range [][]string{
		{"--config", filepath.Join("..", "..", "configs", "demo.yaml"), "--context", "600"},
		{"--config", filepath.Join("..", "..", "configs", "demo.yaml"), "--env", "vault"},
		{"--config", filepath.Join(dir, "missing.yaml")},
		{"--summary-override", "oracle"},
		{"--summary-override", "empty", "--no-compaction"},
	} {
		if _, stderr, code := runCmd(t, append([]string{"rollout", "--out", out}, args...)...); code == 0 || !strings.Contains(stderr, strings.TrimPrefix(args[len(args)-2], "--")) {
			t.Fatalf("%v accepted: %s", args, stderr)
		}
	}
}

func TestRolloutBadFlags(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.jsonl")
	for _, args := range [][]string{
		{"rollout"}, // no --out
		{"rollout", "--out", out, "--env", "harbor"},
		{"rollout", "--out", out, "--env", "vault:rooms=3"},
		{"rollout", "--out", out, "--policy", "scripted:p=2"},
		{"rollout", "--out", out, "--policy", "scripted:q=1"},
		{"rollout", "--out", out, "--policy", "gpt"},
		{"rollout", "--out", out, "--policy", "checkpoint:" + filepath.Join(dir, "missing")},
		{"rollout", "--out", out, "--reserve", "50"},
		{"rollout", "--out", out, "--split", "dev"},
		{"rollout", "--out", out, "--seed", "999990", "--episodes", "100"},
		{"rollout", "--out", out, "--workers", "0"},
	} {
		if _, stderr, code := runCmd(t, args...); code == 0 || stderr == "" {
			t.Fatalf("%v accepted", args)
		}
	}
}

// A random-weight checkpoint runs through the built-in engine: its replies
// are mostly not actions, so the episodes end as format errors, but they
// are written, with the engine's log-probs on the sampled tokens.
func TestRolloutCheckpointPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes a random model")
	}
	cfg, err := model.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Vocab, cfg.Dim, cfg.Layers, cfg.FFN, cfg.MaxSeq = 1024, 32, 1, 64, 1024
	m, err := model.New(cfg, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.Save(filepath.Join(dir, "ckpt")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "ep.jsonl")
	stdout, stderr, code := runCmd(t, "rollout", "--episodes", "2", "--workers", "2", "--policy", "checkpoint:"+filepath.Join(dir, "ckpt"), "--max-action-tokens", "8", "--out", out)
	if code != 0 {
		t.Fatalf("checkpoint rollout: %s", stderr)
	}
	eps := readFileEpisodes(t, out)
	if len(eps) != 2 || !strings.Contains(stdout, "episodes 2") {
		t.Fatalf("%d episodes: %s", len(eps), stdout)
	}
	for _, ep := range eps {
		if ep.Status == episode.StatusInfraError {
			t.Fatalf("infra_error: %v", ep.Meta)
		}
		neg := false
		for _, s := range ep.Segments {
			for i, lp := range s.Logprobs {
				if s.LossMask[i] == 1 && lp < 0 {
					neg = true
				}
			}
		}
		if !neg {
			t.Fatal("no sampled token carries a log-prob")
		}
	}
}

// Generated suites with fewer capabilities than vault, registered for
// TestRolloutSuiteCapabilities: one whose ids are not seeds, one with
// seed splits only, one with a scripted policy but no tokenizer.
type (
	splitOnlySuite   struct{ tasks.Suite }
	noTokenizerSuite struct{ splitOnlySuite }
)

func (splitOnlySuite) Split(string) (int64, int64, error) { return 0, 10, nil }

func (noTokenizerSuite) Scripted(string, agent.LocalTokenizer, agent.Template) (infer.Sampler, error) {
	return nil, errors.New("not reached")
}

func init() {
	named := tasks.Named(nil)
	tasks.RegisterSuite("rollout-test-bare", func(string) (tasks.Suite, error) { return named, nil })
	tasks.RegisterSuite("rollout-test-split", func(string) (tasks.Suite, error) { return splitOnlySuite{named}, nil })
	tasks.RegisterSuite("rollout-test-notok", func(string) (tasks.Suite, error) { return noTokenizerSuite{splitOnlySuite{named}}, nil })
}

// rollout knows no suite by name: --env opens any registered one, an
// unknown one lists them, and a flag that needs a capability the suite
// lacks says which.
func TestRolloutSuiteCapabilities(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.jsonl")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--env", "nope"}, `--env "nope": unknown environment (available: rollout-test-bare, rollout-test-notok, rollout-test-split, vault)`},
		{[]string{"--env", "vault:files=0"}, "--env: vault: files 0 not in"},
		{[]string{"--env", "rollout-test-bare"}, "--env rollout-test-bare: the suite's task ids are not seeds in splits (tasks.SeedSplitter)"},
		{[]string{"--env", "rollout-test-split", "--episodes", "1"}, "--policy scripted: the rollout-test-split suite has no scripted policy (tasks.Scripter)"},
		{[]string{"--env", "rollout-test-notok", "--episodes", "1"}, "--tokenizer is required: the rollout-test-notok suite has no tokenizer of its own (tasks.DefaultTokenizer)"},
		{[]string{"--env", "rollout-test-notok", "--split", "any", "--seed", "5", "--episodes", "6"}, "--seed 5 + --episodes 6 runs past the any split's 10 seeds"},
	} {
		_, stderr, code := runCmd(t, append([]string{"rollout", "--out", out}, c.args...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want an error with %q", c.args, code, stderr, c.want)
		}
	}
}

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/recipe"
)

// everyCommand is each command and subcommand line; the test below checks
// it against commands() so a new command cannot be left out.
var everyCommand = [][]string{
	{"help"}, {"demo"}, {"pretrain"}, {"train"}, {"experiment"},
	{"eval"}, {"eval", "checkpoint"}, {"rollout"}, {"show"}, {"advantages"},
	{"serve"}, {"tokenize"}, {"export"}, {"export", "gguf"},
	{"model"}, {"model", "init"}, {"model", "logits"}, {"report"},
	{"bench"}, {"bench", "model"},
}

func TestEveryCommandHelpAndBadFlag(t *testing.T) {
	listed := map[string]bool{}
	for _, c := range everyCommand {
		listed[c[0]] = true
	}
	for name := range commands() {
		if !listed[name] {
			t.Errorf("command %q is missing from everyCommand", name)
		}
	}
	for _, c := range everyCommand {
		t.Run(strings.Join(c, "_"), func(t *testing.T) {
			for _, h := range []string{"-h", "--help"} {
				stdout, stderr, code := runCmd(t, append(slices.Clone(c), h)...)
				if code != 0 || !strings.Contains(stdout, "Example") || !strings.Contains(stdout, "usage: compactrl "+strings.Join(c, " ")) {
					t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 0 and a usage with examples on stdout", h, code, stdout, stderr)
				}
			}
			_, stderr, code := runCmd(t, append(slices.Clone(c), "--no-such-flag")...)
			if code != 2 || !strings.Contains(stderr, "no-such-flag") || !strings.Contains(stderr, "usage: compactrl") {
				t.Errorf("bad flag: exit %d, stderr %q; want exit 2 naming the flag, with the usage", code, stderr)
			}
		})
	}
}

func TestStrayArgumentsAreErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.jsonl")
	for _, args := range [][]string{
		{"rollout", "--out", out, "stray"},
		{"advantages", "stray"},
		{"demo", "stray"},
		{"report", "a", "stray"},
		{"show", "a.jsonl", "stray"},
		{"eval", "checkpoint", "a", "stray"},
		{"train", "--config", "x.yaml", "stray"}, // not KEY=VALUE
		{"help", "eval", "checkpoint", "stray"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			_, stderr, code := runCmd(t, args...)
			if code != 2 || !strings.Contains(stderr, "stray") {
				t.Errorf("exit %d, stderr %q; want exit 2 naming the stray argument", code, stderr)
			}
		})
	}
}

func TestHelpCommand(t *testing.T) {
	for _, args := range [][]string{{"help", "train"}, {"help", "eval", "checkpoint"}, {"help", "model", "init"}} {
		stdout, stderr, code := runCmd(t, args...)
		if code != 0 || !strings.Contains(stdout, "usage: compactrl "+strings.Join(args[1:], " ")) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	if _, stderr, code := runCmd(t, "help", "nope"); code != 2 || !strings.Contains(stderr, `unknown command "nope"`) {
		t.Errorf("help nope: exit %d, %s", code, stderr)
	}
}

// show takes its file before, between or after the flags.
func TestShowFileAnywhere(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.jsonl")
	if _, stderr, code := runCmd(t, "rollout", "--episodes", "2", "--workers", "1", "--out", out); code != 0 {
		t.Fatalf("rollout: %s", stderr)
	}
	eps := readFileEpisodes(t, out)
	id := eps[0].ID
	var want string
	for i, args := range [][]string{
		{"show", out, "--episode", id},
		{"show", "--episode", id, out},
		{"show", "--episode", id, "--", out},
	} {
		stdout, stderr, code := runCmd(t, args...)
		if code != 0 || stdout == "" {
			t.Fatalf("%v: exit %d %s", args, code, stderr)
		}
		if i == 0 {
			want = stdout
		} else if stdout != want {
			t.Errorf("%v printed another transcript", args)
		}
	}
}

// eval checkpoint DIR and its deprecated spelling eval --checkpoint DIR
// reach the same evaluation; the old spelling says so.
func TestEvalCheckpointSpellings(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	_, stderr, code := runCmd(t, "eval", "checkpoint", missing, "--episodes", "1")
	if code != 1 || !strings.Contains(stderr, "nope") || strings.Contains(stderr, "deprecated") {
		t.Errorf("eval checkpoint: exit %d, %s", code, stderr)
	}
	_, stderr, code = runCmd(t, "eval", "--checkpoint", missing, "--episodes", "1")
	if code != 1 || !strings.Contains(stderr, "nope") || !strings.Contains(stderr, "deprecated; use `compactrl eval checkpoint DIR`") {
		t.Errorf("eval --checkpoint: exit %d, %s", code, stderr)
	}
	if _, stderr, code := runCmd(t, "eval", "checkpoint"); code != 2 || !strings.Contains(stderr, "need a checkpoint DIR") {
		t.Errorf("no DIR: exit %d, %s", code, stderr)
	}
	if _, stderr, code := runCmd(t, "eval", "checkpoint", missing, "--checkpoint", missing); code != 2 || !strings.Contains(stderr, "once") {
		t.Errorf("DIR twice: exit %d, %s", code, stderr)
	}
}

func TestTrainConfigOverrides(t *testing.T) {
	base, err := loadConfig("../../configs/demo.yaml", recipe.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig("../../configs/demo.yaml", recipe.Config{}, []string{"run.iterations=5", "rl.gamma=0.5", "seed=9"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Run.Iterations != 5 || cfg.RL.Gamma != 0.5 || cfg.Seed != 9 {
		t.Fatalf("overrides not applied: run %+v, gamma %g, seed %d", cfg.Run, cfg.RL.Gamma, cfg.Seed)
	}
	cfg.Run.Iterations, cfg.RL.Gamma, cfg.Seed = base.Run.Iterations, base.RL.Gamma, base.Seed
	a, _ := cfg.YAML()
	b, _ := base.YAML()
	if string(a) != string(b) {
		t.Errorf("overrides changed other keys:\n%s\nvs\n%s", a, b)
	}
	for _, tc := range []struct{ name, arg, want string }{
		{"unknown key", "rl.gama=0.5", `override "rl.gama=0.5": rl has no key "gama"`},
		{"unknown section", "rn.iterations=5", `override "rn.iterations=5": the config has no key "rn"`},
		{"key into a scalar", "run.iterations.x=5", `override "run.iterations.x=5": run.iterations is a value in the config, not a section`},
		{"malformed", "run.iterations", `override "run.iterations": want section.key=value`},
		{"bad value", "run.iterations=many", `run.iterations=many`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig("../../configs/demo.yaml", recipe.Config{}, []string{tc.arg})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want %q", err, tc.want)
			}
		})
	}
	// Through the command line: a bad override stops train before any work.
	dir := t.TempDir()
	if _, stderr, code := runCmd(t, "train", "--config", "../../configs/demo.yaml", "--dir", dir, "rl.gama=1"); code == 0 || !strings.Contains(stderr, `rl.gama=1`) {
		t.Errorf("train with an unknown override: exit %d, %s", code, stderr)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("train wrote %d entries despite the bad override", len(ents))
	}
}

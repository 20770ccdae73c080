package recipe

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/train/builtin"
)

func TestParseConfigDefaultsAndOverrides(t *testing.T) {
	c, err := ParseConfig(strings.NewReader("seed: 7\nrl:\n  estimator: independent\n  clip_high: 0.3\nrun:\n  iterations: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if c.Seed != 7 || c.RL.Estimator != "independent" || c.RL.ClipHigh != 0.3 || c.Run.Iterations != 3 {
		t.Errorf("overrides not applied: %+v", c)
	}
	if c.RL.ClipLow != d.RL.ClipLow || c.Agent.Context != d.Agent.Context || c.Model.Preset != d.Model.Preset {
		t.Error("fields left out must keep their defaults")
	}
	if e, err := ParseConfig(strings.NewReader("")); err != nil || e.Seed != d.Seed {
		t.Errorf("empty config: %v, %v", e, err)
	}
}

func TestParseConfigUnknownFieldNamed(t *testing.T) {
	_, err := ParseConfig(strings.NewReader("rl:\n  clip_hihg: 0.3\n"))
	if err == nil || !strings.Contains(err.Error(), "clip_hihg") {
		t.Fatalf("err = %v, want one naming clip_hihg", err)
	}
}

func TestValidateNamesField(t *testing.T) {
	for yml, field := range map[string]string{
		"rl: {estimator: ppo}":                                     "rl.estimator",
		"rl: {loss_agg_mode: sum}":                                 "rl.loss_agg_mode",
		"rl: {loss_mode: sum}":                                     "rl.loss_agg_mode",
		"agent: {context: 100, reserve: 200}":                      "agent.reserve",
		"rl: {estimator: grpo}":                                    "rl.group_size",
		"sft: {expert_p: 1.5}":                                     "sft.expert_p",
		"run: {workers: 0}":                                        "run.workers",
		"rl: {gamma: 1.5}":                                         "rl.gamma",
		"rl: {lambda: 0.9}":                                        "rl.lambda",
		"rl: {clip_low: 1}":                                        "rl.clip_low",
		"rl: {value_clip: -1}":                                     "rl.value_clip",
		"rl: {group_size: 3}":                                      "run.episodes",
		"suite: {train_seed_start: 5, test_seed_start: 5}":         "suite.test_seed_start",
		"model: {rope_theta: -1}":                                  "model.rope_theta",
		"sft: {recall_steps: -1}":                                  "sft.recall_steps",
		"sft: {recall_steps: 5, copy_len: 1}":                      "sft.copy_len",
		"sft: {recall_keys: 33}":                                   "sft.recall_keys",
		"sft: {recall_len: -1}":                                    "sft.recall_len",
		"sft: {recall_goal: true, recall_steps: 0, recall_mix: 0}": "sft.recall_goal",
		"sft: {recall_goal: true, recall_steps: 5, recall_unknown: true}": "sft.recall_goal",
		"sft: {recall_goal: true, recall_steps: 5, recall_keys: 2}":       "sft.recall_goal",
	} {
		t.Run(field, func(t *testing.T) {
			_, err := ParseConfig(strings.NewReader(yml))
			if err == nil || !strings.Contains(err.Error(), field) {
				t.Errorf("%s: err = %v, want one naming %s", yml, err, field)
			}
		})
	}
}

func TestConfigYAMLRoundTrip(t *testing.T) {
	c := DefaultConfig()
	c.Suite.Facts = 6
	c.RL.LossAggMode = "seq-mean-token-mean"
	b, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseConfig(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if back.RL.LossAggMode != c.RL.LossAggMode || back.Suite != c.Suite || back.Agent != c.Agent || back.Run != c.Run {
		t.Errorf("round trip changed the config:\n%s", b)
	}
}

func TestConfigFilesMatchTheirFunctions(t *testing.T) {
	for _, x := range []struct {
		file string
		want Config
	}{{"../configs/demo.yaml", DemoConfig()}, {"../configs/pretrain.yaml", PretrainConfig()},
		{"../configs/vault-long.yaml", LongConfig()}, {"../configs/pretrain-long.yaml", LongPretrainConfig()},
		{"../configs/pretrain-goal.yaml", GoalPretrainConfig()}} {
		t.Run(filepath.Base(x.file), func(t *testing.T) {
			c, err := LoadConfig(x.file)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c, x.want) {
				t.Errorf("%s differs from its function:\n got %+v\nwant %+v", x.file, c, x.want)
			}
		})
	}
}

func TestValidateRejectsWhatWasSilentlyAccepted(t *testing.T) {
	for _, x := range []struct{ yaml, want string }{
		{"agent:\n  context: 512.5\n", `agent.context: "512.5" is not an integer`},
		{"model:\n  dim: -3\n", "model.dim: -3 must not be negative"},
		{"rl:\n  lr: .nan\n", "rl.lr: NaN is not a finite number"},
		{"rl:\n  gamma: .nan\n", "rl.gamma: NaN"},
		{"model:\n  init_range: .inf\n", "model.init_range: +Inf"},
		{"agent:\n  temperature: .nan\n", "agent.temperature: NaN"},
		{"agent:\n  temperature: 0.7\n", "agent.temperature: 0.7 must be 1 for RL"},
		{"sft:\n  recall_restarts: 2\n", "sft.recall_restarts: 2 needs sft.recall_steps > 0 and a sft.recall_target > 0"},
		{"sft:\n  recall_steps: 10\n  recall_restarts: 17\n  recall_target: 0.1\n", "sft.recall_restarts: 17 must be in [0, 16]"},
		{"sft:\n  recall_steps: 10\n  recall_target: 0.1\n", "sft.recall_target: 0.1 means nothing without sft.recall_restarts"},
		{"sft:\n  recall_steps: 10\n  recall_restarts: 1\n  recall_target: -1\n", "sft.recall_target: -1 must be a finite number"},
	} {
		t.Run(strings.SplitN(x.want, ":", 2)[0], func(t *testing.T) {
			if _, err := ParseConfig(strings.NewReader(x.yaml)); err == nil || !strings.Contains(err.Error(), x.want) {
				t.Errorf("%q: err = %v, want %q", x.yaml, err, x.want)
			}
		})
	}
	// A sampling temperature other than 1 is fine for evaluation alone.
	if _, err := ParseConfig(strings.NewReader("agent:\n  temperature: 0.7\nrun:\n  iterations: 0\n")); err != nil {
		t.Errorf("evaluation-only config at temperature 0.7: %v", err)
	}
}

// A former key is still read under its new name, with a deprecation
// notice (that the trainer logs, below); giving both is an error; the new
// key alone reads silently; a written config carries the new key only.
// rl.loss_mode is rl.loss_agg_mode; agent.observation_cap is
// agent.max_observation_tokens, the observation cap's one name (YAML,
// serve's JSON, the flag --max-observation-tokens, errors).
func TestDeprecatedKeyAliases(t *testing.T) {
	var c Config
	for _, r := range []struct {
		section, old, new, value string
		got                      func(Config) string
	}{
		{"rl", "loss_mode", "loss_agg_mode", "seq-mean-token-sum", func(c Config) string { return string(c.RL.LossAggMode) }},
		{"agent", "observation_cap", "max_observation_tokens", "40", func(c Config) string { return fmt.Sprint(c.Agent.MaxObservationTokens) }},
	} {
		doc := func(keys ...string) string {
			y := r.section + ":\n"
			for _, k := range keys {
				y += "  " + k + ": " + r.value + "\n"
			}
			return y
		}
		old, err := ParseConfig(strings.NewReader(doc(r.old)))
		if err != nil {
			t.Fatal(err)
		}
		notice := r.section + "." + r.old + " is deprecated, read as " + r.section + "." + r.new
		if r.got(old) != r.value || len(old.Deprecations) != 1 || !strings.Contains(old.Deprecations[0], notice) {
			t.Errorf("%s read as %q, notices %q", r.old, r.got(old), old.Deprecations)
		}
		y, err := old.YAML()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(y), r.new+": "+r.value) || strings.Contains(string(y), " "+r.old+":") {
			t.Errorf("written config:\n%s", y)
		}
		if n, err := ParseConfig(strings.NewReader(doc(r.new))); err != nil || r.got(n) != r.value || n.Deprecations != nil {
			t.Errorf("%s: %q, %v, notices %q", r.new, r.got(n), err, n.Deprecations)
		}
		_, err = ParseConfig(strings.NewReader(doc(r.old, r.new)))
		if err == nil || !strings.Contains(err.Error(), r.section+"."+r.old+" and "+r.section+"."+r.new) {
			t.Errorf("both keys: err = %v", err)
		}
		if r.old == "loss_mode" {
			c = old
		}
	}
	for yml, want := range map[string]string{
		"agent:\n  max_observation_tokens: -1\n": "agent.max_observation_tokens: -1",
		"agent:\n  context: 0\n":                 "agent.context: 0",
	} {
		if _, err := ParseConfig(strings.NewReader(yml)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", yml, err, want)
		}
	}
	// The trainer writes the notice where the run logs.
	c.Run.Dir, c.Run.Iterations, c.Run.EvalEpisodes = t.TempDir(), 0, 0
	c.Model = builtin.ModelConfig{Preset: "tiny", Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, FFN: 32, Precision: "fp32"}
	c.SFT.NoWarmStart()
	var log bytes.Buffer
	s, err := Build(c, nil, &log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Trainer.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "rl.loss_mode is deprecated") {
		t.Errorf("run log %q has no deprecation notice", log.String())
	}
}

// Absurdly large numbers in a run config are refused at load with an
// error naming the file, the field and the value (before, each was
// accepted: run.episode_timeout_s = 1e12 overflowed time.Duration,
// run.workers = 1e9 started a billion workers, model.dim = 1e8 sized the
// model from it, a vault knob failed only when the first task was built).
func TestConfigNumbersRangeChecked(t *testing.T) {
	for _, x := range []struct{ yaml, want string }{
		{"run:\n  episode_timeout_s: 1e12\n", "run.episode_timeout_s: 1e+12 is above the limit"},
		{"run:\n  workers: 1000000000\n", "run.workers: 1000000000 is above the limit"},
		{"run:\n  iterations: 100000000000\n", "run.iterations: 100000000000 is above the limit"},
		{"agent:\n  context: 1099511627776\n", "agent.context: 1099511627776 is above the limit"},
		{"agent:\n  max_turns: 1000000000000\n", "agent.max_turns: 1000000000000 is above the limit"},
		{"agent:\n  top_p: 1.5\n", "agent.top_p: 1.5 must be in [0, 1]"},
		{"run:\n  iterations: 0\nagent:\n  eval_temperature: 1e300\n", "agent.eval_temperature: 1e+300 is above the limit"},
		{"rl:\n  lr: 1e300\n", "rl.lr: 1e+300 is above the limit"},
		{"rl:\n  grad_clip: 1e300\n", "rl.grad_clip: 1e+300 is above the limit"},
		{"rl:\n  weight_decay: 5\n", "rl.weight_decay: 5 is above the limit 1"},
		{"sft:\n  batch_size: 10000000\n", "sft.batch_size: 10000000 is above the limit"},
		{"model:\n  dim: 100000000\n", "model.dim: 100000000 is above the limit"},
		{"model:\n  layers: 100000\n", "model.layers: 100000 is above the limit"},
		{"model:\n  rope_theta: 1e300\n", "model.rope_theta: 1e+300 is above the limit"},
		{"suite:\n  files: 1000000\n", "suite: files 1000000 not in 1…99"},
		{"suite:\n  noise_lines: -1\n", "suite: noise lines -1 not in 0…10000"},
	} {
		t.Run(strings.SplitN(x.want, ":", 2)[0], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "run.yaml")
			if err := os.WriteFile(path, []byte(x.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(path)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), x.want) {
				t.Errorf("%q: err = %v, want %s and %q", x.yaml, err, path, x.want)
			}
		})
	}
}

// A run config's suite section opens as the registered suite of its knobs,
// with the seed splits its seeds are checked against; knobs out of range
// are its error.
func TestSuiteConfigOpen(t *testing.T) {
	sc := DemoConfig().Suite
	name, s, err := sc.Open()
	if err != nil || name != "vault" {
		t.Fatalf("Open: %q %v", name, err)
	}
	sp, ok := s.(tasks.SeedSplitter)
	if !ok {
		t.Fatal("the suite has no seed splits")
	}
	if start, _, err := sp.Split("test"); err != nil || start != sc.TestSeedStart {
		t.Errorf("test split starts at %d (%v), the config at %d", start, err, sc.TestSeedStart)
	}
	sc.Files = 0
	if _, _, err := sc.Open(); err == nil || !strings.Contains(err.Error(), "files 0") {
		t.Errorf("files 0: %v", err)
	}
}

package train

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/rl"
)

// The rl section's estimator, clip and value-clip settings are rl's own
// structs: a training config accepts exactly what rl (and so `compactrl
// advantages`) accepts, and its error names the field under rl.
func TestRLSettingsValidatedByRL(t *testing.T) {
	for _, c := range []struct {
		name  string
		set   func(*RLConfig)
		field string // "" valid
	}{
		{"gamma 0 is a legal discount", func(c *RLConfig) { c.Gamma = 0 }, ""},
		{"gamma 1", func(c *RLConfig) { c.Gamma = 1 }, ""},
		{"gamma above 1", func(c *RLConfig) { c.Gamma = 1.5 }, "rl.gamma"},
		{"gamma negative", func(c *RLConfig) { c.Gamma = -0.1 }, "rl.gamma"},
		{"fixed lambda 0", func(c *RLConfig) { c.Alpha, c.Lambda = 0, 0 }, ""},
		{"fixed lambda", func(c *RLConfig) { c.Alpha, c.Lambda = 0, 0.95 }, ""},
		{"lambda beside alpha", func(c *RLConfig) { c.Lambda = 0.95 }, "rl.lambda"},
		{"lambda above 1", func(c *RLConfig) { c.Alpha, c.Lambda = 0, 2 }, "rl.lambda"},
		{"alpha negative", func(c *RLConfig) { c.Alpha = -1 }, "rl.alpha"},
		{"estimator", func(c *RLConfig) { c.Estimator = "ppo" }, "rl.estimator"},
		{"eps", func(c *RLConfig) { c.Eps = -1 }, "rl.eps"},
		{"clip_low 0", func(c *RLConfig) { c.ClipLow = 0 }, ""},
		{"clip_low 1", func(c *RLConfig) { c.ClipLow = 1 }, "rl.clip_low"},
		{"clip_high", func(c *RLConfig) { c.ClipHigh = -0.1 }, "rl.clip_high"},
		{"dual_clip", func(c *RLConfig) { c.DualClip = 0.5 }, "rl.dual_clip"},
		{"value_clip", func(c *RLConfig) { c.ValueClip = -1 }, "rl.value_clip"},
		{"loss_agg_mode", func(c *RLConfig) { c.LossAggMode = "sum" }, "rl.loss_agg_mode"},
		{"grpo group", func(c *RLConfig) { c.Estimator = rl.GRPO }, "rl.group_size"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			c.set(&cfg.RL)
			err := cfg.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
			} else if err == nil || !strings.HasPrefix(err.Error(), c.field+":") {
				t.Fatalf("error %v, want one starting %q", err, c.field+":")
			}
			// The same values mean the same to rl.
			rlErr := cfg.RL.AdvantageConfig.Validate()
			if rlErr == nil {
				rlErr = cfg.RL.PPOConfig.Validate()
			}
			if rlErr == nil {
				rlErr = cfg.RL.ValueConfig.Validate()
			}
			if rlErr != nil && (err == nil || !strings.HasSuffix(err.Error(), rlErr.Error())) {
				t.Errorf("rl says %v, the training config %v", rlErr, err)
			}
		})
	}
}

// The defaults are rl's: §1.7's estimator settings and the paper's clips.
func TestRLDefaultsAreRLs(t *testing.T) {
	c := DefaultConfig().RL
	if c.AdvantageConfig != rl.DefaultAdvantageConfig() || c.PPOConfig != rl.DefaultPPOConfig() {
		t.Fatalf("train defaults %+v %+v, rl's %+v %+v", c.AdvantageConfig, c.PPOConfig, rl.DefaultAdvantageConfig(), rl.DefaultPPOConfig())
	}
}

// A config decoded from YAML fills rl's structs under the rl keys.
func TestRLSectionDecodesIntoRLStructs(t *testing.T) {
	c := DefaultConfig()
	y := "rl:\n  gamma: 0\n  alpha: 0\n  lambda: 0.9\n  clip_low: 0.1\n  dual_clip: 3\n  value_clip: 0.5\n  eps: 0.01\n  loss_agg_mode: seq-mean-token-sum\n"
	if _, err := DecodeYAML([]byte(y), &c); err != nil {
		t.Fatal(err)
	}
	want := rl.AdvantageConfig{Estimator: rl.CrossGAE, Gamma: 0, Alpha: 0, Lambda: 0.9, Eps: 0.01, MaskOverlong: true}
	if c.RL.AdvantageConfig != want || c.RL.ClipLow != 0.1 || c.RL.DualClip != 3 || c.RL.ValueClip != 0.5 || c.RL.LossAggMode != rl.SeqMeanTokenSum {
		t.Fatalf("decoded %+v", c.RL)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if math.IsNaN(c.RL.LambdaFor(10)) || c.RL.LambdaFor(10) != 0.9 {
		t.Errorf("λ = %v, want the fixed 0.9", c.RL.LambdaFor(10))
	}
}

// DecodeYAML is strict and names the field: unknown keys, non-integer
// values of integer fields (inlined structs included), both names of a
// renamed key; an empty document changes nothing.
func TestDecodeYAMLNamesTheField(t *testing.T) {
	for _, c := range []struct{ yml, want string }{
		{"agent:\n  context: 512.5\n", `agent.context: "512.5" is not an integer`},
		{"agent:\n  max_turns: 3.5\n", `agent.max_turns: "3.5" is not an integer`},
		{"rl:\n  group_size: 2.5\n", `rl.group_size: "2.5" is not an integer`},
		{"rl:\n  nope: 1\n", "field nope not found"},
		{"rl:\n  loss_mode: token-mean\n  loss_agg_mode: token-mean\n", "rl.loss_mode and rl.loss_agg_mode are the same setting"},
	} {
		c0 := DefaultConfig()
		if _, err := DecodeYAML([]byte(c.yml), &c0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yml, err, c.want)
		}
	}
	c := DefaultConfig()
	if notes, err := DecodeYAML([]byte("  \n"), &c); err != nil || notes != nil || !reflect.DeepEqual(c, DefaultConfig()) {
		t.Errorf("empty document: %v %v", notes, err)
	}
}

// CheckFinite names a NaN or infinite float by its YAML path, through
// inlined structs (rl's estimator settings, the agent loop's).
func TestCheckFiniteNamesThePath(t *testing.T) {
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.RL.Gamma = math.NaN() }, "rl.gamma: NaN"},
		{func(c *Config) { c.RL.ClipHigh = math.Inf(1) }, "rl.clip_high: +Inf"},
		{func(c *Config) { c.Agent.Temperature = math.Inf(-1) }, "agent.temperature: -Inf"},
		{func(c *Config) { c.Agent.EvalTemperature = math.NaN() }, "agent.eval_temperature: NaN"},
		{func(c *Config) { c.SFT.LR = math.NaN() }, "sft.lr: NaN"},
	} {
		cfg := DefaultConfig()
		c.set(&cfg)
		if err := CheckFinite(cfg); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("CheckFinite: %v, want %q", err, c.want)
		}
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
	}
	if err := CheckFinite(DefaultConfig()); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// Each setting's bounds are declared once (Config.ints, Config.floats):
// below and above them, the error names the setting by its YAML path.
func TestValidateBoundsNameTheField(t *testing.T) {
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.RL.LR = -1 }, "rl.lr: -1 must not be negative"},
		{func(c *Config) { c.RL.GradClip = -1 }, "rl.grad_clip: -1 must not be negative"},
		{func(c *Config) { c.Run.EpisodeTimeoutS = -1 }, "run.episode_timeout_s: -1 must not be negative"},
		{func(c *Config) { c.Run.Workers = 0 }, "run.workers: 0 must be positive"},
		{func(c *Config) { c.Run.Workers = MaxBatch + 1 }, fmt.Sprintf("run.workers: %d is above the limit %d", MaxBatch+1, MaxBatch)},
		{func(c *Config) { c.SFT.Steps = -2 }, "sft.steps: -2 must not be negative"},
		{func(c *Config) { c.Agent.Context = 0 }, "agent.context: 0 must be positive"},
	} {
		cfg := DefaultConfig()
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || err.Error() != c.want {
			t.Errorf("%v, want %s", err, c.want)
		}
	}
}

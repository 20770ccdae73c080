package train

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"

	"go.yaml.in/yaml/v3"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/internal/field"
	"github.com/compactrl/compactrl/internal/override"
	"github.com/compactrl/compactrl/rl"
)

// Config is every setting the Trainer reads: the run's seed, the task
// seeds of the suite it trains on, the agent loop, the supervised warm
// start, the RL method and the run itself. A recipe's config (package
// recipe: the built-in vault suite and model) embeds these sections beside
// its own (model, suite) and hands the Trainer this part of it.
type Config struct {
	Seed  int64       `yaml:"seed"`
	Seeds Seeds       `yaml:"suite"`
	Agent AgentConfig `yaml:"agent"`
	SFT   SFTConfig   `yaml:"sft"`
	RL    RLConfig    `yaml:"rl"`
	Run   RunConfig   `yaml:"run"`
	// Deprecations are the notices of reading the config (a former key
	// name used); the Trainer writes them to its log.
	Deprecations []string `yaml:"-"`
}

// Seeds splits a suite's task seeds: [TrainSeedStart, TestSeedStart) are
// training tasks; [TestSeedStart, TestSeedStart+Run.EvalEpisodes) are held
// out.
type Seeds struct {
	TrainSeedStart int64 `yaml:"train_seed_start"`
	TestSeedStart  int64 `yaml:"test_seed_start"`
}

// AgentConfig is the compaction-aware agent loop (docs/design.md §1): the
// loop's own agent.Config (context, reserve, keep_last, max_compactions,
// max_turns, max_action_tokens, max_summary_tokens, max_observation_tokens,
// temperature, no_compaction, the prompts, …) inlined under the same keys,
// and the settings only training has.
type AgentConfig struct {
	agent.Config    `yaml:",inline"`
	EvalTemperature float64 `yaml:"eval_temperature"` // 0: greedy evaluation
}

// SFTConfig is the supervised warm start on the scripted expert.
type SFTConfig struct {
	Episodes  int     `yaml:"episodes"`   // expert demonstrations
	Steps     int     `yaml:"steps"`      // optimiser steps
	BatchSize int     `yaml:"batch_size"` // segments per step
	LR        float64 `yaml:"lr"`
	ExpertP   float64 `yaml:"expert_p"` // probability the expert's summary keeps each fact
	// LMLoss trains every token of the demonstrations (prompts, template
	// and observation tokens too), not only the expert's outputs: a
	// language-model warm start for a randomly initialised policy, which
	// otherwise has too little signal to learn to copy facts.
	LMLoss bool `yaml:"lm_loss"`
	// CopySteps optimiser steps of induction pretraining come first:
	// language-model loss on the second copy of a window w of
	// demonstration tokens in w ⊕ gap ⊕ w, at most CopyLen tokens long, so
	// that a randomly initialised policy learns to copy from its context
	// before it is asked to copy keys and values into summaries (0: none).
	CopySteps int `yaml:"copy_steps"`
	CopyLen   int `yaml:"copy_len"`
	CopyBatch int `yaml:"copy_batch"` // sequences a copy step (0: batch_size)
}

// RLConfig is the method: rollouts, advantages, loss and optimisation.
// The settings of the estimator (estimator, gamma, alpha, lambda, eps,
// group_by_task, mask_overlong, scaled_returns), of the PPO clip
// (clip_low, clip_high, dual_clip) and of the value clip (value_clip) are
// package rl's own structs, inlined under the same keys and validated by
// rl (docs/design.md §1.7–1.10); the rest are the trainer's.
type RLConfig struct {
	rl.AdvantageConfig `yaml:",inline"`
	rl.PPOConfig       `yaml:",inline"`
	rl.ValueConfig     `yaml:",inline"`
	GroupSize          int            `yaml:"group_size"`       // rollouts per task (grpo needs > 1)
	LossAggMode        rl.Aggregation `yaml:"loss_agg_mode"`    // one of rl.LossAggModes() (verl's loss_agg_mode; formerly loss_mode)
	SummaryTraining    bool           `yaml:"summary_training"` // false masks summary tokens out of the loss
	PPOEpochs          int            `yaml:"ppo_epochs"`       // passes over one iteration's rollouts
	MiniBatches        int            `yaml:"mini_batches"`     // optimiser steps per epoch
	MicroBatch         int            `yaml:"micro_batch"`      // segments per forward/backward (memory only: never changes the update)
	LR                 float64        `yaml:"lr"`
	WarmupSteps        int            `yaml:"warmup_steps"`
	WeightDecay        float64        `yaml:"weight_decay"`
	GradClip           float64        `yaml:"grad_clip"`
	CriticLR           float64        `yaml:"critic_lr"`
	CriticWarmup       int            `yaml:"critic_warmup"` // value-only steps before the first policy update
	ValueUpdates       int            `yaml:"value_updates"` // value steps per policy step
}

// validate checks the rl section: rl's own structs by rl's Validate, the
// trainer's settings here; errors name the field by its YAML path.
func (c RLConfig) validate(episodes int) error {
	for _, v := range []interface{ Validate() error }{c.AdvantageConfig, c.PPOConfig, c.ValueConfig} {
		if err := v.Validate(); err != nil {
			return field.Under("rl", err)
		}
	}
	if _, err := rl.ParseAggregation(string(c.LossAggMode)); err != nil {
		return field.Under("rl.loss_agg_mode", err)
	}
	switch {
	case !c.Estimator.UsesValues() && c.GroupSize < 2:
		return field.Errorf("rl.group_size", "%d must be at least 2 for estimator %s", c.GroupSize, c.Estimator)
	case episodes%c.GroupSize != 0:
		return field.Errorf("run.episodes", "%d must be a multiple of rl.group_size %d", episodes, c.GroupSize)
	}
	return nil
}

// RunConfig is the run: length, evaluation, workers, outputs.
type RunConfig struct {
	Dir             string `yaml:"dir"`
	Iterations      int    `yaml:"iterations"`
	Episodes        int    `yaml:"episodes"` // rollouts per iteration
	Workers         int    `yaml:"workers"`  // concurrent rollout workers
	EvalEvery       int    `yaml:"eval_every"`
	EvalEpisodes    int    `yaml:"eval_episodes"` // held-out seeds per evaluation
	CheckpointEvery int    `yaml:"checkpoint_every"`
	// EpisodeTimeoutS bounds one episode's wall time in seconds (0: none);
	// an episode past it is infra_error and masked, like any failure of
	// the harness.
	EpisodeTimeoutS float64 `yaml:"episode_timeout_s"`
	Threads         int     `yaml:"threads"` // compute threads for the built-in model; 0: all cores
	// EvalRange names the task seeds every evaluation of the run plays:
	// "dev" (the development range [suite.test_seed_start,
	// sealed_seed_start), for every choice of settings; empty means dev)
	// or "test" (the sealed test range from sealed_seed_start, for final
	// tables only). Evaluation task j is the range's start + EvalSeedOffset
	// + j, so runs with the same range, offset and eval_episodes play the
	// same tasks (paired comparisons).
	EvalRange string `yaml:"eval_range"`
	// SealedSeedStart is the first task seed of the sealed test range (0:
	// DefaultSealedSeedStart).
	SealedSeedStart int64 `yaml:"sealed_seed_start"`
	// EvalSeedOffset moves the evaluation tasks within their range.
	EvalSeedOffset int64 `yaml:"eval_seed_offset"`
}

// The evaluation ranges of RunConfig.EvalRange.
const (
	RangeDev  = "dev"
	RangeTest = "test"
	// DefaultSealedSeedStart is where the sealed test range starts when
	// run.sealed_seed_start is 0: task seeds from 5,000,000 on were never
	// evaluated before the range was sealed (earlier results used
	// 1,000,000 + j, now the development range).
	DefaultSealedSeedStart int64 = 5_000_000
	// maxSeedOffset bounds the range settings so that no task seed
	// overflows.
	maxSeedOffset = 1 << 52
)

// EvalRangeName is the evaluation range's name: dev or test.
func (c Config) EvalRangeName() string {
	if c.Run.EvalRange == "" {
		return RangeDev
	}
	return c.Run.EvalRange
}

// SealedStart is the first task seed of the sealed test range.
func (c Config) SealedStart() int64 {
	if c.Run.SealedSeedStart == 0 {
		return DefaultSealedSeedStart
	}
	return c.Run.SealedSeedStart
}

// EvalSeedStart is the task seed of evaluation episode 0: the start of
// the evaluation range plus run.eval_seed_offset.
func (c Config) EvalSeedStart() int64 {
	if c.EvalRangeName() == RangeTest {
		return c.SealedStart() + c.Run.EvalSeedOffset
	}
	return c.Seeds.TestSeedStart + c.Run.EvalSeedOffset
}

// validateEvalRange checks that the evaluation range is known and that a
// development evaluation stays below the sealed test range.
func (c Config) validateEvalRange() error {
	switch r := c.EvalRangeName(); {
	case r != RangeDev && r != RangeTest:
		return field.Errorf("run.eval_range", "%q must be dev or test", c.Run.EvalRange)
	case c.Run.SealedSeedStart < 0:
		return field.Errorf("run.sealed_seed_start", "%d must not be negative", c.Run.SealedSeedStart)
	case c.SealedStart() <= c.Seeds.TestSeedStart:
		return field.Errorf("run.sealed_seed_start", "%d must be above suite.test_seed_start %d (the development range lies between)", c.SealedStart(), c.Seeds.TestSeedStart)
	case c.Run.EvalSeedOffset < 0 || c.Run.EvalSeedOffset > maxSeedOffset:
		return field.Errorf("run.eval_seed_offset", "%d must be in [0, %d]", c.Run.EvalSeedOffset, int64(maxSeedOffset))
	case c.Run.SealedSeedStart > maxSeedOffset:
		return field.Errorf("run.sealed_seed_start", "%d must be at most %d", c.Run.SealedSeedStart, int64(maxSeedOffset))
	case r == RangeDev && c.EvalSeedStart()+int64(c.Run.EvalEpisodes) > c.SealedStart():
		return fmt.Errorf("run.eval_seed_offset %d + eval_episodes %d: development evaluation would reach the sealed test range at %d", c.Run.EvalSeedOffset, c.Run.EvalEpisodes, c.SealedStart())
	}
	return nil
}

// DefaultConfig is the demo-sized default: the paper's method settings with
// a run small enough for two cores.
func DefaultConfig() Config {
	return Config{
		Seed:  1,
		Seeds: Seeds{TrainSeedStart: 0, TestSeedStart: 1_000_000},
		Agent: AgentConfig{Config: agent.DefaultConfig(), EvalTemperature: 0},
		SFT:   SFTConfig{Episodes: 64, Steps: 200, BatchSize: 8, LR: 3e-3, ExpertP: 0.6, CopyLen: 128},
		RL: RLConfig{
			AdvantageConfig: rl.DefaultAdvantageConfig(), PPOConfig: rl.DefaultPPOConfig(),
			ValueConfig: rl.ValueConfig{ValueClip: 0.2},
			GroupSize:   1, LossAggMode: rl.TokenMean, SummaryTraining: true,
			PPOEpochs: 1, MiniBatches: 1, MicroBatch: 4,
			LR: 1e-4, WarmupSteps: 0, WeightDecay: 0, GradClip: 1,
			CriticLR: 1e-3, CriticWarmup: 50, ValueUpdates: 2,
		},
		Run: RunConfig{Dir: "runs/default", Iterations: 10, Episodes: 16, Workers: 2, EvalEvery: 5, EvalEpisodes: 32, CheckpointEvery: 5},
	}
}

// renamed are the former keys still read, by YAML path: DecodeYAML reads
// each under its new name, with a deprecation notice.
var renamed = []struct{ section, old, new string }{
	{"rl", "loss_mode", "loss_agg_mode"},
	{"agent", "observation_cap", "max_observation_tokens"},
}

// DecodeYAML decodes the YAML document b over dst (a pointer to a config
// struct holding its defaults) strictly: an unknown field is an error
// naming it, and so is a non-integer value of an integer field. Fields
// left out keep their values. A former key name (renamed) is read as its
// new one, with a notice in deprecated; both names at once are an error.
func DecodeYAML(b []byte, dst any) (deprecated []string, err error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	if deprecated, err = renameKeys(doc.Content[0]); err != nil {
		return nil, err
	}
	if deprecated != nil {
		if b, err = yaml.Marshal(&doc); err != nil {
			return nil, err
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(dst); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return deprecated, checkIntegers(doc.Content[0], reflect.TypeOf(dst).Elem(), "")
}

// renameKeys rewrites the former keys of the document's top mapping root
// to their new names in place and returns a notice for each.
func renameKeys(root *yaml.Node) ([]string, error) {
	var notes []string
	for _, r := range renamed {
		j := override.Lookup(root, r.section)
		if j < 0 {
			continue
		}
		sec := root.Content[j+1]
		k := override.Lookup(sec, r.old)
		if k < 0 {
			continue
		}
		if override.Lookup(sec, r.new) >= 0 {
			return nil, fmt.Errorf("%s.%s and %s.%s are the same setting (%s is its former name): give only %s.%s", r.section, r.old, r.section, r.new, r.old, r.section, r.new)
		}
		sec.Content[k].Value = r.new
		notes = append(notes, fmt.Sprintf("config: %s.%s is deprecated, read as %s.%s (rename the key)", r.section, r.old, r.section, r.new))
	}
	return notes, nil
}

// checkIntegers reports an integer field whose YAML value is not an
// integer literal (yaml.v3 would truncate 512.5 to 512 without a word).
func checkIntegers(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind != yaml.MappingNode || t.Kind() != reflect.Struct {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i].Value, n.Content[i+1]
		for j := 0; j < t.NumField(); j++ {
			f := t.Field(j)
			if name, inline := override.YAMLKey(f); inline {
				// The inlined struct's keys are this mapping's.
				if err := checkIntegers(&yaml.Node{Kind: yaml.MappingNode, Content: n.Content[i : i+2]}, f.Type, path); err != nil {
					return err
				}
				continue
			} else if name != key {
				continue
			}
			at := field.Key(path, key)
			switch f.Type.Kind() {
			case reflect.Struct:
				if err := checkIntegers(val, f.Type, at); err != nil {
					return err
				}
			case reflect.Int, reflect.Int64:
				if val.Kind == yaml.ScalarNode && val.ShortTag() != "!!int" {
					return field.Errorf(at, "%q is not an integer", val.Value)
				}
			}
		}
	}
	return nil
}

// CheckFinite reports the first float field of v (a config struct) that is
// NaN or infinite, by its YAML path.
func CheckFinite(v any) error { return checkFinite(reflect.ValueOf(v), "") }

func checkFinite(v reflect.Value, path string) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name, inline := override.YAMLKey(t.Field(i))
		at := field.Key(path, name)
		if inline {
			at = path
		}
		switch f := v.Field(i); f.Kind() {
		case reflect.Struct:
			if err := checkFinite(f, at); err != nil {
				return err
			}
		case reflect.Float64:
			if x := f.Float(); math.IsNaN(x) || math.IsInf(x, 0) {
				return field.Errorf(at, "%g is not a finite number", x)
			}
		}
	}
	return nil
}

// YAML encodes the config (all fields, so a run directory records exactly
// what ran).
func (c Config) YAML() ([]byte, error) { return yaml.Marshal(c) }

// Upper bounds of the run config's counts and rates: far past any real
// run, small enough that nothing overflows (a timeout in nanoseconds) or
// is sized absurdly (workers, batches) before the run starts.
const (
	MaxSteps     = 1 << 24 // optimiser steps, iterations, episodes of a phase
	MaxBatch     = 1 << 16 // batch sizes, group size, workers, threads
	maxTimeoutS  = 30 * 24 * 3600
	maxLR        = 10
	maxClipOrMag = 1e6 // grad_clip
)

// floats are the config's float settings with their bounds, by YAML path.
func (c Config) floats() []field.Float {
	return []field.Float{
		{Path: "agent.eval_temperature", V: c.Agent.EvalTemperature, Max: agent.MaxTemperature},
		{Path: "sft.lr", V: c.SFT.LR, Max: maxLR}, {Path: "rl.lr", V: c.RL.LR, Max: maxLR}, {Path: "rl.critic_lr", V: c.RL.CriticLR, Max: maxLR},
		{Path: "rl.grad_clip", V: c.RL.GradClip, Max: maxClipOrMag}, {Path: "rl.weight_decay", V: c.RL.WeightDecay, Max: 1},
		{Path: "run.episode_timeout_s", V: c.Run.EpisodeTimeoutS, Max: maxTimeoutS},
	}
}

// ints are the config's integer settings with their bounds, by YAML path.
// sft.copy_len has no lower bound of its own: it matters only with
// sft.copy_steps > 0 (Validate).
func (c Config) ints() []field.Int {
	return []field.Int{
		{Path: "sft.episodes", V: c.SFT.Episodes, Max: MaxSteps}, {Path: "sft.steps", V: c.SFT.Steps, Max: MaxSteps},
		{Path: "sft.batch_size", V: c.SFT.BatchSize, Min: 1, Max: MaxBatch}, {Path: "sft.copy_steps", V: c.SFT.CopySteps, Max: MaxSteps},
		{Path: "sft.copy_len", V: c.SFT.CopyLen, Min: math.MinInt, Max: agent.MaxContextTokens}, {Path: "sft.copy_batch", V: c.SFT.CopyBatch, Max: MaxBatch},
		{Path: "rl.group_size", V: c.RL.GroupSize, Min: 1, Max: MaxBatch}, {Path: "rl.ppo_epochs", V: c.RL.PPOEpochs, Min: 1, Max: MaxBatch},
		{Path: "rl.mini_batches", V: c.RL.MiniBatches, Min: 1, Max: MaxBatch}, {Path: "rl.micro_batch", V: c.RL.MicroBatch, Min: 1, Max: MaxBatch},
		{Path: "rl.warmup_steps", V: c.RL.WarmupSteps, Max: MaxSteps}, {Path: "rl.critic_warmup", V: c.RL.CriticWarmup, Max: MaxSteps},
		{Path: "rl.value_updates", V: c.RL.ValueUpdates, Max: MaxBatch},
		{Path: "run.iterations", V: c.Run.Iterations, Max: MaxSteps}, {Path: "run.episodes", V: c.Run.Episodes, Min: 1, Max: MaxSteps},
		{Path: "run.workers", V: c.Run.Workers, Min: 1, Max: MaxBatch}, {Path: "run.eval_every", V: c.Run.EvalEvery, Max: MaxSteps},
		{Path: "run.eval_episodes", V: c.Run.EvalEpisodes, Max: MaxSteps}, {Path: "run.checkpoint_every", V: c.Run.CheckpointEvery, Max: MaxSteps},
		{Path: "run.threads", V: c.Run.Threads, Max: MaxBatch},
	}
}

// Validate reports the first unusable field by its YAML path: NaN and ±Inf
// in any float, values below their range, and values above their bounds.
func (c Config) Validate() error {
	if err := checkFinite(reflect.ValueOf(c), ""); err != nil {
		return err
	}
	if err := c.Agent.Validate(); err != nil {
		// The first of the agent's errors, as this Validate reports one.
		if fe := (*field.Error)(nil); errors.As(err, &fe) {
			err = fe
		}
		return field.Under("agent", err)
	}
	for _, f := range c.floats() {
		if err := f.Check(); err != nil {
			return err
		}
	}
	for _, f := range c.ints() {
		if err := f.Check(); err != nil {
			return err
		}
	}
	if err := c.RL.validate(c.Run.Episodes); err != nil {
		return err
	}
	if err := c.validateEvalRange(); err != nil {
		return err
	}
	switch {
	case c.Seeds.TestSeedStart <= c.Seeds.TrainSeedStart:
		return field.Errorf("suite.test_seed_start", "%d must be above train_seed_start %d (held-out seeds)", c.Seeds.TestSeedStart, c.Seeds.TrainSeedStart)
	case c.Run.Iterations > 0 && c.Agent.Temperature != 1:
		// The sampler's log-probs and the scorer's are at temperature 1: the
		// PPO ratio describes the sampling policy only there.
		return field.Errorf("agent.temperature", "%g must be 1 for RL (run.iterations %d): the policy's log-probs, and so the PPO ratio, are those of temperature 1; eval_temperature may differ", c.Agent.Temperature, c.Run.Iterations)
	case c.Run.Iterations > 0 && c.Agent.TopP != 1:
		// Likewise: nucleus sampling is not the policy whose log-probs the
		// trainer scores.
		return field.Errorf("agent.top_p", "%g must be 1 for RL (run.iterations %d): the PPO ratio needs the policy's own distribution", c.Agent.TopP, c.Run.Iterations)
	case c.SFT.ExpertP < 0 || c.SFT.ExpertP > 1:
		return field.Errorf("sft.expert_p", "%g must be in [0, 1]", c.SFT.ExpertP)
	case c.SFT.CopySteps > 0 && c.SFT.CopyLen < 2:
		return field.Errorf("sft.copy_len", "%d must be at least 2 when sft.copy_steps > 0", c.SFT.CopyLen)
	case c.SFT.Steps > 0 && c.SFT.Episodes == 0:
		return field.Errorf("sft.episodes", "must be positive when sft.steps > 0")
	case c.Run.Dir == "":
		return field.Errorf("run.dir", "must be set")
	}
	return nil
}

// NoWarmStart turns the trainer's warm-start phases off (copy and SFT): a
// run that starts from a base policy trains it by RL only (a recipe turns
// its ExtraExamples off too).
func (c *SFTConfig) NoWarmStart() {
	c.Steps, c.CopySteps = 0, 0
}

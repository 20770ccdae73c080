package builtin

import (
	"fmt"
	"slices"
	"strings"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/internal/field"
	"github.com/compactrl/compactrl/model"
)

// ModelConfig is a run's model section: a named preset of the built-in
// model, optionally with fields overridden (0 keeps the preset's).
type ModelConfig struct {
	Preset    string `yaml:"preset"`
	Tokenizer string `yaml:"tokenizer"` // tokenizer.json path; "" trains/uses the suite's built-in one
	Dim       int    `yaml:"dim"`
	Layers    int    `yaml:"layers"`
	Heads     int    `yaml:"heads"`
	KVHeads   int    `yaml:"kv_heads"`
	FFN       int    `yaml:"ffn"`
	MaxSeq    int    `yaml:"max_seq"`
	// RopeTheta is RoPE's base (HF rope_theta; 0 keeps the preset's). A
	// large base leaves more of a small head's dimensions slowly rotating,
	// so that attention can match content across the whole window.
	RopeTheta float64 `yaml:"rope_theta"`
	// InitRange is the std of the random initial weights (HF
	// initializer_range; 0: 0.02). About 0.5/√dim lets a nano policy learn
	// to copy from its context in hundreds of steps instead of thousands.
	InitRange float64 `yaml:"init_range"`
	Init      string  `yaml:"init"` // checkpoint directory to start from instead of random weights
	// Precision is the precision of the linear layers' and the head's
	// products: "fp32", or "bf16" (bfloat16 inputs, float32 sums and
	// master weights: model.Model.BF16), in training and sampling alike.
	Precision string `yaml:"precision"`
}

// Precisions are model.precision's values.
var Precisions = []string{"fp32", "bf16"}

// Bounds of the model section's floats (its dimensions have format's).
const (
	maxRopeTheta = 1e12
	maxInitRange = 10
)

// Validate reports the first unusable field by its YAML path under
// "model.".
func (c ModelConfig) Validate() error {
	at := func(k string) string { return field.Key("model", k) }
	for _, f := range []field.Int{
		{Path: at("dim"), V: c.Dim, Max: format.MaxHiddenSize}, {Path: at("layers"), V: c.Layers, Max: format.MaxHiddenLayers},
		{Path: at("heads"), V: c.Heads, Max: format.MaxAttentionHeads}, {Path: at("kv_heads"), V: c.KVHeads, Max: format.MaxAttentionHeads},
		{Path: at("ffn"), V: c.FFN, Max: format.MaxIntermediateSize}, {Path: at("max_seq"), V: c.MaxSeq, Max: format.MaxPositionEmbeddingsCap},
	} {
		if err := f.Check(); err != nil {
			return err
		}
	}
	if c.Preset == "" {
		return field.Errorf(at("preset"), "must be set")
	}
	if !slices.Contains(Precisions, c.Precision) {
		return field.Errorf(at("precision"), "%q is not one of %s", c.Precision, strings.Join(Precisions, ", "))
	}
	for _, f := range []field.Float{
		{Path: at("rope_theta"), V: c.RopeTheta, Max: maxRopeTheta}, {Path: at("init_range"), V: c.InitRange, Max: maxInitRange},
	} {
		if err := f.Check(); err != nil {
			return err
		}
	}
	return nil
}

// Arch resolves the preset with its overrides; the vocabulary is the
// tokenizer's and the longest sequence at least the context window.
func Arch(c ModelConfig, vocab, window int) (model.Config, error) {
	mc, err := model.Preset(c.Preset)
	if err != nil {
		return mc, field.Under("model.preset", err)
	}
	mc.Vocab = vocab
	for _, o := range []struct {
		dst *int
		v   int
	}{{&mc.Dim, c.Dim}, {&mc.Layers, c.Layers}, {&mc.Heads, c.Heads}, {&mc.KVHeads, c.KVHeads}, {&mc.FFN, c.FFN}, {&mc.MaxSeq, c.MaxSeq}} {
		if o.v > 0 {
			*o.dst = o.v
		}
	}
	if c.RopeTheta > 0 {
		mc.RopeTheta = c.RopeTheta
	}
	if c.InitRange > 0 {
		mc.InitRange = c.InitRange
	}
	if mc.MaxSeq < window {
		if c.MaxSeq > 0 {
			return mc, field.Errorf("model.max_seq", "%d is below agent.context %d", c.MaxSeq, window)
		}
		mc.MaxSeq = window
	}
	if err := mc.Validate(); err != nil {
		return mc, field.Under("model", err)
	}
	return mc, nil
}

// NewModel is the run's policy model: Init's checkpoint when set (a policy
// with vocabulary vocab and room for window tokens), else random weights of
// Arch drawn from seed.
func NewModel(c ModelConfig, vocab, window int, seed int64) (*model.Model, error) {
	if c.Init != "" {
		m, err := model.Load(c.Init)
		if err != nil {
			return nil, fmt.Errorf("model.init: %w", err)
		}
		if m.Value || m.Cfg.Vocab != vocab || m.Cfg.MaxSeq < window {
			return nil, fmt.Errorf("model.init %s: need a policy with vocab %d and max_seq ≥ %d, have vocab %d, max_seq %d, critic %v", c.Init, vocab, window, m.Cfg.Vocab, m.Cfg.MaxSeq, m.Value)
		}
		m.BF16 = c.Precision == "bf16"
		return m, nil
	}
	arch, err := Arch(c, vocab, window)
	if err != nil {
		return nil, err
	}
	m, err := model.New(arch, seed, false)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m.BF16 = c.Precision == "bf16"
	return m, nil
}

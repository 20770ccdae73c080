package format

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// ConfigFile is the name of the Hugging Face model configuration in a checkpoint directory.
const ConfigFile = "config.json"

// LlamaConfig is the Hugging Face config.json of a LlamaForCausalLM model.
// Fields follow transformers' LlamaConfig names. HeadDim 0 means
// HiddenSize / NumAttentionHeads.
type LlamaConfig struct {
	Architectures         []string `json:"architectures"`
	ModelType             string   `json:"model_type"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumKeyValueHeads      int      `json:"num_key_value_heads"`
	HeadDim               int      `json:"head_dim,omitempty"`
	VocabSize             int      `json:"vocab_size"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	RMSNormEps            float64  `json:"rms_norm_eps"`
	RopeTheta             float64  `json:"rope_theta"`
	TieWordEmbeddings     bool     `json:"tie_word_embeddings"`
	BosTokenID            *int     `json:"bos_token_id,omitempty"`
	EosTokenID            *int     `json:"eos_token_id,omitempty"`
	PadTokenID            *int     `json:"pad_token_id,omitempty"`
	TorchDtype            string   `json:"torch_dtype"`
	HiddenAct             string   `json:"hidden_act"`
	AttentionBias         bool     `json:"attention_bias"`
	MLPBias               bool     `json:"mlp_bias"`
	AttentionDropout      float64  `json:"attention_dropout"`
	InitializerRange      float64  `json:"initializer_range"`
	PretrainingTP         int      `json:"pretraining_tp"`
	UseCache              bool     `json:"use_cache"`
	// RopeScaling is kept verbatim; the built-in model supports none.
	RopeScaling json.RawMessage `json:"rope_scaling,omitempty"`
	// TransformersVersion is informational.
	TransformersVersion string `json:"transformers_version,omitempty"`
	// EosTokenIDs holds every id when config.json gives eos_token_id as a
	// list (Llama 3 style); EosTokenID is then its first element.
	EosTokenIDs []int `json:"-"`
}

// NewLlamaConfig returns a config with the architecture fields transformers
// expects set to their LlamaForCausalLM values and the given sizes.
func NewLlamaConfig(vocab, hidden, intermediate, layers, heads, kvHeads, maxPos int) LlamaConfig {
	return LlamaConfig{
		Architectures:         []string{"LlamaForCausalLM"},
		ModelType:             "llama",
		HiddenSize:            hidden,
		IntermediateSize:      intermediate,
		NumAttentionHeads:     heads,
		NumHiddenLayers:       layers,
		NumKeyValueHeads:      kvHeads,
		VocabSize:             vocab,
		MaxPositionEmbeddings: maxPos,
		RMSNormEps:            1e-5,
		RopeTheta:             10000,
		TorchDtype:            "float32",
		HiddenAct:             "silu",
		InitializerRange:      0.02,
		PretrainingTP:         1,
		UseCache:              true,
	}
}

// HeadDimension returns HeadDim, or HiddenSize/NumAttentionHeads when unset.
func (c LlamaConfig) HeadDimension() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	if c.NumAttentionHeads == 0 {
		return 0
	}
	return c.HiddenSize / c.NumAttentionHeads
}

// KVHeads returns NumKeyValueHeads, or NumAttentionHeads when unset (as transformers does).
func (c LlamaConfig) KVHeads() int {
	if c.NumKeyValueHeads > 0 {
		return c.NumKeyValueHeads
	}
	return c.NumAttentionHeads
}

// Validate checks the fields the built-in model and the GGUF exporter rely on.
func (c LlamaConfig) Validate() error {
	var errs []error
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	if c.ModelType != "llama" {
		errs = append(errs, fmt.Errorf("model_type %q, want \"llama\"", c.ModelType))
	}
	pos("hidden_size", c.HiddenSize)
	pos("intermediate_size", c.IntermediateSize)
	pos("num_attention_heads", c.NumAttentionHeads)
	pos("num_hidden_layers", c.NumHiddenLayers)
	pos("vocab_size", c.VocabSize)
	pos("max_position_embeddings", c.MaxPositionEmbeddings)
	if c.NumAttentionHeads > 0 && c.HeadDim == 0 && c.HiddenSize%c.NumAttentionHeads != 0 {
		errs = append(errs, fmt.Errorf("hidden_size %d not divisible by num_attention_heads %d", c.HiddenSize, c.NumAttentionHeads))
	}
	if kv := c.KVHeads(); kv <= 0 || (c.NumAttentionHeads > 0 && c.NumAttentionHeads%kv != 0) {
		errs = append(errs, fmt.Errorf("num_key_value_heads %d must divide num_attention_heads %d", kv, c.NumAttentionHeads))
	}
	if hd := c.HeadDimension(); hd%2 != 0 {
		errs = append(errs, fmt.Errorf("head dimension %d must be even for RoPE", hd))
	}
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		errs = append(errs, fmt.Errorf("hidden_act %q unsupported, want \"silu\"", c.HiddenAct))
	}
	if !(c.RMSNormEps > 0) {
		errs = append(errs, fmt.Errorf("rms_norm_eps must be positive, got %g", c.RMSNormEps))
	}
	if !(c.RopeTheta > 0) {
		errs = append(errs, fmt.Errorf("rope_theta must be positive, got %g", c.RopeTheta))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"initializer_range", c.InitializerRange}, {"attention_dropout", c.AttentionDropout}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			errs = append(errs, fmt.Errorf("%s must be a finite number ≥ 0, got %g", f.name, f.v))
		}
	}
	if c.AttentionBias || c.MLPBias {
		errs = append(errs, errors.New("attention_bias / mlp_bias are unsupported"))
	}
	return errors.Join(errs...)
}

// WriteConfig writes c as dir/config.json (indented, trailing newline). A
// non-finite field (JSON has no NaN) is an error naming the file and field.
func WriteConfig(dir string, c LlamaConfig) error {
	path := filepath.Join(dir, ConfigFile)
	for _, f := range []struct {
		name string
		v    float64
	}{{"rms_norm_eps", c.RMSNormEps}, {"rope_theta", c.RopeTheta}, {"initializer_range", c.InitializerRange}, {"attention_dropout", c.AttentionDropout}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("write config %s: %s is %v (JSON has no such number)", path, f.name, f.v)
		}
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("write config %s: %w", path, err)
	}
	b = append(b, '\n')
	return writeAtomic(filepath.Join(dir, ConfigFile), func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// ReadConfig reads dir/config.json. Missing optional fields take
// transformers' defaults (rms_norm_eps 1e-6, rope_theta 10000, hidden_act
// silu, num_key_value_heads = num_attention_heads); the result is validated.
func ReadConfig(dir string) (LlamaConfig, error) {
	path := filepath.Join(dir, ConfigFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return LlamaConfig{}, fmt.Errorf("read config: %w", err)
	}
	c, err := parseConfig(b)
	if err != nil {
		return LlamaConfig{}, fmt.Errorf("read config %s: %w", path, err)
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if err := c.Validate(); err != nil {
		return LlamaConfig{}, fmt.Errorf("read config %s: %w", path, err)
	}
	return c, nil
}

func parseConfig(b []byte) (LlamaConfig, error) {
	var probe struct {
		Eos json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return LlamaConfig{}, err
	}
	var eosList []int
	if len(probe.Eos) > 0 && probe.Eos[0] == '[' {
		if err := json.Unmarshal(probe.Eos, &eosList); err != nil {
			return LlamaConfig{}, fmt.Errorf("eos_token_id: %w", err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return LlamaConfig{}, err
		}
		delete(m, "eos_token_id")
		var err error
		if b, err = json.Marshal(m); err != nil {
			return LlamaConfig{}, err
		}
	}
	c := LlamaConfig{RMSNormEps: 1e-6, RopeTheta: 10000, HiddenAct: "silu"}
	if err := json.Unmarshal(b, &c); err != nil {
		return LlamaConfig{}, err
	}
	if len(eosList) > 0 {
		c.EosTokenIDs = eosList
		first := eosList[0]
		c.EosTokenID = &first
	}
	return c, nil
}

package format

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
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

// Upper bounds of a config.json's dimensions, each well past the largest
// public Llama-family model (vocabulary 262k, hidden 16k, intermediate
// 53k, 126 layers, 128 heads, contexts of 1M tokens) and small enough that
// no product of them overflows an int64 or is taken for a real size.
// Validate refuses larger values before anything is sized from them.
const (
	MaxVocabSize             = 1 << 22
	MaxHiddenSize            = 1 << 16
	MaxIntermediateSize      = 1 << 18
	MaxHiddenLayers          = 1 << 10
	MaxAttentionHeads        = 1 << 10
	MaxHeadDim               = 1 << 10
	MaxPositionEmbeddingsCap = 1 << 24
)

// Validate checks the fields the built-in model and the GGUF exporter rely
// on, each dimension's range included.
func (c LlamaConfig) Validate() error {
	var errs []error
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"vocab_size", c.VocabSize, MaxVocabSize}, {"hidden_size", c.HiddenSize, MaxHiddenSize},
		{"intermediate_size", c.IntermediateSize, MaxIntermediateSize}, {"num_hidden_layers", c.NumHiddenLayers, MaxHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads, MaxAttentionHeads}, {"num_key_value_heads", c.NumKeyValueHeads, MaxAttentionHeads},
		{"head_dim", c.HeadDim, MaxHeadDim}, {"max_position_embeddings", c.MaxPositionEmbeddings, MaxPositionEmbeddingsCap},
	} {
		if f.v > f.max {
			errs = append(errs, fmt.Errorf("%s %d is above the limit %d", f.name, f.v, f.max))
		}
	}
	if c.HeadDim < 0 || c.NumKeyValueHeads < 0 {
		errs = append(errs, fmt.Errorf("head_dim %d and num_key_value_heads %d must not be negative", c.HeadDim, c.NumKeyValueHeads))
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

// ParamCount is the number of weights c implies (embeddings, every layer,
// the final norm, and lm_head when untied), computed without overflow for
// any config Validate accepts.
func (c LlamaConfig) ParamCount() int64 {
	h, ff, v := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.VocabSize)
	hd, nh, nkv := int64(c.HeadDimension()), int64(c.NumAttentionHeads), int64(c.KVHeads())
	layer := 2*h + 2*nh*hd*h + 2*nkv*hd*h + 3*ff*h
	n := v*h + int64(c.NumHiddenLayers)*layer + h
	if !c.TieWordEmbeddings {
		n += v * h
	}
	return n
}

// MemoryBytes is what holding c's weights as float32 takes, with the RoPE
// tables (max_position_embeddings × head dimension) the built-in model
// builds.
func (c LlamaConfig) MemoryBytes() int64 {
	return 4 * (c.ParamCount() + int64(c.MaxPositionEmbeddings)*int64(c.HeadDimension()))
}

// CheckMemory refuses a config whose weights (MemoryBytes) do not fit
// under MaxModelBytes, before anything is allocated. path names the file
// in the error.
func (c LlamaConfig) CheckMemory(path string) error {
	if need := c.MemoryBytes(); need > MaxModelBytes {
		return fmt.Errorf("%s: %d parameters (hidden_size %d, intermediate_size %d, num_hidden_layers %d, vocab_size %d, max_position_embeddings %d) need %.1f GiB as float32, above the memory ceiling of %.1f GiB (format.MaxModelBytes)",
			path, c.ParamCount(), c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.VocabSize, c.MaxPositionEmbeddings,
			float64(need)/(1<<30), float64(MaxModelBytes)/(1<<30))
	}
	return nil
}

// TensorShapes are the tensors a LlamaForCausalLM with config c has, by
// Hugging Face name: lm_head only when untied; with value, the critic's
// score.weight [1, hidden] instead of lm_head.
func (c LlamaConfig) TensorShapes(value bool) map[string][]int {
	hd := c.HeadDimension()
	nh, nkv := c.NumAttentionHeads, c.KVHeads()
	h, ff, v := c.HiddenSize, c.IntermediateSize, c.VocabSize
	want := map[string][]int{
		"model.embed_tokens.weight": {v, h},
		"model.norm.weight":         {h},
	}
	switch {
	case value:
		want["score.weight"] = []int{1, h}
	case !c.TieWordEmbeddings:
		want["lm_head.weight"] = []int{v, h}
	}
	for l := 0; l < c.NumHiddenLayers; l++ {
		p := "model.layers." + strconv.Itoa(l) + "."
		want[p+"input_layernorm.weight"] = []int{h}
		want[p+"post_attention_layernorm.weight"] = []int{h}
		want[p+"self_attn.q_proj.weight"] = []int{nh * hd, h}
		want[p+"self_attn.k_proj.weight"] = []int{nkv * hd, h}
		want[p+"self_attn.v_proj.weight"] = []int{nkv * hd, h}
		want[p+"self_attn.o_proj.weight"] = []int{h, nh * hd}
		want[p+"mlp.gate_proj.weight"] = []int{ff, h}
		want[p+"mlp.up_proj.weight"] = []int{ff, h}
		want[p+"mlp.down_proj.weight"] = []int{h, ff}
	}
	return want
}

// CheckTensors compares c with the tensors a weights file actually holds
// (from its header, before any data is read): every tensor c implies must
// be there with exactly the shape c implies, and nothing else but a copy of
// lm_head when tied and older checkpoints' rotary_emb.inv_freq. A file
// holding score.weight is a critic. The error names the file (path), the
// tensor, and the config.json fields behind the shape.
func (c LlamaConfig) CheckTensors(path string, ts []TensorInfo) error {
	value := false
	for _, t := range ts {
		if t.Name == "score.weight" {
			value = true
		}
	}
	want := c.TensorShapes(value)
	seen := make(map[string]bool, len(ts))
	for _, t := range ts {
		seen[t.Name] = true
		shape, ok := want[t.Name]
		switch {
		case !ok && t.Name == "lm_head.weight" && c.TieWordEmbeddings:
			continue
		case !ok && hfLayer.MatchString(t.Name) && hasSuffix(t.Name, ".self_attn.rotary_emb.inv_freq"):
			continue
		case !ok:
			return fmt.Errorf("%s: tensor %q is not part of a Llama model with this config.json", path, t.Name)
		case !equalInts(t.Shape, shape):
			return fmt.Errorf("%s: tensor %q has shape %v, config.json implies %v (vocab_size %d, hidden_size %d, intermediate_size %d, heads %d/%d, head dim %d)",
				path, t.Name, t.Shape, shape, c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumAttentionHeads, c.KVHeads(), c.HeadDimension())
		}
	}
	if missing := unseen(want, seen); len(missing) > 0 {
		more := ""
		if len(missing) > 5 {
			more = fmt.Sprintf(" and %d more", len(missing)-5)
			missing = missing[:5]
		}
		return fmt.Errorf("%s: config.json (num_hidden_layers %d) implies tensors the file lacks: %v%s", path, c.NumHiddenLayers, missing, more)
	}
	return nil
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

// unseen lists, sorted, the names in want that seen lacks.
func unseen[V any](want map[string]V, seen map[string]bool) []string {
	var missing []string
	for n := range want {
		if !seen[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	return missing
}

package model

import (
	"fmt"
	"math"
	"sort"

	"github.com/compactrl/compactrl/format"
)

// Config is the architecture of a Llama decoder, with the meaning of the
// Hugging Face LlamaConfig fields of the same role.
type Config struct {
	Vocab          int     // vocab_size
	Dim            int     // hidden_size
	Layers         int     // num_hidden_layers
	Heads          int     // num_attention_heads
	KVHeads        int     // num_key_value_heads (grouped-query attention when < Heads)
	FFN            int     // intermediate_size of the SwiGLU MLP
	MaxSeq         int     // max_position_embeddings: longest sequence the model accepts
	RopeTheta      float64 // rope_theta
	NormEps        float64 // rms_norm_eps
	TiedEmbeddings bool    // tie_word_embeddings: lm_head shares model.embed_tokens.weight
	// InitRange is initializer_range: the standard deviation of New's
	// normal initialisation of linear and embedding weights (0: HF's 0.02).
	// Small models learn to copy from their context (induction) far sooner
	// from a larger one, about 0.5/√Dim.
	InitRange float64
}

// initStd is InitRange with its default.
func (c Config) initStd() float64 {
	if c.InitRange > 0 {
		return c.InitRange
	}
	return 0.02
}

// HeadDim is Dim / Heads.
func (c Config) HeadDim() int { return c.Dim / c.Heads }

// Validate reports the first field that makes the configuration unusable,
// each dimension's range included (the bounds of format's config.json).
func (c Config) Validate() error {
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"vocab", c.Vocab, format.MaxVocabSize}, {"dim", c.Dim, format.MaxHiddenSize}, {"layers", c.Layers, format.MaxHiddenLayers},
		{"heads", c.Heads, format.MaxAttentionHeads}, {"kv_heads", c.KVHeads, format.MaxAttentionHeads},
		{"ffn", c.FFN, format.MaxIntermediateSize}, {"max_seq", c.MaxSeq, format.MaxPositionEmbeddingsCap},
	} {
		if f.v > f.max {
			return fmt.Errorf("model config: %s %d is above the limit %d", f.name, f.v, f.max)
		}
	}
	switch {
	case c.Vocab <= 0:
		return fmt.Errorf("model config: vocab %d must be positive", c.Vocab)
	case c.Dim <= 0 || c.Layers <= 0 || c.FFN <= 0 || c.MaxSeq <= 0:
		return fmt.Errorf("model config: dim %d, layers %d, ffn %d, max_seq %d must be positive", c.Dim, c.Layers, c.FFN, c.MaxSeq)
	case c.Heads <= 0 || c.Dim%c.Heads != 0:
		return fmt.Errorf("model config: heads %d must divide dim %d", c.Heads, c.Dim)
	case c.HeadDim()%2 != 0:
		return fmt.Errorf("model config: head dim %d must be even for RoPE", c.HeadDim())
	case c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("model config: kv_heads %d must divide heads %d", c.KVHeads, c.Heads)
	case c.InitRange < 0 || math.IsNaN(c.InitRange) || math.IsInf(c.InitRange, 0):
		return fmt.Errorf("model config: initializer_range %g must not be negative", c.InitRange)
	case c.RopeTheta <= 0 || math.IsNaN(c.RopeTheta) || math.IsInf(c.RopeTheta, 0):
		return fmt.Errorf("model config: rope_theta %g must be positive", c.RopeTheta)
	case c.NormEps <= 0 || math.IsNaN(c.NormEps) || math.IsInf(c.NormEps, 0):
		return fmt.Errorf("model config: rms_norm_eps %g must be positive", c.NormEps)
	}
	return nil
}

// MemoryBytes is what the model's float32 weights and RoPE tables take.
func (c Config) MemoryBytes() int64 {
	hd := int64(c.HeadDim())
	d, ffn := int64(c.Dim), int64(c.FFN)
	layer := 2*d + 2*int64(c.Heads)*hd*d + 2*int64(c.KVHeads)*hd*d + 3*d*ffn
	n := int64(c.Vocab)*d + int64(c.Layers)*layer + d
	if !c.TiedEmbeddings {
		n += int64(c.Vocab) * d
	}
	return 4 * (n + int64(c.MaxSeq)*hd)
}

// NumParams counts the trunk and the language-model head (untied only).
func (c Config) NumParams() int {
	hd := c.HeadDim()
	layer := 2*c.Dim + c.Dim*c.Heads*hd*2 + c.Dim*c.KVHeads*hd*2 + 3*c.Dim*c.FFN
	n := c.Vocab*c.Dim + c.Layers*layer + c.Dim
	if !c.TiedEmbeddings {
		n += c.Vocab * c.Dim
	}
	return n
}

// Presets are named configurations from about 1M to about 30M parameters.
// "tiny" is the demo's default; "bench" is the shape that
// `compactrl bench model` measures.
var Presets = map[string]Config{
	"tiny":   {Vocab: 1024, Dim: 128, Layers: 4, Heads: 4, KVHeads: 2, FFN: 352, MaxSeq: 2048, RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true},
	"bench":  {Vocab: 1024, Dim: 256, Layers: 4, Heads: 4, KVHeads: 4, FFN: 688, MaxSeq: 2048, RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: false},
	"small":  {Vocab: 2048, Dim: 256, Layers: 6, Heads: 4, KVHeads: 2, FFN: 688, MaxSeq: 4096, RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true},
	"medium": {Vocab: 4096, Dim: 512, Layers: 8, Heads: 8, KVHeads: 4, FFN: 1376, MaxSeq: 4096, RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true},
}

// Preset returns the named preset, or an error listing the known names.
func Preset(name string) (Config, error) {
	c, ok := Presets[name]
	if !ok {
		names := make([]string, 0, len(Presets))
		for n := range Presets {
			names = append(names, n)
		}
		sort.Strings(names)
		return Config{}, fmt.Errorf("unknown model preset %q (known: %v)", name, names)
	}
	return c, nil
}

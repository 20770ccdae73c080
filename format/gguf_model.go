package format

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/compactrl/compactrl/tokenizer"
)

// IsGGUF reports whether path names a GGUF file: a regular file whose
// first four bytes are GGUF's magic.
func IsGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.IsDir() {
		return false
	}
	var b [4]byte
	n, _ := f.Read(b[:])
	return n == 4 && string(b[:]) == ggufMagic
}

// ReadTokenizer reads a tokenizer: the vocabulary of a GGUF file
// (tokenizer.FromGGUF on its metadata), else a Hugging Face tokenizer.json
// or a directory holding one (tokenizer.Load).
func ReadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	if !IsGGUF(path) {
		return tokenizer.Load(path)
	}
	f, err := ReadGGUFMeta(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	tok, err := tokenizer.FromGGUF(f.Meta)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	return tok, nil
}

// TokenizerConfigPath is where the chat template and special tokens of a
// --tokenizer FILE|DIR are: the GGUF file itself, else the
// tokenizer_config.json in the directory or beside the file.
func TokenizerConfigPath(tokPath string) string {
	if IsGGUF(tokPath) {
		return tokPath
	}
	if fi, err := os.Stat(tokPath); err == nil && fi.IsDir() {
		return filepath.Join(tokPath, tokenizer.ConfigFile)
	}
	return filepath.Join(filepath.Dir(tokPath), tokenizer.ConfigFile)
}

// ReadTokenizerConfig reads what the agent needs besides the vocabulary:
// from a GGUF file, tokenizer.chat_template and the contents of the
// tokens tokenizer.ggml.bos_token_id / eos_token_id name (with
// add_bos_token); else tokenizer_config.json (tokenizer.LoadConfig).
func ReadTokenizerConfig(path string) (tokenizer.Config, error) {
	if !IsGGUF(path) {
		return tokenizer.LoadConfig(path)
	}
	f, err := ReadGGUFMeta(path)
	if err != nil {
		return tokenizer.Config{}, fmt.Errorf("load tokenizer config: %w", err)
	}
	c, err := ggufTokenizerConfig(f.Meta)
	if err != nil {
		return tokenizer.Config{}, fmt.Errorf("load tokenizer config %s: %w", path, err)
	}
	return c, nil
}

func ggufTokenizerConfig(meta map[string]any) (tokenizer.Config, error) {
	var c tokenizer.Config
	if v, ok := meta["tokenizer.chat_template"]; ok {
		s, ok := v.(string)
		if !ok {
			return c, fmt.Errorf("tokenizer.chat_template: want a string, got %T", v)
		}
		c.ChatTemplate = s
	}
	tokens, _ := meta["tokenizer.ggml.tokens"].([]string)
	content := func(key string) (string, error) {
		v, ok := meta[key]
		if !ok {
			return "", nil
		}
		id, ok := v.(uint32)
		if !ok {
			return "", fmt.Errorf("%s: want a uint32, got %T", key, v)
		}
		if int(id) >= len(tokens) {
			return "", fmt.Errorf("%s: id %d outside the vocabulary of %d tokens", key, id, len(tokens))
		}
		return tokens[id], nil
	}
	var err error
	if c.BOS, err = content("tokenizer.ggml.bos_token_id"); err != nil {
		return c, err
	}
	if c.EOS, err = content("tokenizer.ggml.eos_token_id"); err != nil {
		return c, err
	}
	if v, ok := meta["tokenizer.ggml.add_bos_token"]; ok {
		b, ok := v.(bool)
		if !ok {
			return c, fmt.Errorf("tokenizer.ggml.add_bos_token: want a bool, got %T", v)
		}
		c.AddBOS = b
	}
	c.Class = "gguf:" + strings.TrimSpace(fmt.Sprint(meta["tokenizer.ggml.model"]))
	return c, nil
}

// ggufToHF inverts GGUFName: llama.cpp's tensor names to Hugging Face
// LlamaForCausalLM's.
func ggufToHF(name string) (string, bool) {
	switch name {
	case "token_embd.weight":
		return "model.embed_tokens.weight", true
	case "output_norm.weight":
		return "model.norm.weight", true
	case "output.weight":
		return "lm_head.weight", true
	}
	var layer int
	var rest string
	if n, _ := fmt.Sscanf(name, "blk.%d.%s", &layer, &rest); n != 2 || name != fmt.Sprintf("blk.%d.%s", layer, rest) {
		return "", false
	}
	for hf, g := range hfLayerToGGUF {
		if g == rest {
			return fmt.Sprintf("model.layers.%d.%s", layer, hf), true
		}
	}
	return "", false
}

// UnpermuteQK inverts PermuteQK: llama.cpp's interleaved RoPE rows of a
// q/k weight back to Hugging Face's rotate-half layout (GGUF row h·d + 2j + i
// is HF row h·d + i·d/2 + j).
func UnpermuteQK(w []float32, rows, cols, nHead int) ([]float32, error) {
	return permuteHeads(w, rows, cols, nHead, true)
}

// ggufUint reads a metadata integer (any unsigned or signed width) as int.
func ggufUint(meta map[string]any, key string, required bool) (int, bool, error) {
	v, ok := meta[key]
	if !ok {
		if required {
			return 0, false, fmt.Errorf("metadata %s missing", key)
		}
		return 0, false, nil
	}
	var n int64
	switch x := v.(type) {
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	case uint64:
		if x > math.MaxInt32 {
			return 0, false, fmt.Errorf("metadata %s: %d too large", key, x)
		}
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	default:
		return 0, false, fmt.Errorf("metadata %s: want an integer, got %T", key, v)
	}
	if n < 0 || n > math.MaxInt32 {
		return 0, false, fmt.Errorf("metadata %s: %d out of range", key, n)
	}
	return int(n), true, nil
}

func ggufFloat(meta map[string]any, key string) (float64, bool, error) {
	v, ok := meta[key]
	if !ok {
		return 0, false, nil
	}
	switch x := v.(type) {
	case float32:
		return float64(x), true, nil
	case float64:
		return x, true, nil
	}
	return 0, false, fmt.Errorf("metadata %s: want a float, got %T", key, v)
}

// GGUFLlamaConfig reads the model configuration of a GGUF file's metadata
// as the Hugging Face LlamaConfig of the same model. Only the "llama"
// architecture is accepted, with full-width RoPE and no RoPE scaling, and
// only tensors of a LlamaForCausalLM (no bias, no rope_freqs); anything
// else is refused naming the key or tensor, never loaded half-right.
// Tied embeddings are a file without output.weight, as llama.cpp reads it.
func GGUFLlamaConfig(f *GGUFFile) (LlamaConfig, error) {
	arch, _ := f.Meta["general.architecture"].(string)
	if arch != "llama" {
		return LlamaConfig{}, fmt.Errorf("general.architecture %q unsupported: the built-in model is a Llama decoder (\"llama\")", arch)
	}
	get := func(key string, required bool) (int, bool, error) { return ggufUint(f.Meta, "llama."+key, required) }
	var c LlamaConfig
	var err error
	fields := []struct {
		key string
		dst *int
	}{
		{"block_count", &c.NumHiddenLayers}, {"embedding_length", &c.HiddenSize}, {"feed_forward_length", &c.IntermediateSize},
		{"attention.head_count", &c.NumAttentionHeads}, {"context_length", &c.MaxPositionEmbeddings},
	}
	for _, fd := range fields {
		if *fd.dst, _, err = get(fd.key, true); err != nil {
			return LlamaConfig{}, err
		}
	}
	c = NewLlamaConfig(0, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads, 0, c.MaxPositionEmbeddings)
	if c.NumKeyValueHeads, _, err = get("attention.head_count_kv", false); err != nil {
		return LlamaConfig{}, err
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if eps, ok, err := ggufFloat(f.Meta, "llama.attention.layer_norm_rms_epsilon"); err != nil {
		return LlamaConfig{}, err
	} else if !ok {
		return LlamaConfig{}, fmt.Errorf("metadata llama.attention.layer_norm_rms_epsilon missing")
	} else {
		c.RMSNormEps = eps
	}
	if base, ok, err := ggufFloat(f.Meta, "llama.rope.freq_base"); err != nil {
		return LlamaConfig{}, err
	} else if ok {
		c.RopeTheta = base
	}
	hd := c.HeadDimension()
	for _, key := range []string{"rope.dimension_count", "attention.key_length", "attention.value_length"} {
		if n, ok, err := get(key, false); err != nil {
			return LlamaConfig{}, err
		} else if ok && n != hd {
			return LlamaConfig{}, fmt.Errorf("metadata llama.%s %d ≠ head dimension %d (embedding_length / head_count): unsupported", key, n, hd)
		}
	}
	if st, ok := f.Meta["llama.rope.scaling.type"]; ok && st != "none" {
		return LlamaConfig{}, fmt.Errorf("metadata llama.rope.scaling.type %v: RoPE scaling is unsupported", st)
	}
	if n, ok, err := get("expert_count", false); err != nil {
		return LlamaConfig{}, err
	} else if ok && n > 0 {
		return LlamaConfig{}, fmt.Errorf("metadata llama.expert_count %d: mixture-of-experts models are unsupported", n)
	}
	if v, ok, err := get("vocab_size", false); err != nil {
		return LlamaConfig{}, err
	} else if ok {
		c.VocabSize = v
	} else if toks, ok := f.Meta["tokenizer.ggml.tokens"].([]string); ok {
		c.VocabSize = len(toks)
	}
	c.TieWordEmbeddings = true
	for _, ti := range f.Tensors {
		if ti.Name == "output.weight" {
			c.TieWordEmbeddings = false
		}
		if ti.Name == "token_embd.weight" && len(ti.Shape) == 2 && c.VocabSize == 0 {
			c.VocabSize = ti.Shape[0]
		}
	}
	for key, dst := range map[string]**int{"bos_token_id": &c.BosTokenID, "eos_token_id": &c.EosTokenID, "padding_token_id": &c.PadTokenID} {
		if n, ok, err := ggufUint(f.Meta, "tokenizer.ggml."+key, false); err != nil {
			return LlamaConfig{}, err
		} else if ok {
			*dst = &n
		}
	}
	if err := c.Validate(); err != nil {
		return LlamaConfig{}, fmt.Errorf("config from metadata: %w", err)
	}
	return c, nil
}

// ReadGGUFCheckpoint reads a llama GGUF file as a Hugging Face checkpoint:
// its LlamaConfig (GGUFLlamaConfig) and every tensor dequantized to
// float32 (Dequantize) under LlamaForCausalLM's name, q/k rows back in
// rotate-half order (UnpermuteQK). Every tensor must be one the config
// implies, of its shape, and none may be missing.
func ReadGGUFCheckpoint(path string) (LlamaConfig, []Tensor, error) {
	wrap := func(err error) error { return fmt.Errorf("read gguf checkpoint %s: %w", path, err) }
	b, f, err := readGGUF(path)
	if err != nil {
		return LlamaConfig{}, nil, fmt.Errorf("read gguf checkpoint: %w", err)
	}
	cfg, err := GGUFLlamaConfig(f)
	if err != nil {
		return LlamaConfig{}, nil, wrap(err)
	}
	want := cfg.TensorShapes(false)
	if err := cfg.CheckMemory(path); err != nil {
		return LlamaConfig{}, nil, wrap(err)
	}
	ts := make([]Tensor, 0, len(f.Tensors))
	seen := map[string]bool{}
	for _, ti := range f.Tensors {
		name, ok := ggufToHF(ti.Name)
		if !ok {
			return LlamaConfig{}, nil, wrap(fmt.Errorf("tensor %q (%s) is not part of a LlamaForCausalLM", ti.Name, GGMLTypeName(ti.Type)))
		}
		shape, ok := want[name]
		if !ok || !equalInts(shape, ti.Shape) {
			return LlamaConfig{}, nil, wrap(fmt.Errorf("tensor %q: shape %v, the metadata implies %v", ti.Name, ti.Shape, shape))
		}
		t, err := f.tensorData(b, ti)
		if err != nil {
			return LlamaConfig{}, nil, wrap(err)
		}
		t.Name = name
		switch {
		case strings.HasSuffix(name, "self_attn.q_proj.weight"):
			t.Data, err = UnpermuteQK(t.Data, shape[0], shape[1], cfg.NumAttentionHeads)
		case strings.HasSuffix(name, "self_attn.k_proj.weight"):
			t.Data, err = UnpermuteQK(t.Data, shape[0], shape[1], cfg.KVHeads())
		}
		if err != nil {
			return LlamaConfig{}, nil, wrap(fmt.Errorf("tensor %q: %w", ti.Name, err))
		}
		seen[name] = true
		ts = append(ts, t)
	}
	if missing := unseen(want, seen); len(missing) > 0 {
		return LlamaConfig{}, nil, wrap(fmt.Errorf("missing tensors %v", missing))
	}
	return cfg, ts, nil
}

package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"

	"github.com/compactrl/compactrl/kernel"
	"github.com/compactrl/compactrl/tokenizer"
)

// GGUF token types (llama.h: LLAMA_TOKEN_TYPE_*).
const (
	tokenTypeNormal  = 1
	tokenTypeControl = 3
	tokenTypeUnused  = 5
)

// GGUFAlignment is the data alignment WriteGGUF uses (general.alignment).
const GGUFAlignment = 32

type ggufKV struct {
	key string
	val any // uint32, int32, float32, bool, string, []string, []int32
}

// hfLayer matches the per-layer HF tensor names of LlamaForCausalLM.
var hfLayer = regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)$`)

var hfLayerToGGUF = map[string]string{
	"input_layernorm.weight":          "attn_norm.weight",
	"self_attn.q_proj.weight":         "attn_q.weight",
	"self_attn.k_proj.weight":         "attn_k.weight",
	"self_attn.v_proj.weight":         "attn_v.weight",
	"self_attn.o_proj.weight":         "attn_output.weight",
	"post_attention_layernorm.weight": "ffn_norm.weight",
	"mlp.gate_proj.weight":            "ffn_gate.weight",
	"mlp.up_proj.weight":              "ffn_up.weight",
	"mlp.down_proj.weight":            "ffn_down.weight",
}

// GGUFName maps a Hugging Face LlamaForCausalLM tensor name to llama.cpp's.
func GGUFName(hf string) (string, bool) {
	switch hf {
	case "model.embed_tokens.weight":
		return "token_embd.weight", true
	case "model.norm.weight":
		return "output_norm.weight", true
	case "lm_head.weight":
		return "output.weight", true
	}
	m := hfLayer.FindStringSubmatch(hf)
	if m == nil {
		return "", false
	}
	g, ok := hfLayerToGGUF[m[2]]
	if !ok {
		return "", false
	}
	return "blk." + m[1] + "." + g, true
}

// PermuteQK reorders the rows of a q_proj/k_proj weight [nHead·d, in] from
// Hugging Face's rotate-half RoPE layout to llama.cpp's interleaved one:
// within each head, output row 2j+i is input row i·d/2 + j (i ∈ {0,1},
// j < d/2), i.e. rows reshaped (nHead, 2, d/2) and the last two axes swapped.
// Rotating pairs (j, j+d/2) in HF become pairs (2j, 2j+1) in llama.cpp.
func PermuteQK(w []float32, rows, cols, nHead int) ([]float32, error) {
	return permuteHeads(w, rows, cols, nHead, false)
}

// permuteHeads moves HF row h·d + i·d/2 + j to llama.cpp row h·d + 2j + i
// (inverse: back).
func permuteHeads(w []float32, rows, cols, nHead int, inverse bool) ([]float32, error) {
	if nHead <= 0 || rows%nHead != 0 || (rows/nHead)%2 != 0 || len(w) != rows*cols {
		return nil, fmt.Errorf("permute q/k: %d×%d weight (%d values) with %d heads", rows, cols, len(w), nHead)
	}
	d := rows / nHead
	half := d / 2
	out := make([]float32, len(w))
	for h := 0; h < nHead; h++ {
		for i := 0; i < 2; i++ {
			for j := 0; j < half; j++ {
				hf, gg := h*d+i*half+j, h*d+2*j+i
				src, dst := hf, gg
				if inverse {
					src, dst = gg, hf
				}
				copy(out[dst*cols:(dst+1)*cols], w[src*cols:(src+1)*cols])
			}
		}
	}
	return out, nil
}

// GGUFOptions are WriteGGUFWith's choices beyond the checkpoint.
type GGUFOptions struct {
	// ChatTemplate is written as tokenizer.chat_template ("": none).
	ChatTemplate string
	// Matrices is the tensor type of every matrix: GGMLTypeF32 (the zero
	// value), GGMLTypeF16 or GGMLTypeBF16, both rounded to nearest, ties to
	// even (BF16 as kernel.BF16 rounds the bf16 path's weights, so llama.cpp
	// serves the weights a model.precision bf16 policy samples with). Norm
	// weights stay F32, as llama.cpp's converter keeps them.
	Matrices uint32
}

// fileType is general.file_type (llama.h's llama_ftype) for a file whose
// matrices are of type t.
func fileType(t uint32) (uint32, error) {
	switch t {
	case GGMLTypeF32:
		return 0, nil // LLAMA_FTYPE_ALL_F32
	case GGMLTypeF16:
		return 1, nil // LLAMA_FTYPE_MOSTLY_F16
	case GGMLTypeBF16:
		return 32, nil // LLAMA_FTYPE_MOSTLY_BF16
	}
	return 0, fmt.Errorf("matrix type %s: want F32, F16 or BF16", GGMLTypeName(t))
}

// WriteGGUF is WriteGGUFWith without options: all tensors F32, no chat
// template.
func WriteGGUF(path string, cfg LlamaConfig, ts []Tensor, tok *tokenizer.Tokenizer) error {
	return WriteGGUFWith(path, cfg, ts, tok, GGUFOptions{})
}

// WriteGGUFWith writes a llama.cpp GGUF v3 file (matrices of type opts.Matrices) of the
// LlamaForCausalLM checkpoint ts (HF names, row-major) with configuration
// cfg and vocabulary tok. q_proj/k_proj rows are permuted to llama.cpp's
// RoPE layout (PermuteQK with num_attention_heads / num_key_value_heads);
// lm_head is left out when embeddings are tied (llama.cpp then reuses
// token_embd), and so are the rotary_emb.inv_freq buffers of older HF
// checkpoints. Every other tensor must be known and of the shape cfg implies.
func WriteGGUFWith(path string, cfg LlamaConfig, ts []Tensor, tok *tokenizer.Tokenizer, opts GGUFOptions) error {
	wrap := func(err error) error { return fmt.Errorf("write gguf %s: %w", path, err) }
	if err := cfg.Validate(); err != nil {
		return wrap(fmt.Errorf("config: %w", err))
	}
	ft, err := fileType(opts.Matrices)
	if err != nil {
		return wrap(err)
	}
	if err := checkFinite(ts); err != nil {
		return wrap(err)
	}
	if tok == nil {
		return wrap(errors.New("no tokenizer"))
	}
	if tok.VocabSize() > cfg.VocabSize {
		return wrap(fmt.Errorf("tokenizer has %d tokens, model vocab_size is %d", tok.VocabSize(), cfg.VocabSize))
	}
	gts, err := ggufTensors(cfg, ts)
	if err != nil {
		return wrap(err)
	}
	kvs, err := ggufMetadata(cfg, tok, ft)
	if err != nil {
		return wrap(err)
	}
	if opts.ChatTemplate != "" {
		kvs = append(kvs, ggufKV{"tokenizer.chat_template", opts.ChatTemplate})
	}
	return writeAtomic(path, func(w io.Writer) error { return encodeGGUF(w, kvs, gts, opts.Matrices) })
}

func ggufTensors(cfg LlamaConfig, ts []Tensor) ([]Tensor, error) {
	nh, nkv := cfg.NumAttentionHeads, cfg.KVHeads()
	want := cfg.TensorShapes(false)
	var out []Tensor
	seen := map[string]bool{}
	for _, t := range ts {
		if seen[t.Name] {
			return nil, fmt.Errorf("tensor %q given twice", t.Name)
		}
		seen[t.Name] = true
		if t.Name == "lm_head.weight" && cfg.TieWordEmbeddings {
			continue // tied: llama.cpp uses token_embd.weight
		}
		if hfLayer.MatchString(t.Name) && hasSuffix(t.Name, ".self_attn.rotary_emb.inv_freq") {
			continue // older HF checkpoints store RoPE frequencies; llama.cpp derives them from rope_theta
		}
		shape, ok := want[t.Name]
		if !ok {
			return nil, fmt.Errorf("tensor %q is not part of a LlamaForCausalLM with this config", t.Name)
		}
		if err := t.validate(); err != nil {
			return nil, err
		}
		if !equalInts(t.Shape, shape) {
			return nil, fmt.Errorf("tensor %q: shape %v, config implies %v", t.Name, t.Shape, shape)
		}
		name, _ := GGUFName(t.Name)
		data := t.Data
		var err error
		switch {
		case hfLayer.MatchString(t.Name) && hasSuffix(t.Name, "self_attn.q_proj.weight"):
			data, err = PermuteQK(t.Data, shape[0], shape[1], nh)
		case hfLayer.MatchString(t.Name) && hasSuffix(t.Name, "self_attn.k_proj.weight"):
			data, err = PermuteQK(t.Data, shape[0], shape[1], nkv)
		}
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		out = append(out, Tensor{Name: name, Shape: shape, Data: data})
	}
	if missing := unseen(want, seen); len(missing) > 0 {
		return nil, fmt.Errorf("missing tensors %v", missing)
	}
	sort.SliceStable(out, func(i, j int) bool { return ggufOrder(out[i].Name) < ggufOrder(out[j].Name) })
	return out, nil
}

// ggufOrder sorts token_embd, blocks in numeric order (each in input
// order), then output_norm, output.
func ggufOrder(name string) string {
	switch name {
	case "token_embd.weight":
		return "0"
	case "output_norm.weight":
		return "2"
	case "output.weight":
		return "3"
	}
	var l int
	fmt.Sscanf(name, "blk.%d.", &l)
	return fmt.Sprintf("1%08d", l)
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ggufMetadata is the file's metadata, with ftype as general.file_type.
func ggufMetadata(cfg LlamaConfig, tok *tokenizer.Tokenizer, ftype uint32) ([]ggufKV, error) {
	pre, err := tok.GGUFPre()
	if err != nil {
		return nil, err
	}
	name := "compactrl"
	kv := []ggufKV{
		{"general.architecture", "llama"},
		{"general.name", name},
		{"general.alignment", uint32(GGUFAlignment)},
		{"general.file_type", ftype},
		{"llama.vocab_size", uint32(cfg.VocabSize)},
		{"llama.context_length", uint32(cfg.MaxPositionEmbeddings)},
		{"llama.embedding_length", uint32(cfg.HiddenSize)},
		{"llama.block_count", uint32(cfg.NumHiddenLayers)},
		{"llama.feed_forward_length", uint32(cfg.IntermediateSize)},
		{"llama.attention.head_count", uint32(cfg.NumAttentionHeads)},
		{"llama.attention.head_count_kv", uint32(cfg.KVHeads())},
		{"llama.attention.key_length", uint32(cfg.HeadDimension())},
		{"llama.attention.value_length", uint32(cfg.HeadDimension())},
		{"llama.attention.layer_norm_rms_epsilon", float32(cfg.RMSNormEps)},
		{"llama.rope.freq_base", float32(cfg.RopeTheta)},
		{"llama.rope.dimension_count", uint32(cfg.HeadDimension())},
	}
	tokens := tok.Tokens()
	types := make([]int32, cfg.VocabSize)
	for id := range tokens {
		types[id] = tokenTypeNormal
		if tok.IsSpecial(id) {
			types[id] = tokenTypeControl
		}
	}
	for id := len(tokens); id < cfg.VocabSize; id++ {
		tokens = append(tokens, fmt.Sprintf("[PAD%d]", id))
		types[id] = tokenTypeUnused
	}
	merges := tok.Merges()
	ms := make([]string, len(merges))
	for i, m := range merges {
		ms[i] = m[0] + " " + m[1]
	}
	kv = append(kv,
		ggufKV{"tokenizer.ggml.model", "gpt2"},
		ggufKV{"tokenizer.ggml.pre", pre},
		ggufKV{"tokenizer.ggml.tokens", tokens},
		ggufKV{"tokenizer.ggml.token_type", types},
		ggufKV{"tokenizer.ggml.merges", ms},
	)
	bos, eos := specialIDs(cfg, tok)
	if bos >= 0 {
		kv = append(kv, ggufKV{"tokenizer.ggml.bos_token_id", uint32(bos)})
	}
	if eos >= 0 {
		kv = append(kv, ggufKV{"tokenizer.ggml.eos_token_id", uint32(eos)})
	}
	if cfg.PadTokenID != nil && *cfg.PadTokenID >= 0 {
		kv = append(kv, ggufKV{"tokenizer.ggml.padding_token_id", uint32(*cfg.PadTokenID)})
	}
	kv = append(kv,
		ggufKV{"tokenizer.ggml.add_bos_token", false},
		ggufKV{"tokenizer.ggml.add_eos_token", false},
	)
	return kv, nil
}

// specialIDs returns BOS and EOS ids: config.json's, else well-known special
// token names of tok, else (EOS only) its first special token; -1 if none.
func specialIDs(cfg LlamaConfig, tok *tokenizer.Tokenizer) (bos, eos int) {
	bos, eos = -1, -1
	if cfg.BosTokenID != nil {
		bos = *cfg.BosTokenID
	}
	if cfg.EosTokenID != nil {
		eos = *cfg.EosTokenID
	}
	find := func(names ...string) int {
		for _, n := range names {
			if id, ok := tok.SpecialID(n); ok {
				return id
			}
		}
		return -1
	}
	if bos < 0 {
		bos = find("<|begin_of_text|>", "<s>", "<|endoftext|>")
	}
	if eos < 0 {
		eos = find("<|endoftext|>", "</s>", "<|eot_id|>", "<|end_of_text|>", "<|im_end|>")
	}
	if eos < 0 {
		if sp := tok.Specials(); len(sp) > 0 {
			eos, _ = tok.SpecialID(sp[0])
		}
	}
	return bos, eos
}

type countingWriter struct {
	w   io.Writer
	n   uint64
	buf []byte
}

func (c *countingWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	k, err := c.w.Write(c.buf)
	c.n += uint64(k)
	c.buf = c.buf[:0]
	return err
}

func (c *countingWriter) u32(v uint32) { c.buf = binary.LittleEndian.AppendUint32(c.buf, v) }
func (c *countingWriter) u64(v uint64) { c.buf = binary.LittleEndian.AppendUint64(c.buf, v) }
func (c *countingWriter) str(s string) {
	c.u64(uint64(len(s)))
	c.buf = append(c.buf, s...)
}

func (c *countingWriter) value(v any) error {
	switch x := v.(type) {
	case uint32:
		c.u32(ggufUint32)
		c.u32(x)
	case int32:
		c.u32(ggufInt32)
		c.u32(uint32(x))
	case float32:
		c.u32(ggufFloat32)
		c.u32(math.Float32bits(x))
	case bool:
		c.u32(ggufBool)
		if x {
			c.buf = append(c.buf, 1)
		} else {
			c.buf = append(c.buf, 0)
		}
	case string:
		c.u32(ggufString)
		c.str(x)
	case []string:
		c.u32(ggufArray)
		c.u32(ggufString)
		c.u64(uint64(len(x)))
		for _, s := range x {
			c.str(s)
		}
	case []int32:
		c.u32(ggufArray)
		c.u32(ggufInt32)
		c.u64(uint64(len(x)))
		for _, e := range x {
			c.u32(uint32(e))
		}
	default:
		return fmt.Errorf("unsupported metadata value %T", v)
	}
	return nil
}

// encodeGGUF writes header, metadata, tensor infos and data (matrices of
// type matrices, everything else F32), each tensor's data starting at a
// multiple of GGUFAlignment.
func encodeGGUF(w io.Writer, kvs []ggufKV, ts []Tensor, matrices uint32) error {
	typeOf := func(t Tensor) uint32 {
		if len(t.Shape) == 2 {
			return matrices
		}
		return GGMLTypeF32
	}
	c := &countingWriter{w: w}
	c.buf = append(c.buf, ggufMagic...)
	c.u32(3)
	c.u64(uint64(len(ts)))
	c.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		c.str(kv.key)
		if err := c.value(kv.val); err != nil {
			return fmt.Errorf("metadata %q: %w", kv.key, err)
		}
	}
	align := func(n uint64) uint64 { return (n + GGUFAlignment - 1) / GGUFAlignment * GGUFAlignment }
	var off uint64
	for _, t := range ts {
		c.str(t.Name)
		c.u32(uint32(len(t.Shape)))
		for d := len(t.Shape) - 1; d >= 0; d-- {
			c.u64(uint64(t.Shape[d]))
		}
		typ := typeOf(t)
		c.u32(typ)
		c.u64(off)
		size, err := GGMLDataSize(typ, uint64(len(t.Data)))
		if err != nil {
			return fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		off = align(off + size)
	}
	pad := func() {
		n := c.n + uint64(len(c.buf))
		for i := n; i < align(n); i++ {
			c.buf = append(c.buf, 0)
		}
	}
	pad()
	for _, t := range ts {
		typ := typeOf(t)
		for _, v := range t.Data {
			c.buf = appendAs(c.buf, typ, v)
			if len(c.buf) >= 1<<16 {
				if err := c.flush(); err != nil {
					return err
				}
			}
		}
		pad()
	}
	return c.flush()
}

// appendAs appends v stored as ggml type typ (F32, F16 or BF16, little-endian) to buf.
func appendAs(buf []byte, typ uint32, v float32) []byte {
	switch typ {
	case GGMLTypeF16:
		return binary.LittleEndian.AppendUint16(buf, Float32ToHalf(v))
	case GGMLTypeBF16:
		return binary.LittleEndian.AppendUint16(buf, kernel.BF16(v))
	}
	return binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
}

// checkFinite rejects weights that are NaN or ±Inf (a diverged run): llama.cpp
// would load them and serve garbage without a word.
func checkFinite(ts []Tensor) error {
	for _, t := range ts {
		for i, v := range t.Data {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("tensor %s: element %d is %v: the checkpoint's weights are not finite", t.Name, i, v)
			}
		}
	}
	return nil
}

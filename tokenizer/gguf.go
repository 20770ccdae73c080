package tokenizer

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// GGUF token types (llama.h: LLAMA_TOKEN_TYPE_*).
const (
	ggufTokenNormal      = 1
	ggufTokenUnknown     = 2
	ggufTokenControl     = 3
	ggufTokenUserDefined = 4
	ggufTokenUnused      = 5
	ggufTokenByte        = 6
)

// ggufPreTokenizers maps llama.cpp's pre-tokenizer names
// (tokenizer.ggml.pre, llama-vocab.cpp) to the Hugging Face pre_tokenizer
// that splits the same way: GPT-2's ByteLevel regex; the same after
// single digits split off (\p{N} first: StarCoder, SmolLM, …); Llama 3's
// and Qwen2's Split patterns followed by a plain ByteLevel.
var ggufPreTokenizers = map[string]string{
	"gpt-2":     `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`,
	"default":   `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`,
	"smollm":    digitsThenGPT2,
	"starcoder": digitsThenGPT2,
	"refact":    digitsThenGPT2,
	"llama-bpe": splitThenBytes(patLlama3),
	"qwen2":     splitThenBytes(patQwen2),
	"gpt-4o":    splitThenBytes(patO200k),
}

const digitsThenGPT2 = `{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]}`

// splitThenBytes is a Split on pattern pat followed by a ByteLevel
// without its own regex.
func splitThenBytes(pat string) string {
	b, _ := json.Marshal(pat)
	return `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` + string(b) + `},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]}`
}

// FromGGUF builds the tokenizer a GGUF file's metadata describes (meta as
// format.ReadGGUF returns it): tokenizer.ggml.model "gpt2" (byte-level
// BPE) with tokenizer.ggml.tokens, .merges, .token_type and .pre. Control
// and user-defined tokens become added tokens (EncodeWithSpecials splits
// them out; Encode keeps their strings as text). Unused tokens stay
// vocabulary entries no merge produces. Everything else is refused with
// the key at fault: a SentencePiece vocabulary (model "llama"), a
// pre-tokenizer name this package cannot split like llama.cpp, byte or
// unknown token types of a byte-level vocabulary. A vocabulary may lack
// byte tokens (SmolLM2's has no token for 21 bytes, 0x04 and 0xff among
// them): as in llama.cpp, such a byte stays a symbol no merge joins across
// and is then left out of the ids.
//
// The tokenizer is the same as the Hugging Face tokenizer.json with those
// parts (it is built through that reader), so it encodes as llama.cpp's
// tokenizer of the same file does (TestGGUFTokenizerMatchesLlamaServer).
func FromGGUF(meta map[string]any) (*Tokenizer, error) {
	model, _ := meta["tokenizer.ggml.model"].(string)
	if model != "gpt2" {
		if model == "" {
			return nil, fmt.Errorf("gguf tokenizer: tokenizer.ggml.model missing: the file has no vocabulary")
		}
		return nil, fmt.Errorf("gguf tokenizer: tokenizer.ggml.model %q unsupported (byte-level BPE \"gpt2\" only)", model)
	}
	pre, _ := meta["tokenizer.ggml.pre"].(string)
	if pre == "" {
		pre = "default"
	}
	preJSON, ok := ggufPreTokenizers[pre]
	if !ok {
		return nil, fmt.Errorf("gguf tokenizer: tokenizer.ggml.pre %q unsupported (known: %s)", pre, strings.Join(ggufPreNames(), ", "))
	}
	tokens, ok := meta["tokenizer.ggml.tokens"].([]string)
	if !ok || len(tokens) == 0 {
		return nil, fmt.Errorf("gguf tokenizer: tokenizer.ggml.tokens: want a non-empty array of strings, got %T", meta["tokenizer.ggml.tokens"])
	}
	merges, ok := meta["tokenizer.ggml.merges"].([]string)
	if !ok {
		return nil, fmt.Errorf("gguf tokenizer: tokenizer.ggml.merges: want an array of strings, got %T", meta["tokenizer.ggml.merges"])
	}
	types, err := ggufTokenTypes(meta["tokenizer.ggml.token_type"], len(tokens))
	if err != nil {
		return nil, err
	}
	vocab := make(map[string]int, len(tokens))
	type added struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	}
	var adds []added
	for id, s := range tokens {
		switch types[id] {
		case ggufTokenNormal, ggufTokenUnused:
		case ggufTokenControl, ggufTokenUserDefined:
			adds = append(adds, added{id, s, types[id] == ggufTokenControl})
		default:
			return nil, fmt.Errorf("gguf tokenizer: tokenizer.ggml.token_type[%d] = %d (%q): byte and unknown tokens are not part of a byte-level vocabulary", id, types[id], s)
		}
		if prev, dup := vocab[s]; dup {
			return nil, fmt.Errorf("gguf tokenizer: tokenizer.ggml.tokens[%d] %q repeats token %d", id, s, prev)
		}
		vocab[s] = id
	}
	for i, m := range merges {
		if strings.Count(m, " ") != 1 {
			return nil, fmt.Errorf("gguf tokenizer: tokenizer.ggml.merges[%d] %q: want two tokens separated by one space", i, m)
		}
	}
	f := map[string]any{
		"added_tokens":  adds,
		"normalizer":    nil,
		"pre_tokenizer": json.RawMessage(preJSON),
		"decoder":       json.RawMessage(`{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true}`),
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	}
	b, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("gguf tokenizer: %w", err)
	}
	t, err := parseHF(b, true)
	if err != nil {
		return nil, fmt.Errorf("gguf tokenizer: %w", err)
	}
	t.ggufPre = pre
	return t, nil
}

func ggufPreNames() []string {
	return slices.Sorted(maps.Keys(ggufPreTokenizers))
}

// ggufTokenTypes reads tokenizer.ggml.token_type (int32s; all normal when
// absent).
func ggufTokenTypes(v any, n int) ([]int32, error) {
	if v == nil {
		out := make([]int32, n)
		for i := range out {
			out[i] = ggufTokenNormal
		}
		return out, nil
	}
	ts, ok := v.([]int32)
	if !ok || len(ts) != n {
		return nil, fmt.Errorf("gguf tokenizer: tokenizer.ggml.token_type: want %d int32s (one per token), got %T of length %d", n, v, lenOf(v))
	}
	return ts, nil
}

func lenOf(v any) int {
	switch s := v.(type) {
	case []int32:
		return len(s)
	case []uint32:
		return len(s)
	case []any:
		return len(s)
	}
	return -1
}

// GGUFPre is the llama.cpp pre-tokenizer name (tokenizer.ggml.pre) that
// splits words as t does: the file's own when t came from a GGUF, else
// "llama-bpe", "qwen2", "gpt-4o" or "gpt-2" for the hand-written splitters.
func (t *Tokenizer) GGUFPre() (string, error) {
	if t.ggufPre != "" {
		return t.ggufPre, nil
	}
	if t.steps != nil || t.norm != nil || t.charLevel {
		return "", fmt.Errorf("tokenizer: its pipeline has no llama.cpp pre-tokenizer name")
	}
	switch t.pre {
	case preLlama3:
		return "llama-bpe", nil
	case preQwen2:
		return "qwen2", nil
	case preO200k:
		return "gpt-4o", nil
	}
	return "gpt-2", nil
}

package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// File is the conventional name of a Hugging Face tokenizer in a checkpoint directory.
const File = "tokenizer.json"

type hfAddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type hfByteLevel struct {
	Type           string `json:"type"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	TrimOffsets    bool   `json:"trim_offsets"`
	UseRegex       bool   `json:"use_regex"`
}

type hfSplit struct {
	Type     string            `json:"type"`
	Pattern  map[string]string `json:"pattern"`
	Behavior string            `json:"behavior"`
	Invert   bool              `json:"invert"`
}

// Save writes t as a Hugging Face tokenizer.json: model BPE (vocab in id
// order, merges as "a b" strings), added_tokens, ByteLevel pre-tokenizer
// (GPT-2 split rules) and ByteLevel decoder.
func (t *Tokenizer) Save(path string) error {
	if t.norm != nil || t.steps != nil || t.charLevel {
		return fmt.Errorf("save tokenizer %s: a tokenizer loaded with a normalizer, a pre-tokenizer pipeline other than GPT-2/Llama-3/Qwen2 or a character-level model cannot be written back", path)
	}
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	var encErr error
	enc := func(v any) string {
		j, err := json.Marshal(v)
		if err != nil && encErr == nil {
			encErr = err
		}
		return string(j)
	}
	w("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	first := true
	for id, sp := range t.special {
		if !sp {
			continue
		}
		if !first {
			w(",")
		}
		first = false
		special := true
		if t.addedNotSpecial != nil && t.addedNotSpecial[id] {
			special = false
		}
		w("\n    %s", enc(hfAddedToken{ID: id, Content: t.tokens[id], Special: special}))
	}
	w("\n  ],\n  \"normalizer\": null,\n")
	var pre any = hfByteLevel{"ByteLevel", t.addPrefixSpace, true, true}
	if t.pre != preGPT2 {
		pat := map[preTokenizer]string{preLlama3: patLlama3, preQwen2: patQwen2, preO200k: patO200k}[t.pre]
		pre = map[string]any{"type": "Sequence", "pretokenizers": []any{
			hfSplit{"Split", map[string]string{"Regex": pat}, "Isolated", false},
			hfByteLevel{"ByteLevel", t.addPrefixSpace, true, false},
		}}
	}
	w("  \"pre_tokenizer\": %s,\n", enc(pre))
	w("  \"post_processor\": null,\n")
	w("  \"decoder\": %s,\n", enc(hfByteLevel{"ByteLevel", true, true, true}))
	w("  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n")
	w("    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n")
	w("    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": %v,\n", t.ignoreMerges)
	w("    \"vocab\": {")
	first = true
	for id, s := range t.tokens {
		if t.special[id] && !t.specialInVocab(id) {
			continue
		}
		if !first {
			w(",")
		}
		first = false
		w("\n      %s: %d", enc(s), id)
	}
	w("\n    },\n    \"merges\": [")
	for i, m := range t.merges {
		if i > 0 {
			w(",")
		}
		w("\n      %s", enc(t.tokens[m.a]+" "+t.tokens[m.b]))
	}
	w("\n    ]\n  }\n}\n")
	if encErr != nil {
		return fmt.Errorf("save tokenizer %s: %w", path, encErr)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-tokenizer-*")
	if err != nil {
		return fmt.Errorf("save tokenizer %s: %w", path, err)
	}
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("save tokenizer %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save tokenizer %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save tokenizer %s: %w", path, err)
	}
	return nil
}

// specialInVocab: HF trainers list special tokens in model.vocab too; a
// loaded file may not, and Save keeps what it found.
func (t *Tokenizer) specialInVocab(id int) bool {
	return t.addedOutsideVocab == nil || !t.addedOutsideVocab[id]
}

// Load reads a Hugging Face tokenizer.json holding a BPE model: the files
// Save writes, and real models' files (Qwen3, Llama 3, DeepSeek-V3, Gemma 3,
// GPT-OSS and the like) with their normalizers, pre-tokenizer pipelines,
// byte fallback and decoders (see the package doc for what is supported).
// Every added token is recognised by EncodeWithSpecials and not by Encode.
// path may also be a directory holding tokenizer.json.
func Load(path string) (*Tokenizer, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, File)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	t, err := parseHF(b, false)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	return t, nil
}

// parseHF builds a tokenizer from tokenizer.json bytes b. With
// missingBytes, a byte-level vocabulary may lack byte tokens (see
// Tokenizer.missingBytes).
func parseHF(b []byte, missingBytes bool) (*Tokenizer, error) {
	var f struct {
		AddedTokens  []hfAddedToken  `json:"added_tokens"`
		Normalizer   json.RawMessage `json:"normalizer"`
		PreTokenizer json.RawMessage `json:"pre_tokenizer"`
		Decoder      json.RawMessage `json:"decoder"`
		Model        struct {
			Type                    string          `json:"type"`
			Vocab                   map[string]int  `json:"vocab"`
			Merges                  json.RawMessage `json:"merges"`
			ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
			EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
			ByteFallback            bool            `json:"byte_fallback"`
			IgnoreMerges            bool            `json:"ignore_merges"`
			UnkToken                *string         `json:"unk_token"`
			FuseUnk                 bool            `json:"fuse_unk"`
		} `json:"model"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	m := f.Model
	if m.Type != "BPE" && !(m.Type == "" && m.Vocab != nil) {
		return nil, fmt.Errorf("model type %q, want BPE", m.Type)
	}
	if (m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "") || (m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "") {
		return nil, errors.New("model: continuing_subword_prefix / end_of_word_suffix are unsupported")
	}
	t := &Tokenizer{ignoreMerges: m.IgnoreMerges, byteFallback: m.ByteFallback, fuseUnk: m.FuseUnk, unk: -1, missingBytes: missingBytes}
	nz, err := parseNormalizer(f.Normalizer)
	if err != nil {
		return nil, err
	}
	steps, byteLevel, err := parsePreSteps(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	t.norm, t.steps, t.charLevel = nz, steps, !byteLevel
	if byteLevel && m.ByteFallback {
		return nil, errors.New("model: byte_fallback with a ByteLevel pre-tokenizer is unsupported")
	}
	t.fastPath()
	n := 0
	for _, id := range m.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("model.vocab: negative token id %d", id)
		}
		n = max(n, id+1)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 {
			return nil, fmt.Errorf("added token %q: negative id %d", a.Content, a.ID)
		}
		if a.Content == "" {
			return nil, fmt.Errorf("added token %d: empty content", a.ID)
		}
		n = max(n, a.ID+1)
	}
	t.tokens = make([]string, n)
	t.special = make([]bool, n)
	have := make([]bool, n)
	for s, id := range m.Vocab {
		if have[id] {
			return nil, fmt.Errorf("model.vocab: token id %d used by %q and %q", id, t.tokens[id], s)
		}
		t.tokens[id], have[id] = s, true
	}
	for _, a := range f.AddedTokens {
		if have[a.ID] && t.tokens[a.ID] != a.Content {
			return nil, fmt.Errorf("added token %q: id %d is %q in the vocabulary", a.Content, a.ID, t.tokens[a.ID])
		}
		if !have[a.ID] {
			if t.addedOutsideVocab == nil {
				t.addedOutsideVocab = map[int]bool{}
			}
			t.addedOutsideVocab[a.ID] = true
		}
		if !a.Special {
			if t.addedNotSpecial == nil {
				t.addedNotSpecial = map[int]bool{}
			}
			t.addedNotSpecial[a.ID] = true
		}
		if a.LStrip || a.RStrip {
			if t.strip == nil {
				t.strip = map[int][2]bool{}
			}
			t.strip[a.ID] = [2]bool{a.LStrip, a.RStrip}
		}
		t.tokens[a.ID], have[a.ID], t.special[a.ID] = a.Content, true, true
	}
	for id, ok := range have {
		if !ok {
			return nil, fmt.Errorf("token id %d missing: ids must be dense 0…%d", id, n-1)
		}
	}
	if m.UnkToken != nil && *m.UnkToken != "" {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model.unk_token %q not in the vocabulary", *m.UnkToken)
		}
		t.unk = int32(id)
	}
	if t.decode, t.stripLead, err = parseDecoder(f.Decoder, byteLevel); err != nil {
		return nil, err
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	vocab := make(map[string]int, n)
	for id, s := range t.tokens {
		vocab[s] = id
	}
	t.merges = make([]pair, len(merges))
	for i, mg := range merges {
		a, okA := vocab[mg[0]]
		b, okB := vocab[mg[1]]
		if !okA || !okB {
			return nil, fmt.Errorf("model.merges[%d] %q %q: token not in vocabulary", i, mg[0], mg[1])
		}
		t.merges[i] = pair{int32(a), int32(b)}
	}
	if err := t.build(); err != nil {
		return nil, err
	}
	return t, nil
}

// fastPath recognises the pipelines the hand-written pre-tokenizers run
// whole (GPT-2's ByteLevel with its regex, or a Split with the GPT-2,
// Llama-3 or Qwen2 pattern followed by a plain ByteLevel, no normalizer):
// those encode without the generic step pipeline and Save can write them.
func (t *Tokenizer) fastPath() {
	if t.norm != nil || t.charLevel {
		return
	}
	switch len(t.steps) {
	case 1:
		if bl, ok := t.steps[0].(byteLevelStep); ok && bl.useRegex {
			t.pre, t.addPrefixSpace, t.steps = preGPT2, bl.addPrefixSpace, nil
		}
	case 2:
		sp, ok1 := t.steps[0].(splitStep)
		bl, ok2 := t.steps[1].(byteLevelStep)
		if !ok1 || !ok2 || bl.useRegex || bl.addPrefixSpace || sp.invert || sp.behavior != behIsolated {
			return
		}
		if h, ok := sp.pat.(handSplit); ok {
			t.pre, t.steps = h.p, nil
		}
	}
}

// parseDecoder builds the per-token decoding of a tokenizer.json "decoder":
// each token's string becomes its bytes. stripLead reports a Metaspace
// decoder that drops the space it prepended to the text's first token.
func parseDecoder(raw json.RawMessage, byteLevel bool) (dec func(string) string, stripLead bool, err error) {
	if isNull(raw) {
		if byteLevel {
			return byteLevelDecode, false, nil
		}
		return nil, false, errors.New("decoder: null, and the model is not byte-level")
	}
	var d struct {
		Type          string            `json:"type"`
		Decoders      []json.RawMessage `json:"decoders"`
		Pattern       hfPattern         `json:"pattern"`
		Content       string            `json:"content"`
		Start         int               `json:"start"`
		Stop          int               `json:"stop"`
		Replacement   string            `json:"replacement"`
		PrependScheme string            `json:"prepend_scheme"`
		AddPrefixSpac *bool             `json:"add_prefix_space"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, false, fmt.Errorf("decoder: %w", err)
	}
	switch d.Type {
	case "ByteLevel":
		return byteLevelDecode, false, nil
	case "Fuse":
		return func(s string) string { return s }, false, nil
	case "ByteFallback":
		return byteFallbackDecode, false, nil
	case "Replace":
		if d.Pattern.String == nil {
			return nil, false, errors.New("decoder Replace: only a String pattern is supported")
		}
		from, to := *d.Pattern.String, d.Content
		return func(s string) string { return strings.ReplaceAll(s, from, to) }, false, nil
	case "Strip":
		c, start, stop := d.Content, d.Start, d.Stop
		return func(s string) string {
			for i := 0; i < start && strings.HasPrefix(s, c); i++ {
				s = s[len(c):]
			}
			for i := 0; i < stop && strings.HasSuffix(s, c); i++ {
				s = s[:len(s)-len(c)]
			}
			return s
		}, false, nil
	case "Metaspace":
		r := d.Replacement
		if r == "" {
			r = "▁"
		}
		lead := d.PrependScheme == "always" || d.PrependScheme == "first" || (d.PrependScheme == "" && (d.AddPrefixSpac == nil || *d.AddPrefixSpac))
		return func(s string) string { return strings.ReplaceAll(s, r, " ") }, lead, nil
	case "Sequence":
		var fns []func(string) string
		for i, r := range d.Decoders {
			f, sl, err := parseDecoder(r, byteLevel)
			if err != nil {
				return nil, false, fmt.Errorf("decoder Sequence[%d]: %w", i, err)
			}
			fns = append(fns, f)
			stripLead = stripLead || sl
		}
		return func(s string) string {
			for _, f := range fns {
				s = f(s)
			}
			return s
		}, stripLead, nil
	}
	return nil, false, fmt.Errorf("decoder %q unsupported (known: ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace, Sequence)", d.Type)
}

func byteLevelDecode(s string) string {
	b, _ := vocabToBytes(s)
	return string(b)
}

// byteFallbackDecode turns a <0xHH> token into its byte.
func byteFallbackDecode(s string) string {
	if b, ok := fallbackByte(s); ok {
		return string([]byte{b})
	}
	return s
}

func fallbackByte(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(s[3:5], 16, 8)
	if err != nil || strings.ToUpper(s[3:5]) != s[3:5] {
		return 0, false
	}
	return byte(v), true
}

func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		out := make([][2]string, len(strs))
		for i, s := range strs {
			a, b, ok := strings.Cut(s, " ")
			if !ok || a == "" || b == "" || strings.Contains(b, " ") {
				return nil, fmt.Errorf("merge %d %q: want two tokens separated by one space", i, s)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("merges: neither strings nor pairs: %w", err)
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("merge %d: %d tokens, want 2", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

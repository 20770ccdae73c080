package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
		pat := map[preTokenizer]string{preLlama3: patLlama3, preQwen2: patQwen2}[t.pre]
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

// Load reads a Hugging Face tokenizer.json holding a byte-level BPE model:
// the files Save writes, and GPT-2, Llama-3 and Qwen2 style files
// (ByteLevel pre-tokenizer, or a Split with one of those patterns followed
// by ByteLevel). Every added token is treated as special: EncodeWithSpecials
// recognises it and Encode does not.
func Load(path string) (*Tokenizer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	t, err := parseHF(b)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	return t, nil
}

func parseHF(b []byte) (*Tokenizer, error) {
	var f struct {
		AddedTokens  []hfAddedToken  `json:"added_tokens"`
		Normalizer   json.RawMessage `json:"normalizer"`
		PreTokenizer json.RawMessage `json:"pre_tokenizer"`
		Model        struct {
			Type                    string          `json:"type"`
			Vocab                   map[string]int  `json:"vocab"`
			Merges                  json.RawMessage `json:"merges"`
			ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
			EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
			ByteFallback            bool            `json:"byte_fallback"`
			IgnoreMerges            bool            `json:"ignore_merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	m := f.Model
	if m.Type != "BPE" && !(m.Type == "" && m.Vocab != nil) {
		return nil, fmt.Errorf("model type %q, want BPE", m.Type)
	}
	if m.ByteFallback {
		return nil, errors.New("byte_fallback BPE (SentencePiece style) is not byte-level BPE")
	}
	if (m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "") || (m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "") {
		return nil, errors.New("continuing_subword_prefix / end_of_word_suffix are unsupported")
	}
	if n := bytes.TrimSpace(f.Normalizer); len(n) > 0 && string(n) != "null" {
		return nil, fmt.Errorf("unsupported normalizer %s", n)
	}
	t := &Tokenizer{ignoreMerges: m.IgnoreMerges}
	if err := t.parsePre(f.PreTokenizer); err != nil {
		return nil, err
	}
	n := 0
	for _, id := range m.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("negative token id %d", id)
		}
		n = max(n, id+1)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 {
			return nil, fmt.Errorf("added token %q: negative id %d", a.Content, a.ID)
		}
		n = max(n, a.ID+1)
	}
	t.tokens = make([]string, n)
	t.special = make([]bool, n)
	have := make([]bool, n)
	for s, id := range m.Vocab {
		if have[id] {
			return nil, fmt.Errorf("token id %d used by %q and %q", id, t.tokens[id], s)
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
		t.tokens[a.ID], have[a.ID], t.special[a.ID] = a.Content, true, true
	}
	for id, ok := range have {
		if !ok {
			return nil, fmt.Errorf("token id %d missing: ids must be dense 0…%d", id, n-1)
		}
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
			return nil, fmt.Errorf("merge %d %q %q: token not in vocabulary", i, mg[0], mg[1])
		}
		t.merges[i] = pair{int32(a), int32(b)}
	}
	if err := t.build(); err != nil {
		return nil, err
	}
	return t, nil
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

func (t *Tokenizer) parsePre(raw json.RawMessage) error {
	var p struct {
		Type           string            `json:"type"`
		AddPrefixSpace bool              `json:"add_prefix_space"`
		UseRegex       *bool             `json:"use_regex"`
		Pretokenizers  []json.RawMessage `json:"pretokenizers"`
		Pattern        map[string]string `json:"pattern"`
		Behavior       string            `json:"behavior"`
		Invert         bool              `json:"invert"`
	}
	if len(raw) == 0 || string(raw) == "null" {
		return errors.New("no pre_tokenizer: a byte-level BPE needs ByteLevel")
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch p.Type {
	case "ByteLevel":
		if p.UseRegex != nil && !*p.UseRegex {
			return errors.New("pre_tokenizer ByteLevel without use_regex and without a Split is unsupported")
		}
		t.pre, t.addPrefixSpace = preGPT2, p.AddPrefixSpace
		return nil
	case "Sequence":
		if len(p.Pretokenizers) == 1 {
			return t.parsePre(p.Pretokenizers[0])
		}
		if len(p.Pretokenizers) != 2 {
			return fmt.Errorf("pre_tokenizer Sequence of %d, want Split + ByteLevel", len(p.Pretokenizers))
		}
		var split, bl struct {
			Type           string            `json:"type"`
			Pattern        map[string]string `json:"pattern"`
			Behavior       string            `json:"behavior"`
			Invert         bool              `json:"invert"`
			AddPrefixSpace bool              `json:"add_prefix_space"`
			UseRegex       *bool             `json:"use_regex"`
		}
		if json.Unmarshal(p.Pretokenizers[0], &split) != nil || json.Unmarshal(p.Pretokenizers[1], &bl) != nil {
			return errors.New("pre_tokenizer Sequence: malformed entries")
		}
		if split.Type != "Split" || bl.Type != "ByteLevel" || bl.UseRegex == nil || *bl.UseRegex || split.Invert || split.Behavior != "Isolated" {
			return fmt.Errorf("pre_tokenizer Sequence [%s, %s]: want Split (Isolated) + ByteLevel (use_regex false)", split.Type, bl.Type)
		}
		switch split.Pattern["Regex"] {
		case patLlama3:
			t.pre = preLlama3
		case patQwen2:
			t.pre = preQwen2
		case patGPT2:
			t.pre = preGPT2
		default:
			return fmt.Errorf("pre_tokenizer Split pattern %q unsupported (known: GPT-2, Llama-3, Qwen2)", split.Pattern["Regex"])
		}
		t.addPrefixSpace = bl.AddPrefixSpace
		return nil
	}
	return fmt.Errorf("pre_tokenizer type %q unsupported", p.Type)
}

package tokenizer

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

type pair struct{ a, b int32 }

type mergeRule struct {
	rank int32 // position in the merge list; lower merges first
	out  int32 // id of the merged token
}

// Tokenizer is a byte-level BPE tokenizer. It is safe for concurrent use:
// the only mutable state is the per-word cache, behind a lock.
type Tokenizer struct {
	tokens   []string // vocabulary string of each id
	tokBytes [][]byte // raw bytes each id decodes to
	vocab    map[string]int
	merges   []pair // merge list in rank order, as token ids
	ranks    map[pair]mergeRule
	byteID   [256]int32

	special        []bool            // special[id]: an added (control) token
	specialIDs     map[string]int    // content → id
	specialList    []string          // contents, longest first
	specialByFirst map[byte][]string // specialList by first byte

	// of loaded files, kept so Save writes them back as found
	addedNotSpecial   map[int]bool // added_tokens entries with "special": false
	addedOutsideVocab map[int]bool // added tokens absent from model.vocab

	pre            preTokenizer
	addPrefixSpace bool
	ignoreMerges   bool

	// Loaded pipelines (hfjson.go, pipeline.go). steps nil: the hand-written
	// pre, as for built-in tokenizers.
	norm         normalizer
	steps        []preStep
	charLevel    bool                // symbols are characters (SentencePiece-style BPE), not bytes
	byteFallback bool                // char level: unknown characters become <0xHH> tokens
	fallback     [256]int32          // ids of <0xHH>, with byteFallback
	unk          int32               // id of unk_token, -1 when there is none
	fuseUnk      bool                // consecutive unknowns become one unk
	strip        map[int][2]bool     // added tokens' lstrip, rstrip
	decode       func(string) string // a token's string → its bytes (nil: byte-level)
	ggufPre      string              // tokenizer.ggml.pre of a tokenizer read from a GGUF file
	// missingBytes: the byte-level vocabulary may lack byte tokens; such a
	// byte has byteID −1, blocks merges across it and is dropped from the
	// ids, as llama.cpp's BPE tokenizer does (GGUF vocabularies only).
	missingBytes bool
	stripLead    bool // the decoder drops the text's leading space (Metaspace)

	mu    sync.RWMutex
	cache map[string][]int32
}

const (
	maxCacheEntries = 1 << 17
	maxCachedWord   = 128
)

// build fills the derived tables from tokens, merges and specials.
func (t *Tokenizer) build() error {
	t.vocab = make(map[string]int, len(t.tokens))
	t.tokBytes = make([][]byte, len(t.tokens))
	for id, s := range t.tokens {
		if prev, dup := t.vocab[s]; dup {
			return fmt.Errorf("token %q has two ids, %d and %d", s, prev, id)
		}
		t.vocab[s] = id
		switch {
		case t.decode != nil && t.charLevel:
			// character-level decoders (Replace, ByteFallback, …) apply to
			// added tokens too, as in the references
			t.tokBytes[id] = []byte(t.decode(s))
		case t.special[id]:
			t.tokBytes[id] = []byte(s)
		case t.decode != nil:
			t.tokBytes[id] = []byte(t.decode(s))
		default:
			t.tokBytes[id], _ = vocabToBytes(s)
		}
	}
	if t.charLevel {
		if err := t.buildFallback(); err != nil {
			return err
		}
	} else {
		for b := 0; b < 256; b++ {
			id, ok := t.vocab[string(byteRunes[b])]
			if (!ok || t.special[id]) && t.missingBytes {
				t.byteID[b] = -1
				continue
			}
			if !ok || t.special[id] {
				return fmt.Errorf("vocabulary lacks the byte token %q (byte 0x%02x)", string(byteRunes[b]), b)
			}
			t.byteID[b] = int32(id)
		}
	}
	t.ranks = make(map[pair]mergeRule, len(t.merges))
	for r, m := range t.merges {
		out, ok := t.vocab[t.tokens[m.a]+t.tokens[m.b]]
		if !ok {
			return fmt.Errorf("merge %d %q %q: result not in vocabulary", r, t.tokens[m.a], t.tokens[m.b])
		}
		if _, dup := t.ranks[m]; !dup {
			t.ranks[m] = mergeRule{int32(r), int32(out)}
		}
	}
	t.specialIDs = map[string]int{}
	t.specialList = t.specialList[:0]
	for id, sp := range t.special {
		if sp {
			t.specialIDs[t.tokens[id]] = id
			t.specialList = append(t.specialList, t.tokens[id])
		}
	}
	sort.Slice(t.specialList, func(i, j int) bool {
		a, b := t.specialList[i], t.specialList[j]
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
	t.specialByFirst = map[byte][]string{}
	for _, sp := range t.specialList {
		t.specialByFirst[sp[0]] = append(t.specialByFirst[sp[0]], sp)
	}
	t.cache = make(map[string][]int32)
	return nil
}

// buildFallback fills the <0xHH> table of a character-level model and
// checks that every character can be encoded: by byte fallback or as unk.
func (t *Tokenizer) buildFallback() error {
	if !t.byteFallback {
		if t.unk < 0 {
			return errors.New("model: a character-level BPE needs byte_fallback or an unk_token")
		}
		return nil
	}
	for b := 0; b < 256; b++ {
		s := fmt.Sprintf("<0x%02X>", b)
		id, ok := t.vocab[s]
		if !ok {
			return fmt.Errorf("model: byte_fallback, but the vocabulary lacks %s", s)
		}
		t.fallback[b] = int32(id)
	}
	return nil
}

// VocabSize returns the number of token ids (specials included).
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// SpecialID returns the id of the special token with content s.
func (t *Tokenizer) SpecialID(s string) (int, bool) {
	id, ok := t.specialIDs[s]
	return id, ok
}

// IsSpecial reports whether id is a special (control) token.
func (t *Tokenizer) IsSpecial(id int) bool { return id >= 0 && id < len(t.special) && t.special[id] }

// Specials returns the special tokens' contents, in id order.
func (t *Tokenizer) Specials() []string {
	var out []string
	for id, sp := range t.special {
		if sp {
			out = append(out, t.tokens[id])
		}
	}
	return out
}

// TokenString returns the vocabulary string of id — the byte-level form
// ("Ġhello" for " hello"), always valid UTF-8, as in tokenizer.json — or ""
// for an id out of range.
func (t *Tokenizer) TokenString(id int) string {
	if id < 0 || id >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// TokenBytes returns the raw bytes id decodes to (nil out of range).
func (t *Tokenizer) TokenBytes(id int) []byte {
	if id < 0 || id >= len(t.tokens) {
		return nil
	}
	return t.tokBytes[id]
}

// Tokens returns every vocabulary string in id order (a copy).
func (t *Tokenizer) Tokens() []string { return append([]string(nil), t.tokens...) }

// Merges returns the merge list in rank order as vocabulary string pairs.
func (t *Tokenizer) Merges() [][2]string {
	out := make([][2]string, len(t.merges))
	for i, m := range t.merges {
		out[i] = [2]string{t.tokens[m.a], t.tokens[m.b]}
	}
	return out
}

// Decode concatenates the bytes of each token. Ids out of range are
// skipped; use DecodeStrict to have them reported.
func (t *Tokenizer) Decode(ids []int) string {
	var sb strings.Builder
	for i, id := range ids {
		if id >= 0 && id < len(t.tokBytes) {
			b := t.tokBytes[id]
			if i == 0 && t.stripLead && !t.special[id] && len(b) > 0 && b[0] == ' ' {
				b = b[1:]
			}
			sb.Write(b)
		}
	}
	return sb.String()
}

// DecodeStrict is Decode that fails on an id out of range.
func (t *Tokenizer) DecodeStrict(ids []int) (string, error) {
	for i, id := range ids {
		if id < 0 || id >= len(t.tokBytes) {
			return "", fmt.Errorf("decode: id %d at position %d outside vocabulary of %d", id, i, len(t.tokBytes))
		}
	}
	return t.Decode(ids), nil
}

// Encode tokenises text as plain text: special-token strings in it are
// encoded like any other text.
//
// Added tokens that are not special ("special": false in tokenizer.json,
// e.g. Qwen3's <think> or Gemma 3's whitespace runs) are still recognised,
// as Hugging Face tokenizers do with split_special_tokens: they are part of
// the model's ordinary text.
func (t *Tokenizer) Encode(text string) []int {
	if t.addedNotSpecial == nil {
		out := make([]int, 0, len(text)/3+1)
		return t.appendEncode(out, text, true)
	}
	return t.encodeAdded(text, false)
}

func (t *Tokenizer) appendEncode(out []int, text string, atStart bool) []int {
	if t.steps == nil && t.norm == nil && !t.charLevel {
		// add_prefix_space (loaded files only): HF prepends ' ' to each
		// section unless it starts with one.
		if t.addPrefixSpace && text != "" && text[0] != ' ' {
			text = " " + text
		}
		t.pre.split(text, func(w string) { out = t.appendWord(out, w) })
		return out
	}
	if t.norm != nil {
		text = t.norm.normalize(text)
	}
	from := len(out)
	preTokenize(t.steps, text, atStart, func(w string) { out = t.appendWord(out, w) })
	if t.fuseUnk && t.unk >= 0 {
		j := from
		for i := from; i < len(out); i++ {
			if out[i] == int(t.unk) && j > from && out[j-1] == int(t.unk) {
				continue
			}
			out[j] = out[i]
			j++
		}
		out = out[:j]
	}
	return out
}

// EncodeWithSpecials is Encode, except that occurrences of special-token
// contents become their ids (the longest match wins where they overlap).
func (t *Tokenizer) EncodeWithSpecials(text string) []int {
	return t.encodeAdded(text, true)
}

// encodeAdded encodes text with the added tokens split out: all of them,
// or with specials false only those not marked special.
func (t *Tokenizer) encodeAdded(text string, specials bool) []int {
	out := make([]int, 0, len(text)/3+1)
	start, atStart := 0, true
	for i := 0; i < len(text); i++ {
		cands := t.specialByFirst[text[i]]
		if len(cands) == 0 {
			continue
		}
		for _, sp := range cands { // longest first
			if strings.HasPrefix(text[i:], sp) && (specials || t.addedNotSpecial[t.specialIDs[sp]]) {
				id := t.specialIDs[sp]
				st := t.strip[id]
				before := text[start:i]
				if st[0] {
					before = strings.TrimRightFunc(before, isJSSpace)
				}
				if before != "" {
					out = t.appendEncode(out, before, atStart)
				}
				out = append(out, id)
				atStart = false
				i += len(sp)
				if st[1] {
					for i < len(text) {
						r, w := utf8.DecodeRuneInString(text[i:])
						if !isJSSpace(r) {
							break
						}
						i += w
					}
				}
				start = i
				i--
				break
			}
		}
	}
	if start < len(text) {
		out = t.appendEncode(out, text[start:], atStart)
	}
	return out
}

// isJSSpace is the JS reference's whitespace (String.prototype.trim).
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// appendWord appends the BPE encoding of one pre-tokenized word.
func (t *Tokenizer) appendWord(out []int, w string) []int {
	cacheable := len(w) <= maxCachedWord
	if cacheable {
		t.mu.RLock()
		ids, ok := t.cache[w]
		t.mu.RUnlock()
		if ok {
			for _, id := range ids {
				out = append(out, int(id))
			}
			return out
		}
	}
	ids := t.bpe(w)
	if cacheable {
		t.mu.Lock()
		if len(t.cache) >= maxCacheEntries {
			clear(t.cache)
		}
		t.cache[w] = ids
		t.mu.Unlock()
	}
	for _, id := range ids {
		out = append(out, int(id))
	}
	return out
}

// bpe applies the merges to the bytes of w: repeatedly the adjacent pair
// of lowest rank is merged, the leftmost first among equal pairs.
func (t *Tokenizer) bpe(w string) []int32 {
	if t.charLevel {
		return t.bpeChars(w)
	}
	if t.ignoreMerges {
		if id, ok := t.vocab[bytesToVocab([]byte(w))]; ok && !t.special[id] {
			return []int32{int32(id)}
		}
	}
	syms := make([]int32, len(w))
	missing := false
	for i := 0; i < len(w); i++ {
		syms[i] = t.byteID[w[i]]
		missing = missing || syms[i] < 0
	}
	out := t.merge(syms)
	if missing {
		out = slices.DeleteFunc(out, func(id int32) bool { return id < 0 })
	}
	return out
}

// merge applies the merges to symbol ids (negative ids never merge).
func (t *Tokenizer) merge(syms []int32) []int32 {
	if len(syms) > 48 {
		return t.bpeHeap(syms)
	}
	for len(syms) > 1 {
		best := mergeRule{rank: -1}
		var bp pair
		for i := 0; i+1 < len(syms); i++ {
			p := pair{syms[i], syms[i+1]}
			if m, ok := t.ranks[p]; ok && (best.rank < 0 || m.rank < best.rank) {
				best, bp = m, p
			}
		}
		if best.rank < 0 {
			break
		}
		j := 0
		for i := 0; i < len(syms); i++ {
			if i+1 < len(syms) && syms[i] == bp.a && syms[i+1] == bp.b {
				syms[j] = best.out
				i++
			} else {
				syms[j] = syms[i]
			}
			j++
		}
		syms = syms[:j]
	}
	return syms
}

// bpeHeap is bpe in O(n log n) for long words: a linked list of symbols and
// a heap of candidate merges keyed by (rank, position), stale ones skipped.
func (t *Tokenizer) bpeHeap(syms []int32) []int32 {
	n := len(syms)
	next := make([]int32, n)
	prev := make([]int32, n)
	for i := range syms {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	next[n-1] = -1
	h := &candHeap{}
	push := func(i int32) {
		j := next[i]
		if i < 0 || j < 0 {
			return
		}
		if m, ok := t.ranks[pair{syms[i], syms[j]}]; ok {
			heap.Push(h, cand{m.rank, i, syms[i], syms[j], m.out})
		}
	}
	for i := 0; i+1 < n; i++ {
		push(int32(i))
	}
	for h.Len() > 0 {
		c := heap.Pop(h).(cand)
		j := next[c.pos]
		if syms[c.pos] != c.a || j < 0 || syms[j] != c.b || syms[c.pos] == deleted {
			continue
		}
		syms[c.pos] = c.out
		syms[j] = deleted
		next[c.pos] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = c.pos
		}
		if prev[c.pos] >= 0 {
			push(prev[c.pos])
		}
		push(c.pos)
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

// deleted marks a merged-away symbol in bpeHeap (unknown characters of a
// character-level model are other negative ids).
const deleted = math.MinInt32

// bpeChars is the BPE of a character-level model: each character is its
// vocabulary id, or, unknown, a negative placeholder that never merges and
// becomes its UTF-8 bytes' <0xHH> ids (byte_fallback) or unk afterwards.
func (t *Tokenizer) bpeChars(w string) []int32 {
	if t.ignoreMerges {
		if id, ok := t.vocab[w]; ok {
			return []int32{int32(id)}
		}
	}
	syms := make([]int32, 0, len(w))
	var unknown []string
	for i := 0; i < len(w); {
		_, n := utf8.DecodeRuneInString(w[i:])
		c := w[i : i+n]
		if id, ok := t.vocab[c]; ok {
			syms = append(syms, int32(id))
		} else {
			unknown = append(unknown, c)
			syms = append(syms, int32(-len(unknown)))
		}
		i += n
	}
	syms = t.merge(syms)
	if unknown == nil {
		return syms
	}
	out := make([]int32, 0, len(syms)+8)
	for _, s := range syms {
		if s >= 0 {
			out = append(out, s)
			continue
		}
		if t.byteFallback {
			for _, b := range []byte(unknown[-s-1]) {
				out = append(out, t.fallback[b])
			}
		} else {
			out = append(out, t.unk)
		}
	}
	return out
}

type cand struct {
	rank, pos int32
	a, b, out int32
}

type candHeap []cand

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)   { *h = append(*h, x.(cand)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// PreTokenizer names the word-splitting rules: "gpt2", "llama3", "qwen2" or "o200k".
func (t *Tokenizer) PreTokenizer() string {
	switch t.pre {
	case preLlama3:
		return "llama3"
	case preQwen2:
		return "qwen2"
	case preO200k:
		return "o200k"
	}
	return "gpt2"
}

package tokenizer

import (
	"container/heap"
	"errors"
	"fmt"
)

// Train learns a byte-level BPE vocabulary of at most vocabSize ids from
// texts. Ids 0…len(specials)−1 are the special tokens, the next 256 the
// bytes 0x00…0xFF, then one id per learned merge. Words are the GPT-2
// pre-tokenizer's; each merge joins the adjacent pair with the highest count
// summed over unique words × their frequency (ties: the pair of smaller
// ids). Training stops early, with a smaller vocabulary, when no pair is
// left. The result depends only on the arguments.
func Train(texts []string, vocabSize int, specials []string) (*Tokenizer, error) {
	base := len(specials) + 256
	if vocabSize < base {
		return nil, fmt.Errorf("train tokenizer: vocab size %d below the %d specials + 256 byte tokens", vocabSize, len(specials))
	}
	t := &Tokenizer{pre: preGPT2}
	seen := map[string]bool{}
	for _, s := range specials {
		if s == "" {
			return nil, errors.New("train tokenizer: empty special token")
		}
		if seen[s] {
			return nil, fmt.Errorf("train tokenizer: special token %q listed twice", s)
		}
		seen[s] = true
		t.tokens = append(t.tokens, s)
		t.special = append(t.special, true)
	}
	for b := 0; b < 256; b++ {
		s := string(byteRunes[b])
		if seen[s] {
			return nil, fmt.Errorf("train tokenizer: special token %q equals a byte token", s)
		}
		t.tokens = append(t.tokens, s)
		t.special = append(t.special, false)
	}

	// unique words in first-appearance order, with counts
	index := map[string]int32{}
	var words [][]int32
	var counts []int64
	for _, text := range texts {
		preGPT2.split(text, func(w string) {
			if k, ok := index[w]; ok {
				counts[k]++
				return
			}
			index[w] = int32(len(words))
			syms := make([]int32, len(w))
			for i := 0; i < len(w); i++ {
				syms[i] = int32(len(specials) + int(w[i]))
			}
			words = append(words, syms)
			counts = append(counts, 1)
		})
	}
	index = nil

	pairCount := map[pair]int64{}
	where := map[pair][]int32{}
	for wi, syms := range words {
		for i := 0; i+1 < len(syms); i++ {
			p := pair{syms[i], syms[i+1]}
			if pairCount[p] == 0 {
				where[p] = append(where[p], int32(wi))
			} else if l := where[p]; l[len(l)-1] != int32(wi) {
				where[p] = append(where[p], int32(wi))
			}
			pairCount[p] += counts[wi]
		}
	}
	h := &pairHeap{}
	for p, c := range pairCount {
		h.items = append(h.items, pairItem{p, c})
	}
	heap.Init(h)

	vocabIndex := map[string]int{}
	for id, s := range t.tokens {
		vocabIndex[s] = id
	}
	lastTouched := make([]int32, len(words))
	for i := range lastTouched {
		lastTouched[i] = -1
	}
	changed := map[pair]bool{}
	for iter := int32(0); len(t.tokens) < vocabSize && h.Len() > 0; {
		top := heap.Pop(h).(pairItem)
		if c := pairCount[top.p]; c != top.count || c <= 0 {
			continue // stale entry; the live count has its own entry
		}
		p := top.p
		merged := t.tokens[p.a] + t.tokens[p.b]
		out, exists := vocabIndex[merged]
		if exists && t.special[out] {
			delete(pairCount, p) // never produce a special token from text
			continue
		}
		if !exists {
			out = len(t.tokens)
			t.tokens = append(t.tokens, merged)
			t.special = append(t.special, false)
			vocabIndex[merged] = out
		}
		t.merges = append(t.merges, p)
		clear(changed)
		for _, wi := range where[p] {
			if lastTouched[wi] == iter {
				continue
			}
			lastTouched[wi] = iter
			syms := words[wi]
			c := counts[wi]
			has := false
			for i := 0; i+1 < len(syms); i++ {
				if syms[i] == p.a && syms[i+1] == p.b {
					has = true
					break
				}
			}
			if !has {
				continue
			}
			for i := 0; i+1 < len(syms); i++ {
				q := pair{syms[i], syms[i+1]}
				pairCount[q] -= c
				changed[q] = true
			}
			j := 0
			for i := 0; i < len(syms); i++ {
				if i+1 < len(syms) && syms[i] == p.a && syms[i+1] == p.b {
					syms[j] = int32(out)
					i++
				} else {
					syms[j] = syms[i]
				}
				j++
			}
			syms = syms[:j]
			words[wi] = syms
			for i := 0; i+1 < len(syms); i++ {
				q := pair{syms[i], syms[i+1]}
				if pairCount[q] <= 0 {
					where[q] = append(where[q][:0:0], wi)
				} else if l := where[q]; len(l) == 0 || l[len(l)-1] != wi {
					where[q] = append(where[q], wi)
				}
				pairCount[q] += c
				changed[q] = true
			}
		}
		delete(where, p)
		delete(pairCount, p)
		for q := range changed {
			if c := pairCount[q]; c > 0 {
				heap.Push(h, pairItem{q, c})
			} else {
				delete(pairCount, q) // where[q] is reset when q reappears
			}
		}
		iter++
	}
	if err := t.build(); err != nil {
		return nil, fmt.Errorf("train tokenizer: %w", err)
	}
	return t, nil
}

type pairItem struct {
	p     pair
	count int64
}

// pairHeap pops the highest count first, then the smallest (a, b).
type pairHeap struct{ items []pairItem }

func (h *pairHeap) Len() int { return len(h.items) }
func (h *pairHeap) Less(i, j int) bool {
	x, y := h.items[i], h.items[j]
	if x.count != y.count {
		return x.count > y.count
	}
	if x.p.a != y.p.a {
		return x.p.a < y.p.a
	}
	return x.p.b < y.p.b
}
func (h *pairHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *pairHeap) Push(x any)    { h.items = append(h.items, x.(pairItem)) }
func (h *pairHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

package agent

import (
	"context"
	"fmt"
)

// Tokenizer is what the loop needs of the policy's tokenizer: plain text to
// ids and back. Special (template) tokens never come from Encode; the loop
// places them by id from a Template. A call may block or fail (a remote
// engine's /tokenize): it gets the episode's context, and its error ends
// that episode alone as infra_error. In-memory tokenizers (the built-in
// BPE, a tokenizer.json, a byte-level test tokenizer) fit through Local.
type Tokenizer interface {
	Encode(ctx context.Context, text string) ([]int, error)
	Decode(ctx context.Context, ids []int) (string, error)
}

// LocalTokenizer is a tokenizer held in memory, which neither blocks nor
// fails. Code that only ever has such a tokenizer (scripted policies,
// transcripts, ChatFormat) takes this interface.
type LocalTokenizer interface {
	Encode(text string) []int
	Decode(ids []int) string
}

// Local returns t as a Tokenizer.
func Local(t LocalTokenizer) Tokenizer { return local{t} }

type local struct{ t LocalTokenizer }

func (l local) Encode(_ context.Context, text string) ([]int, error) { return l.t.Encode(text), nil }

func (l local) Decode(_ context.Context, ids []int) (string, error) { return l.t.Decode(ids), nil }

// Template holds the ids of the chat template's special tokens. The context
// is a sequence of turns, each a marker, its content and EndOfTurn:
//
//	system      = [System] enc(system prompt) [EndOfTurn]
//	task        = [User] enc(u) [EndOfTurn]
//	action      = [Assistant] a_1 … a_n [EndOfTurn]      (a_i sampled, EndOfTurn sampled as the stop token)
//	observation = [Observation] enc(o) [EndOfTurn]
//	q_sum       = [User] enc(summary instruction) [EndOfTurn] [Summary]
//	summary     = S_1 … S_m [EndOfTurn]                   (sampled after q_sum)
//	resume(S)   = [User] enc(resume text) [EndOfTurn] [Summary] S_1 … S_m [EndOfTurn]
//
// EndOfTurn is also the stop token of every sampling request.
type Template struct {
	System      int
	User        int
	Assistant   int
	Observation int
	Summary     int
	EndOfTurn   int
}

// SpecialTokenNames are the names of the template's special tokens, in the
// order System, User, Assistant, Observation, Summary, EndOfTurn: the list a
// tokenizer is trained with so that TemplateFrom can find them.
func SpecialTokenNames() []string {
	return []string{"<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<|summary|>", "<|end|>"}
}

// TemplateFrom builds a Template by looking each of SpecialTokenNames up
// with id (e.g. a tokenizer's SpecialID).
func TemplateFrom(id func(name string) (int, bool)) (Template, error) {
	names := SpecialTokenNames()
	ids := make([]int, len(names))
	for i, n := range names {
		v, ok := id(n)
		if !ok {
			return Template{}, fmt.Errorf("template: tokenizer has no special token %s", n)
		}
		ids[i] = v
	}
	t := Template{System: ids[0], User: ids[1], Assistant: ids[2], Observation: ids[3], Summary: ids[4], EndOfTurn: ids[5]}
	return t, t.validate()
}

func (t Template) ids() []int {
	return []int{t.System, t.User, t.Assistant, t.Observation, t.Summary, t.EndOfTurn}
}

func (t Template) validate() error {
	seen := map[int]bool{}
	for _, id := range t.ids() {
		if id < 0 {
			return fmt.Errorf("template: negative special id %d", id)
		}
		if seen[id] {
			return fmt.Errorf("template: special id %d used twice", id)
		}
		seen[id] = true
	}
	return nil
}

// IsSpecial reports whether id is one of the template's markers.
func (t Template) IsSpecial(id int) bool {
	for _, s := range t.ids() {
		if s == id {
			return true
		}
	}
	return false
}

// Turn is one turn of a context split by its markers.
type Turn struct {
	Marker int   // the special id that opened the turn
	IDs    []int // content ids (without the marker and EndOfTurn)
	Start  int   // index of IDs[0] in the split sequence
	Closed bool  // the turn ended with EndOfTurn
}

// Split cuts a context into turns at the template's markers. Ids before the
// first marker form a turn with Marker -1. The last turn of a policy prompt
// is open (Closed false, IDs empty): its marker says what is asked for.
func (t Template) Split(ids []int) []Turn {
	var turns []Turn
	cur := -1
	start := 0
	open := false
	for i, id := range ids {
		switch {
		case id == t.EndOfTurn:
			turns = append(turns, Turn{Marker: cur, IDs: ids[start:i], Start: start, Closed: true})
			open = false
			cur = -1
			start = i + 1
		case t.IsSpecial(id):
			if open || i > start {
				turns = append(turns, Turn{Marker: cur, IDs: ids[start:i], Start: start})
			}
			cur = id
			open = true
			start = i + 1
		}
	}
	if open || start < len(ids) {
		turns = append(turns, Turn{Marker: cur, IDs: ids[start:], Start: start})
	}
	return turns
}

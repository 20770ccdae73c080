package agent

import (
	"sort"
	"strings"
)

// ChatTurn is one turn of a context a ChatFormat laid out, as text.
type ChatTurn struct {
	// Role is the opener's role: "system", "user", "assistant" or the
	// preset's observation role; where observations are user turns
	// (ChatML), they read as "user".
	Role    string
	Content string
	// Open: the context ends inside this turn (the generation prompt of
	// an action or a summary, Content what was written of it so far).
	Open bool
}

// Turns cuts a context this format laid out back into its turns, reading
// the decoded text at the preset's openers (system, user, assistant,
// observation) and closers. Text before the first opener (a BOS) is
// dropped. It is for readers of contexts such as a scripted expert, which
// sees only what the model sees.
func (f *ChatFormat) Turns(ids []int) []ChatTurn {
	text := f.tok.Decode(ids)
	p := f.preset
	type opener struct {
		text, role, close string
	}
	openers := []opener{
		{p.AssistantOpen, "assistant", p.AssistantClose},
		{p.SystemOpen, "system", p.SystemClose},
		{p.ObservationOpen, p.ObservationRole, p.ObservationClose},
		{p.FirstUserOpen, "user", p.UserClose},
		{p.UserOpen, "user", p.UserClose},
	}
	type hit struct {
		at int
		o  opener
	}
	var hits []hit
	taken := map[int]bool{}
	for _, o := range openers {
		if o.text == "" {
			continue
		}
		for i := 0; ; {
			j := strings.Index(text[i:], o.text)
			if j < 0 {
				break
			}
			if !taken[i+j] {
				taken[i+j] = true
				hits = append(hits, hit{i + j, o})
			}
			i += j + len(o.text)
		}
	}
	sort.Slice(hits, func(a, b int) bool { return hits[a].at < hits[b].at })
	var out []ChatTurn
	for k, h := range hits {
		start := h.at + len(h.o.text)
		end := len(text)
		if k+1 < len(hits) {
			end = hits[k+1].at
		}
		body := text[start:end]
		t := ChatTurn{Role: h.o.role, Open: true}
		if closeAt := closeIndex(body, h.o.close, p.Stop); closeAt >= 0 {
			body, t.Open = body[:closeAt], false
		}
		t.Content = body
		out = append(out, t)
	}
	return out
}

// closeIndex is where a turn's body ends: at its closer, or at a sampled
// stop string (after which the preset's AfterStop follows); -1 when the
// body runs to the end of the context unclosed.
func closeIndex(body, close string, stops []string) int {
	best := -1
	for _, c := range append([]string{strings.TrimRight(close, "\n")}, stops...) {
		if c == "" {
			continue
		}
		if i := strings.Index(body, c); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best
}

package recipe

import (
	"math/rand/v2"
	"slices"

	"github.com/compactrl/compactrl/train"
)

// goalBatch is RecallBatch with d.Goal: n sequences c ⊕ g ⊕ q whose query
// is the summary a demonstration's expert writes,
//
//	goal: report the values of k₁ k₂ …. the vault has N files.
//	found: k₁ a₁ k₂ a₂ …
//
// g the goal statement of the segment c's window comes from (its task or
// its summary's goal line, copied token for token), q its keys in task
// order, aⱼ the value the context c shows for kⱼ (a record line, real or
// spliced, an earlier found line or answer) or "?" where it shows none.
// Each goal key the window does not show gets a spliced record with
// probability ½, and 1 … extra distractor records of keys outside the goal
// are spliced too, so that a found line mixes values and "?" among
// records it must not copy. The targets are the aⱼ only: the keys are
// copied from g. This is the lookup of summaries and answers as they are
// written — for each asked key in order, its value if the context has it,
// else "?" — rather than a list of whichever facts the context holds.
func (ft *FactTokens) goalBatch(segs [][]int, d RecallDraw, r *rand.Rand) []train.Example {
	batch := make([]train.Example, 0, d.N)
	// A corpus without goals (or of sequences too long to query) yields
	// nothing rather than looping.
	for tries := 0; len(batch) < d.N && tries < 64*d.N; tries++ {
		seg := segs[r.IntN(len(segs))]
		span, goal, ok := ft.goal(seg)
		if !ok {
			continue
		}
		ctx := ft.spliceGoal(cut(seg, d, r), goal, d.Extra, r)
		head := slices.Concat(ft.GoalLine, span)
		qlen := len(head) + len(ft.Found)
		for _, k := range goal {
			qlen += len(ft.Keys[k]) + ft.maxAnswer()
		}
		if over := len(ctx) + qlen - d.Length; over > 0 {
			if over >= len(ctx) {
				continue
			}
			ctx = ctx[over:]
		}
		known, ok := ft.known(ctx)
		if !ok {
			continue // a key shown with two values has no single answer
		}
		queries := make([]fact, len(goal))
		for j, k := range goal {
			queries[j] = fact{key: k, value: -1}
			if v, ok := known[k]; ok {
				queries[j].value = v
			}
		}
		batch = append(batch, ft.example(slices.Concat(ctx, head), queries))
	}
	return batch
}

// maxAnswer is the longest answer of a found line in tokens: a value or
// "?".
func (ft *FactTokens) maxAnswer() int {
	n := len(ft.Unknown)
	for _, v := range ft.Values {
		n = max(n, len(v))
	}
	return n
}

// goal returns the first goal statement of seg, " report the values of
// k₁ k₂ …. the vault has N files." as tokens, and its keys in order; false
// if seg has none or it asks for a key outside the pool.
func (ft *FactTokens) goal(seg []int) ([]int, []int, bool) {
	i := index(seg, ft.Goal, 0)
	if i < 0 {
		return nil, nil, false
	}
	var keys []int
	j := i + len(ft.Goal)
	for k := ft.keyAt(seg, j); k >= 0; k = ft.keyAt(seg, j) {
		keys = append(keys, k)
		j += len(ft.Keys[k])
	}
	end := index(seg, ft.GoalEnd, j)
	if len(keys) == 0 || end < 0 {
		return nil, nil, false
	}
	return seg[i : end+len(ft.GoalEnd)], keys, true
}

// spliceGoal returns a copy of seg with record lines inserted after random
// newlines: for each key of goal that seg does not show, with probability
// ½, a record of it with a random value; then 1 … extra records of random
// keys neither in goal nor shown (a draw of such a key inserts nothing).
func (ft *FactTokens) spliceGoal(seg, goal []int, extra int, r *rand.Rand) []int {
	known, _ := ft.known(seg)
	taken := map[int]bool{}
	for k := range known {
		taken[k] = true
	}
	var lines [][]int
	for _, k := range goal {
		if !taken[k] && r.IntN(2) == 0 {
			lines = append(lines, slices.Concat(ft.Record, ft.Keys[k], ft.Values[r.IntN(len(ft.Values))], ft.Newline))
		}
		taken[k] = true
	}
	for range 1 + r.IntN(max(1, extra)) {
		k := r.IntN(len(ft.Keys))
		if taken[k] {
			continue
		}
		taken[k] = true
		lines = append(lines, slices.Concat(ft.Record, ft.Keys[k], ft.Values[r.IntN(len(ft.Values))], ft.Newline))
	}
	nls := ft.lineStarts(seg)
	at := make([]int, len(lines))
	for j := range at {
		at[j] = nls[r.IntN(len(nls))]
	}
	// Insert from the last position to the first so that earlier positions
	// stay valid; lines at one position keep their order.
	order := make([]int, len(lines))
	for j := range order {
		order[j] = j
	}
	slices.SortStableFunc(order, func(a, b int) int { return at[a] - at[b] })
	ctx := slices.Clone(seg)
	for j := len(order) - 1; j >= 0; j-- {
		ctx = slices.Insert(ctx, at[order[j]], lines[order[j]]...)
	}
	return ctx
}

// known is the value ctx shows for each key, from record lines
// "record k v" and from the key-value lists of found lines and answers
// ("found: k₁ v₁ k₂ ? …", "answer k₁ v₁ …"; "?" shows nothing); false if
// a key is shown with two values. A value is the longest of the pool's
// that matches.
func (ft *FactTokens) known(ctx []int) (map[int]int, bool) {
	out := map[int]int{}
	ok := true
	set := func(k, v int) {
		if old, seen := out[k]; seen && old != v {
			ok = false
		}
		out[k] = v
	}
	for i := 0; i < len(ctx); i++ {
		switch {
		case hasAt(ctx, i, ft.Record):
			j := i + len(ft.Record)
			if k := ft.keyAt(ctx, j); k >= 0 {
				if v := ft.valueAt(ctx, j+len(ft.Keys[k])); v >= 0 {
					set(k, v)
				}
			}
		case hasAt(ctx, i, ft.Found), hasAt(ctx, i, ft.Answer):
			j := i + len(ft.Found)
			if hasAt(ctx, i, ft.Answer) {
				j = i + len(ft.Answer)
			}
			for k := ft.keyAt(ctx, j); k >= 0; k = ft.keyAt(ctx, j) {
				j += len(ft.Keys[k])
				if hasAt(ctx, j, ft.Unknown) {
					j += len(ft.Unknown)
					continue
				}
				v := ft.valueAt(ctx, j)
				if v < 0 {
					break
				}
				set(k, v)
				j += len(ft.Values[v])
			}
		}
	}
	return out, ok
}

// keyAt is the key whose tokens start at position i of seq, −1 if none.
func (ft *FactTokens) keyAt(seq []int, i int) int {
	return slices.IndexFunc(ft.Keys, func(p []int) bool { return hasAt(seq, i, p) })
}

// valueAt is the longest value whose tokens start at position i of seq, −1
// if none.
func (ft *FactTokens) valueAt(seq []int, i int) int {
	best := -1
	for v, p := range ft.Values {
		if hasAt(seq, i, p) && (best < 0 || len(p) > len(ft.Values[best])) {
			best = v
		}
	}
	return best
}

// hasAt reports whether p occurs in seq at position i.
func hasAt(seq []int, i int, p []int) bool {
	return len(p) > 0 && i >= 0 && i+len(p) <= len(seq) && slices.Equal(seq[i:i+len(p)], p)
}

// index is the first position ≥ from where p occurs in seq, −1 if none.
func index(seq, p []int, from int) int {
	for i := from; i+len(p) <= len(seq); i++ {
		if hasAt(seq, i, p) {
			return i
		}
	}
	return -1
}

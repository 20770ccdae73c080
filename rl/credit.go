package rl

import (
	"math"

	"github.com/compactrl/compactrl/episode"
)

// Credit describes how the reward's credit reaches the segments of
// compacted episodes after ComputeAdvantages: the measurements that tell
// whether cross-trajectory GAE can differ from its ablation on a batch.
// Every field but Lambda and Episodes is a mean over the episodes counted
// in Episodes: unmasked episodes with at least two trainable segments that
// hold optimised tokens (first = the first such segment, last = the last).
// A field with nothing to average is NaN.
type Credit struct {
	// Episodes is the number of multi-segment episodes the fields average.
	Episodes int
	// Lambda is the mean λ the estimator used over unmasked episodes with
	// optimised tokens: LambdaFor(l), l the episode's optimised tokens.
	Lambda float64
	// FirstScale is the mean (γλ)^{N_{>first}}: the factor cross-gae
	// applies to the first segment (whatever the estimator in use).
	FirstScale float64
	// AdvFirst and AdvLast are the mean |Â| over the optimised tokens of
	// the first and of the last segment: the advantages the estimator
	// actually gave them.
	AdvFirst, AdvLast float64
	// ValueErrFirst and ValueErrLast are the mean |V_i − G_i| over the same
	// tokens, G_i = γ^{N_{>i}} R the reward discounted by its distance
	// through the whole episode (N_{>i} the optimised tokens after i in all
	// segments): the critic's error before and after the compactions.
	// NaN when the episodes carry no values (grpo, dr-grpo).
	ValueErrFirst, ValueErrLast float64
	// ValueJump is the mean, over compaction boundaries, of |V_first(s+1) −
	// V_last(s)|: the critic's value at the first optimised token after a
	// boundary against its value at the last one before it (consecutive
	// trainable segments with optimised tokens). The context changes from the
	// full window to system prompt, summary and the last k steps: the jump is
	// what the critic thinks the compaction cost or gained. NaN without values.
	ValueJump float64
}

// CreditOf computes Credit for episodes whose advantages ComputeAdvantages
// (with cfg) has filled.
func CreditOf(eps []episode.Episode, cfg AdvantageConfig) Credit {
	var c Credit
	var lambdaSum float64
	lambdaN := 0
	var scale, advF, advL, errF, errL, jump float64
	valued := 0
	for i := range eps {
		ep := &eps[i]
		if Masked(ep, cfg.MaskOverlong) {
			continue
		}
		counts, l := optimisedPerSegment(ep)
		if l == 0 {
			continue
		}
		lambda := cfg.LambdaFor(l)
		lambdaSum += lambda
		lambdaN++
		first, last := firstLastNonzero(counts)
		if first == last {
			continue
		}
		c.Episodes++
		// Optimised tokens after the first segment: all but its own (none
		// come before it); after the last: none.
		afterFirst := l - counts[first]
		scale += math.Pow(cfg.Gamma*lambda, float64(afterFirst))
		advF += meanAbsAdv(&ep.Segments[first])
		advL += meanAbsAdv(&ep.Segments[last])
		ef, okF := valueErr(&ep.Segments[first], afterFirst, cfg.Gamma, ep.Reward)
		el, okL := valueErr(&ep.Segments[last], 0, cfg.Gamma, ep.Reward)
		if okF && okL {
			errF += ef
			errL += el
			jump += valueJump(ep, counts)
			valued++
		}
	}
	c.Lambda = div(lambdaSum, lambdaN)
	n := c.Episodes
	c.FirstScale, c.AdvFirst, c.AdvLast = div(scale, n), div(advF, n), div(advL, n)
	c.ValueErrFirst, c.ValueErrLast = div(errF, valued), div(errL, valued)
	c.ValueJump = div(jump, valued)
	return c
}

// valueJump is the mean |V_first(s+1) − V_last(s)| over the boundaries
// between consecutive segments with optimised tokens (counts) and values.
func valueJump(ep *episode.Episode, counts []int) float64 {
	var sum float64
	n := 0
	prev, have := 0.0, false
	for si, c := range counts {
		s := &ep.Segments[si]
		if c == 0 || len(s.Values) < len(s.LossMask) {
			continue
		}
		first, last := firstLastNonzero(s.LossMask)
		if have {
			sum += math.Abs(s.Values[first] - prev)
			n++
		}
		prev, have = s.Values[last], true
	}
	return div(sum, n)
}

// firstLastNonzero returns the indices of the first and the last nonzero
// element of xs (−1, −1 when there is none).
func firstLastNonzero(xs []int) (first, last int) {
	first, last = -1, -1
	for i, x := range xs {
		if x != 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	return first, last
}

// optimisedPerSegment returns each segment's optimised-token count (0 for
// segments that are not trainable) and their total l (Episode.NumOptimised).
func optimisedPerSegment(ep *episode.Episode) (counts []int, l int) {
	counts = make([]int, len(ep.Segments))
	for si := range ep.Segments {
		if s := &ep.Segments[si]; s.Trainable {
			counts[si] = s.NumOptimised()
			l += counts[si]
		}
	}
	return counts, l
}

// meanAbsAdv is the mean |Â| over the segment's optimised tokens.
func meanAbsAdv(s *episode.Segment) float64 {
	var sum float64
	n := 0
	for i, m := range s.LossMask {
		if m != 0 && i < len(s.Advantages) {
			sum += math.Abs(s.Advantages[i])
			n++
		}
	}
	return div(sum, n)
}

// valueErr is the mean |V_i − γ^{N_{>i}} R| over the segment's optimised
// tokens, later being the optimised tokens of all later segments; false
// when the segment has no values.
func valueErr(s *episode.Segment, later int, gamma, reward float64) (float64, bool) {
	if len(s.Values) < len(s.LossMask) {
		return 0, false
	}
	var sum float64
	n := 0
	after := later
	for i := len(s.LossMask) - 1; i >= 0; i-- {
		if s.LossMask[i] == 0 {
			continue
		}
		sum += math.Abs(s.Values[i] - math.Pow(gamma, float64(after))*reward)
		after++
		n++
	}
	return div(sum, n), n > 0
}

func div(sum float64, n int) float64 {
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

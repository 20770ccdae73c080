package rl

// Aggregation names how per-token losses are weighted into the step loss.
type Aggregation string

const (
	// TokenMean weights every optimised token of the step 1/|M|.
	TokenMean Aggregation = "token-mean"
	// SeqMeanTokenMean averages within each segment, then over segments.
	SeqMeanTokenMean Aggregation = "seq-mean-token-mean"
	// SeqMeanTokenSum sums within each segment, then averages over segments.
	SeqMeanTokenSum Aggregation = "seq-mean-token-sum"
	// EpisodeMeanTokenMean averages within each episode, then over episodes.
	EpisodeMeanTokenMean Aggregation = "episode-mean-token-mean"
)

// WeightFunc sets every token's Weight from counts over tokens, which
// must be the whole optimiser step (never one micro-batch of it).
type WeightFunc func(tokens []Token)

// lossAggs is the registry of loss aggregation modes, the default first.
func lossAggs() []entry[Aggregation, WeightFunc] {
	return []entry[Aggregation, WeightFunc]{
		{TokenMean, TokenMeanWeights},
		{SeqMeanTokenMean, SeqMeanTokenMeanWeights},
		{SeqMeanTokenSum, SeqMeanTokenSumWeights},
		{EpisodeMeanTokenMean, EpisodeMeanTokenMeanWeights},
	}
}

func lookupLossAgg(name string) (entry[Aggregation, WeightFunc], error) {
	return lookup(lossAggs(), "loss aggregation", name)
}

// LossAggModes lists the registered loss aggregation modes' names, the
// default first.
func LossAggModes() []string { return names(lossAggs()) }

// LossAggByName returns the weighting of the loss aggregation mode
// registered under name; an unknown name is an error listing the valid
// ones.
func LossAggByName(name string) (WeightFunc, error) {
	a, err := lookupLossAgg(name)
	return a.fn, err
}

// ParseAggregation returns the aggregation mode named s.
func ParseAggregation(s string) (Aggregation, error) {
	a, err := lookupLossAgg(s)
	return a.name, err
}

// AssignWeights sets every token's Weight by the mode agg (see the
// registered WeightFuncs) from counts over tokens, which must be the whole
// optimiser step (never one micro-batch of it).
func AssignWeights(tokens []Token, agg Aggregation) error {
	a, err := lookupLossAgg(string(agg))
	if err != nil {
		return err
	}
	a.fn(tokens)
	return nil
}

// TokenMeanWeights is token-mean: w = 1/|M|, |M| the number of tokens.
func TokenMeanWeights(tokens []Token) {
	w := 1 / float64(len(tokens))
	for i := range tokens {
		tokens[i].Weight = w
	}
}

// SeqMeanTokenMeanWeights is seq-mean-token-mean: w = 1/(S·n_s), S the
// number of distinct segments (Ep, Seg) and n_s the tokens of the token's
// segment.
func SeqMeanTokenMeanWeights(tokens []Token) {
	segs := counts(tokens, segmentKey)
	S := float64(len(segs))
	for i := range tokens {
		t := &tokens[i]
		t.Weight = 1 / (S * float64(segs[segmentKey(t)]))
	}
}

// SeqMeanTokenSumWeights is seq-mean-token-sum: w = 1/S, S the number of
// distinct segments (Ep, Seg).
func SeqMeanTokenSumWeights(tokens []Token) {
	S := float64(len(counts(tokens, segmentKey)))
	for i := range tokens {
		tokens[i].Weight = 1 / S
	}
}

// EpisodeMeanTokenMeanWeights is episode-mean-token-mean: w = 1/(E·n_e),
// E the number of distinct episodes and n_e the tokens of the token's
// episode.
func EpisodeMeanTokenMeanWeights(tokens []Token) {
	eps := counts(tokens, episodeKey)
	E := float64(len(eps))
	for i := range tokens {
		t := &tokens[i]
		t.Weight = 1 / (E * float64(eps[episodeKey(t)]))
	}
}

func segmentKey(t *Token) [2]int { return [2]int{t.Ep, t.Seg} }
func episodeKey(t *Token) [2]int { return [2]int{t.Ep, 0} }

// counts returns the number of tokens per key; runs of equal keys (the
// usual layout) cost one map update each.
func counts(tokens []Token, key func(*Token) [2]int) map[[2]int]int {
	m := map[[2]int]int{}
	if len(tokens) == 0 {
		return m
	}
	last, run := key(&tokens[0]), 0
	for i := range tokens {
		k := key(&tokens[i])
		if k != last {
			m[last] += run
			last, run = k, 0
		}
		run++
	}
	m[last] += run
	return m
}

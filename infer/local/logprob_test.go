package local

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/compactrl/compactrl/infer"
)

// samplingLogprob is log q(id), q = softmax(logits/T) restricted to the
// smallest top-p prefix (by descending probability) whose mass reaches
// topP and renormalised (topP 0 or 1: no nucleus), computed in float64
// from the logits; ok is false when id is outside the nucleus.
func samplingLogprob(logits []float32, id int, temp, topP float64) (float64, bool) {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	p := make([]float64, len(logits))
	total := 0.0
	for i, v := range logits {
		p[i] = math.Exp((float64(v) - mx) / temp)
		total += p[i]
	}
	order := make([]int, len(p))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return p[order[a]] > p[order[b]] })
	keep, mass := len(order), total
	if topP > 0 && topP < 1 {
		mass = 0
		for k, i := range order {
			mass += p[i]
			if mass >= topP*total {
				keep = k + 1
				break
			}
		}
	}
	in := false
	for _, i := range order[:keep] {
		in = in || i == id
	}
	return (float64(logits[id])-mx)/temp - math.Log(mass), in
}

// The recorded log-probabilities are π_old: for a fixed prompt, each
// sampled token's recorded log-prob equals the log-prob recomputed by
// scoring prompt ⊕ sampled tokens with the same weights (Scorer.Logits)
// under the distribution it was drawn from.
func TestRecordedLogprobsMatchRescoring(t *testing.T) {
	m := testModel(t, 3)
	s, err := New(m, Options{MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prompt := []int{5, 17, 2, 33, 8, 21}
	for _, tc := range []struct{ temp, topP float64 }{{1, 1}, {0.7, 1}, {1, 0.9}, {0.7, 0.9}, {1.5, 0.8}} {
		t.Run(fmt.Sprintf("T=%v,top_p=%v", tc.temp, tc.topP), func(t *testing.T) {
			c, err := s.Sample(context.Background(), infer.Request{Prompt: prompt, MaxTokens: 24, Temperature: tc.temp, TopP: tc.topP, Seed: 9})
			if err != nil {
				t.Fatal(err)
			}
			seq := append(append([]int(nil), prompt...), c.Tokens...)
			rows, err := m.NewScorer().Logits(seq)
			if err != nil {
				t.Fatal(err)
			}
			maxDiff := 0.0
			for i, id := range c.Tokens {
				want, in := samplingLogprob(rows[len(prompt)-1+i], id, tc.temp, tc.topP)
				if !in {
					t.Errorf("token %d (id %d) is outside the nucleus", i, id)
				}
				maxDiff = math.Max(maxDiff, math.Abs(c.Logprobs[i]-want))
			}
			t.Logf("T=%v top_p=%v: %d tokens, max |recorded − rescored| = %.3g", tc.temp, tc.topP, len(c.Tokens), maxDiff)
			if maxDiff > 1e-4 {
				t.Errorf("recorded log-probs differ from rescoring by %.3g", maxDiff)
			}
		})
	}
}

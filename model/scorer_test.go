package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestScoreMatchesForward(t *testing.T) {
	cfg := Config{Vocab: 30, Dim: 16, Layers: 3, Heads: 2, KVHeads: 1, FFN: 24, MaxSeq: 64, RopeTheta: 10000, NormEps: 1e-5}
	for _, value := range []bool{false, true} {
		m, _ := New(cfg, 2, value)
		rng := rand.New(rand.NewPCG(5, 5))
		perturbed(m, rng, 0.2)
		seqs := testSeqs(rng, cfg.Vocab)
		sc := m.NewScorer()
		full, err := sc.Forward(seqs)
		if err != nil {
			t.Fatal(err)
		}
		light, err := m.NewScorer().Score(seqs)
		if err != nil {
			t.Fatal(err)
		}
		same := func(a, b [][]float64) bool { return slices.EqualFunc(a, b, slices.Equal[[]float64]) }
		if !same(full.LogProbs, light.LogProbs) || !same(full.Values, light.Values) || !same(full.Entropy, light.Entropy) {
			t.Fatalf("critic %v: Score differs from Forward", value)
		}
		if value && len(full.Values) != len(seqs) || !value && len(full.LogProbs) != len(seqs) {
			t.Fatalf("critic %v: outputs missing", value)
		}
		if _, err := sc.Score(seqs); err != nil {
			t.Fatal(err)
		}
		if err := sc.Backward(make([][]float64, len(seqs))); err == nil || !strings.Contains(err.Error(), "no forward") {
			t.Fatalf("Backward after Score: %v", err)
		}
	}
}

// Entropy and log-probs agree with a direct float64 softmax of the logits.
func TestForwardOutputsFromLogits(t *testing.T) {
	cfg := Config{Vocab: 30, Dim: 16, Layers: 1, Heads: 2, KVHeads: 2, FFN: 24, MaxSeq: 64, RopeTheta: 10000, NormEps: 1e-5}
	m, _ := New(cfg, 3, false)
	perturbed(m, rand.New(rand.NewPCG(1, 2)), 0.3)
	toks := []int{3, 1, 4, 1, 5, 9, 2, 6}
	sc := m.NewScorer()
	rows, err := sc.Logits(toks)
	if err != nil {
		t.Fatal(err)
	}
	out, err := sc.Forward([]Seq{{Tokens: toks, From: 2}})
	if err != nil {
		t.Fatal(err)
	}
	for t0 := 2; t0 < len(toks); t0++ {
		z := rows[t0-1]
		var mx float64 = math.Inf(-1)
		for _, v := range z {
			mx = math.Max(mx, float64(v))
		}
		var sum float64
		for _, v := range z {
			sum += math.Exp(float64(v) - mx)
		}
		lse := mx + math.Log(sum)
		var ent float64
		for _, v := range z {
			lp := float64(v) - lse
			ent -= math.Exp(lp) * lp
		}
		if d := math.Abs(out.LogProbs[0][t0-2] - (float64(z[toks[t0]]) - lse)); d > 1e-5 {
			t.Fatalf("position %d: log-prob off by %g", t0, d)
		}
		if d := math.Abs(out.Entropy[0][t0-2] - ent); d > 1e-5 {
			t.Fatalf("position %d: entropy %g, want %g", t0, out.Entropy[0][t0-2], ent)
		}
	}
	for _, bad := range [][]Seq{nil, {{Tokens: []int{1, 2}, From: 0}}, {{Tokens: []int{1, 30}, From: 1}}, {{Tokens: make([]int, 65), From: 1}}} {
		if _, err := sc.Forward(bad); err == nil {
			t.Errorf("batch %v accepted", bad)
		}
	}
	if err := sc.Backward([][]float64{{1}}); err == nil {
		t.Error("Backward after a failed Forward accepted")
	}
}

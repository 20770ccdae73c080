package model

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/compactrl/compactrl/infer"
)

// Under BF16 the decoder's log-probabilities still equal scoring's, to
// the bit (both take kernel.GemmBF16's products), and they differ from the
// float32 model's by bfloat16 rounding only.
func TestBF16DecodeMatchesScoring(t *testing.T) {
	m := decodeModel(t)
	rng := rand.New(rand.NewPCG(2, 3))
	var reqs []infer.Request
	for i, n := range []int{1, 9, 30, 70} {
		reqs = append(reqs, infer.Request{Prompt: randPrompt(rng, n, 61), MaxTokens: 12 + i, Temperature: 1, Seed: int64(i)})
	}
	m.BF16 = true
	comps, err := m.Generate(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []Seq
	for i, c := range comps {
		seqs = append(seqs, Seq{Tokens: append(slices.Clone(reqs[i].Prompt), c.Tokens...), From: len(reqs[i].Prompt)})
	}
	bf, err := m.NewScorer().Forward(seqs)
	if err != nil {
		t.Fatal(err)
	}
	m.BF16 = false
	f32, err := m.NewScorer().Forward(seqs)
	if err != nil {
		t.Fatal(err)
	}
	worst, differ := 0.0, 0
	for i, c := range comps {
		for j, lp := range c.Logprobs {
			if math.Float64bits(lp) != math.Float64bits(bf.LogProbs[i][j]) {
				t.Fatalf("request %d token %d: bf16 decode log-prob %v, bf16 scoring %v", i, j, lp, bf.LogProbs[i][j])
			}
			d := math.Abs(lp - f32.LogProbs[i][j])
			worst = max(worst, d)
			if d != 0 {
				differ++
			}
		}
	}
	if differ == 0 || worst > 0.05 {
		t.Fatalf("bf16 against float32 log-probs: %d differ, largest difference %.3g (want some, all below 0.05)", differ, worst)
	}
	t.Logf("bf16 against float32 log-probs: largest difference %.3g", worst)
}

// Under BF16 the gradients are those of the float32 model up to bfloat16
// rounding: the backward pass is the float32 one with its products in
// bfloat16 (as torch's autocast does), so it is compared with the float32
// gradient, which TestModelGrad checks by finite differences.
func TestBF16Gradients(t *testing.T) {
	cfg := Config{Vocab: 11, Dim: 32, Layers: 2, Heads: 2, KVHeads: 2, FFN: 48, MaxSeq: 32, RopeTheta: 10000, NormEps: 1e-5}
	for _, value := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(11, 12))
		m, err := New(cfg, 3, value)
		if err != nil {
			t.Fatal(err)
		}
		perturbed(m, rng, 0.3)
		seqs := testSeqs(rng, cfg.Vocab)
		grads := func(bf16 bool) map[string][]float32 {
			m.BF16 = bf16
			sc := m.NewScorer()
			out, err := sc.Forward(seqs)
			if err != nil {
				t.Fatal(err)
			}
			rows := out.LogProbs
			if value {
				rows = out.Values
			}
			coef := make([][]float64, len(rows))
			r := rand.New(rand.NewPCG(5, 6))
			for q := range rows {
				coef[q] = make([]float64, len(rows[q]))
				for i := range coef[q] {
					coef[q][i] = r.NormFloat64()
				}
			}
			m.ZeroGrad()
			if err := sc.Backward(coef); err != nil {
				t.Fatal(err)
			}
			g := map[string][]float32{}
			for _, p := range m.Params() {
				g[p.Name] = slices.Clone(p.Grad)
			}
			return g
		}
		g32, g16 := grads(false), grads(true)
		for name, a := range g32 {
			b := g16[name]
			var num, den float64
			for i := range a {
				num += (float64(a[i]) - float64(b[i])) * (float64(a[i]) - float64(b[i]))
				den += float64(a[i]) * float64(a[i])
			}
			rel := math.Sqrt(num / math.Max(den, 1e-30))
			if den > 0 && (rel > 0.06 || rel == 0) {
				t.Errorf("value %v, %s: bf16 gradient differs from float32 by %.3g (relative L2; want in (0, 0.06])", value, name, rel)
			}
		}
	}
}

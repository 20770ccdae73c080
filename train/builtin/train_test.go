package builtin

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/optim"
)

// Training smoke test: on a copying task (random tokens, a separator, the
// same tokens again) the cross-entropy of the copy falls well below chance.
func TestTrainingCopiesSequence(t *testing.T) {
	cfg := model.Config{Vocab: 16, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, FFN: 64, MaxSeq: 32, RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}
	m, err := model.New(cfg, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	batch := func() []model.Seq {
		seqs := make([]model.Seq, 16)
		for i := range seqs {
			n := 6
			toks := make([]int, 0, 2*n+1)
			for j := 0; j < n; j++ {
				toks = append(toks, 1+rng.IntN(cfg.Vocab-1))
			}
			toks = append(toks, 0)
			toks = append(toks, toks[:n]...)
			seqs[i] = model.Seq{Tokens: toks, From: n + 1}
		}
		return seqs
	}
	ps := OptimParams(m)
	opt := optim.New(ps, 0.9, 0.98, 1e-8, 0.01, model.IsNorm)
	sched := optim.Schedule{Peak: 1e-2, Min: 1e-3, Warmup: 10, Total: 150}
	sc := m.NewScorer()
	steps := 150
	if testing.Short() {
		steps = 100
	}
	var first, last float64
	for s := 0; s < steps; s++ {
		m.ZeroGrad()
		loss, err := sc.CrossEntropy(batch())
		if err != nil {
			t.Fatal(err)
		}
		if s == 0 {
			first = loss
		}
		last = loss
		optim.ClipGradNorm(ps, 1)
		if err := opt.Step(ps, sched.LR(s)); err != nil {
			t.Fatal(err)
		}
	}
	chance := math.Log(float64(cfg.Vocab - 1))
	t.Logf("copy loss %.3f → %.3f (chance %.3f)", first, last, chance)
	if math.Abs(first-math.Log(float64(cfg.Vocab))) > 0.3 || last > 0.5*chance {
		t.Fatalf("copy loss %.3f → %.3f after %d steps; want below %.3f", first, last, steps, 0.5*chance)
	}
}

// The critic learns a value that depends on the context: V(x_<t) = 1 when
// token 1 has appeared before t, else 0 (squared error, AdamW).
func TestCriticRegression(t *testing.T) {
	cfg := model.Config{Vocab: 8, Dim: 32, Layers: 2, Heads: 4, KVHeads: 4, FFN: 64, MaxSeq: 32, RopeTheta: 10000, NormEps: 1e-5}
	policy, err := model.New(cfg, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	c := model.NewCritic(policy)
	rng := rand.New(rand.NewPCG(7, 8))
	ps := OptimParams(c)
	opt := optim.New(ps, 0.9, 0.98, 1e-8, 0, nil)
	sc := c.NewScorer()
	var first, last float64
	for s := 0; s < 120; s++ {
		seqs := make([]model.Seq, 16)
		targets := make([][]float64, 16)
		for i := range seqs {
			toks := make([]int, 12)
			for j := range toks {
				toks[j] = 1 + rng.IntN(cfg.Vocab-1)
			}
			seqs[i] = model.Seq{Tokens: toks, From: 1}
			seen := 0.0
			for _, tok := range toks[:len(toks)-1] {
				if tok == 1 {
					seen = 1
				}
				targets[i] = append(targets[i], seen)
			}
		}
		out, err := sc.Forward(seqs)
		if err != nil {
			t.Fatal(err)
		}
		var loss float64
		grad := make([][]float64, len(seqs))
		n := float64(len(seqs) * 11)
		for i, row := range out.Values {
			for j, v := range row {
				e := v - targets[i][j]
				loss += e * e / n
				grad[i] = append(grad[i], 2*e/n)
			}
		}
		if s == 0 {
			first = loss
		}
		last = loss
		c.ZeroGrad()
		if err := sc.Backward(grad); err != nil {
			t.Fatal(err)
		}
		if err := opt.Step(ps, 3e-3); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("value loss %.4f → %.4f", first, last)
	if last > 0.25*first || last > 0.05 {
		t.Fatalf("value loss %.4f → %.4f: the critic did not learn", first, last)
	}
}

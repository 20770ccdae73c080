package model

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// checkDirectional compares the analytic directional derivative g·u with
// the central difference (f(x+εu) − f(x−εu)) / 2ε for a few random unit
// directions u over x. f is evaluated in float64 from float32 state, so ε
// is chosen large enough (relative to x) to stay clear of rounding.
func checkDirectional(t *testing.T, name string, rng *rand.Rand, x, g []float32, f func() float64) {
	t.Helper()
	scale := 0.0
	for _, v := range x {
		scale = math.Max(scale, math.Abs(float64(v)))
	}
	eps := 1e-3 * math.Max(scale, 1) * math.Sqrt(float64(len(x)))
	for trial := 0; trial < 3; trial++ {
		u := make([]float64, len(x))
		var norm float64
		for i := range u {
			u[i] = rng.NormFloat64()
			norm += u[i] * u[i]
		}
		norm = math.Sqrt(norm)
		var an float64
		for i := range u {
			u[i] /= norm
			an += float64(g[i]) * u[i]
		}
		orig := append([]float32(nil), x...)
		for i := range x {
			x[i] = float32(float64(orig[i]) + eps*u[i])
		}
		fp := f()
		for i := range x {
			x[i] = float32(float64(orig[i]) - eps*u[i])
		}
		fm := f()
		copy(x, orig)
		fd := (fp - fm) / (2 * eps)
		var gn float64
		for _, v := range g {
			gn += float64(v) * float64(v)
		}
		tol := 2e-3*math.Abs(fd) + 1e-4*math.Sqrt(gn) + 1e-6
		if math.Abs(fd-an) > tol {
			t.Errorf("%s: directional derivative analytic %.7g, finite difference %.7g (|g| %.3g)", name, an, fd, math.Sqrt(gn))
		}
	}
}

func randVec(rng *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(std * rng.NormFloat64())
	}
	return v
}

func weighted(c, y []float32) float64 {
	var s float64
	for i := range c {
		s += float64(c[i]) * float64(y[i])
	}
	return s
}

func TestRMSNormGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n, d := 70, 12 // more rows than one normChunk
	x, c := randVec(rng, n*d, 1), randVec(rng, n*d, 1)
	w := &Param{Shape: []int{d}, Data: randVec(rng, d, 1), Grad: make([]float32, d)}
	y, r := make([]float32, n*d), make([]float32, n)
	loss := func() float64 { rmsnorm(y, r, x, w.Data, n, d, 1e-5); return weighted(c, y) }
	loss()
	dx := make([]float32, n*d)
	rmsnormBack(dx, c, x, r, w, n, d, make([]float32, 2*d))
	checkDirectional(t, "rmsnorm dx", rng, x, dx, loss)
	checkDirectional(t, "rmsnorm dw", rng, w.Data, w.Grad, loss)
}

func TestSwiGLUGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 200
	g, u, c := randVec(rng, n, 2), randVec(rng, n, 1), randVec(rng, n, 1)
	a, sg := make([]float32, n), make([]float32, n)
	loss := func() float64 { swiglu(a, sg, g, u); return weighted(c, a) }
	loss()
	dg, du := make([]float32, n), make([]float32, n)
	swigluBack(dg, du, c, sg, g, u)
	checkDirectional(t, "swiglu dg", rng, g, dg, loss)
	checkDirectional(t, "swiglu du", rng, u, du, loss)
}

func TestRopeInverseIsTranspose(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m, err := New(Config{Vocab: 8, Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, FFN: 8, MaxSeq: 64, RopeTheta: 10000, NormEps: 1e-5}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	pos := []int32{0, 5, 63}
	x, c := randVec(rng, 3*16, 1), randVec(rng, 3*16, 1)
	y := make([]float32, len(x))
	loss := func() float64 { copy(y, x); m.rope(y, pos, 2, false); return weighted(c, y) }
	dx := append([]float32(nil), c...)
	m.rope(dx, pos, 2, true)
	checkDirectional(t, "rope", rng, x, dx, loss)
	// Position 0 is the identity; rotation keeps norms.
	copy(y, x)
	m.rope(y, pos, 2, false)
	for i := 0; i < 16; i++ {
		if y[i] != x[i] {
			t.Fatalf("rope at position 0 changed element %d: %g → %g", i, x[i], y[i])
		}
	}
}

func TestAttentionGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	m, err := New(Config{Vocab: 8, Dim: 16, Layers: 1, Heads: 4, KVHeads: 2, FFN: 8, MaxSeq: 64, RopeTheta: 10000, NormEps: 1e-5}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	// The third sequence spans several attention blocks.
	pk := packed{off: []int{0, 5, 14}, len: []int{5, 9, 2*attnBlock + 7}}
	n, qw, kw := 14+2*attnBlock+7, 16, 8
	q, k, v := randVec(rng, n*qw, 1), randVec(rng, n*kw, 1), randVec(rng, n*kw, 1)
	c := randVec(rng, n*qw, 1)
	att, lse := make([]float32, n*qw), make([]float32, n*4)
	loss := func() float64 { m.attention(att, lse, q, k, v, pk); return weighted(c, att) }
	loss()
	dq, dk, dv := make([]float32, n*qw), make([]float32, n*kw), make([]float32, n*kw)
	m.attentionBack(dq, dk, dv, c, q, k, v, att, lse, pk)
	checkDirectional(t, "attention dq", rng, q, dq, loss)
	checkDirectional(t, "attention dk", rng, k, dk, loss)
	checkDirectional(t, "attention dv", rng, v, dv, loss)
	// Causality across sequences: the first row of sequence 2 attends only to itself.
	loss()
	for j := 0; j < 4; j++ {
		if d := att[5*qw+j] - v[5*kw+j]; math.Abs(float64(d)) > 1e-6 {
			t.Fatalf("first position must copy its own value: %g vs %g", att[5*qw+j], v[5*kw+j])
		}
	}
}

// testSeqs is a batch with different lengths and target starts.
func testSeqs(rng *rand.Rand, vocab int) []Seq {
	var seqs []Seq
	for _, sh := range [][2]int{{7, 3}, {4, 1}, {11, 6}} {
		toks := make([]int, sh[0])
		for i := range toks {
			toks[i] = rng.IntN(vocab)
		}
		seqs = append(seqs, Seq{Tokens: toks, From: sh[1]})
	}
	return seqs
}

func perturbed(m *Model, rng *rand.Rand, std float64) {
	for _, p := range m.Params() {
		for i := range p.Data {
			p.Data[i] += float32(std * rng.NormFloat64())
		}
	}
}

func TestModelGrad(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		value bool
	}{
		{"untied-mha", Config{Vocab: 11, Dim: 16, Layers: 2, Heads: 2, KVHeads: 2, FFN: 24, MaxSeq: 32, RopeTheta: 10000, NormEps: 1e-5}, false},
		{"tied-gqa", Config{Vocab: 13, Dim: 16, Layers: 2, Heads: 4, KVHeads: 2, FFN: 20, MaxSeq: 32, RopeTheta: 500, NormEps: 1e-6, TiedEmbeddings: true}, false},
		{"critic", Config{Vocab: 9, Dim: 16, Layers: 2, Heads: 4, KVHeads: 1, FFN: 20, MaxSeq: 32, RopeTheta: 10000, NormEps: 1e-5}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, 12))
			m, err := New(tc.cfg, 3, tc.value)
			if err != nil {
				t.Fatal(err)
			}
			perturbed(m, rng, 0.3) // large enough weights that every path matters
			seqs := testSeqs(rng, tc.cfg.Vocab)
			sc := m.NewScorer()
			var coef [][]float64
			loss := func() float64 {
				out, err := sc.Forward(seqs)
				if err != nil {
					t.Fatal(err)
				}
				rows := out.LogProbs
				if tc.value {
					rows = out.Values
				}
				if coef == nil {
					for _, r := range rows {
						c := make([]float64, len(r))
						for i := range c {
							c[i] = rng.NormFloat64()
						}
						coef = append(coef, c)
					}
				}
				var s float64
				for q, r := range rows {
					for i, v := range r {
						s += coef[q][i] * v
					}
				}
				return s
			}
			loss()
			m.ZeroGrad()
			if err := sc.Backward(coef); err != nil {
				t.Fatal(err)
			}
			grads := make(map[string][]float32)
			for _, p := range m.Params() {
				grads[p.Name] = append([]float32(nil), p.Grad...)
			}
			for _, p := range m.Params() {
				checkDirectional(t, p.Name, rng, p.Data, grads[p.Name], loss)
			}
		})
	}
}

// Gradients are bitwise identical whatever the number of threads.
func TestGradientsIndependentOfThreads(t *testing.T) {
	cfg := Config{Vocab: 500, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FFN: 256, MaxSeq: 256, RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}
	rng := rand.New(rand.NewPCG(31, 32))
	var seqs []Seq
	for _, n := range []int{150, 70, 9} {
		seqs = append(seqs, Seq{Tokens: randPrompt(rng, n, cfg.Vocab), From: n / 3})
	}
	grads := func(threads int) [][]float32 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(threads))
		m, err := New(cfg, 4, false)
		if err != nil {
			t.Fatal(err)
		}
		m.ZeroGrad()
		if _, err := m.NewScorer().CrossEntropy(seqs); err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		for _, p := range m.Params() {
			out = append(out, p.Grad)
		}
		return out
	}
	one, four := grads(1), grads(4)
	for i := range one {
		if !slices.Equal(one[i], four[i]) {
			t.Fatalf("parameter %d: gradients differ between 1 and 4 threads", i)
		}
	}
}

package model

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/optim"
)

// BenchmarkTrainStep is one training step (forward, backward, clipping,
// AdamW) of the "bench" preset on 8 sequences of 512 tokens, the shape of
// model/testdata/torch_bench.py. Reports tokens/s.
func BenchmarkTrainStep(b *testing.B) {
	cfg := Presets["bench"]
	m, err := New(cfg, 1, false)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	seqs := make([]Seq, 8)
	for i := range seqs {
		seqs[i] = Seq{Tokens: randPrompt(rng, 513, cfg.Vocab), From: 1}
	}
	ps := m.OptimParams()
	opt := optim.New(ps, 0.9, 0.999, 1e-8, 0.01, IsNorm)
	sc := m.NewScorer()
	step := func() {
		m.ZeroGrad()
		if _, err := sc.CrossEntropy(seqs); err != nil {
			b.Fatal(err)
		}
		optim.ClipGradNorm(ps, 1)
		if err := opt.Step(ps, 1e-4); err != nil {
			b.Fatal(err)
		}
	}
	step()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step()
	}
	b.ReportMetric(float64(8*512*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkDecode32 decodes 32 sequences (prompt 64, 64 new tokens each)
// of the "bench" preset. Reports generated tokens/s (prefill included in
// the time).
func BenchmarkDecode32(b *testing.B) {
	cfg := Presets["bench"]
	m, err := New(cfg, 1, false)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	reqs := make([]infer.Request, 32)
	for i := range reqs {
		reqs[i] = infer.Request{Prompt: randPrompt(rng, 64, cfg.Vocab), MaxTokens: 64, Temperature: 1, Seed: int64(i)}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Generate(context.Background(), reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(32*64*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

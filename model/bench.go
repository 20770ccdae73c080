package model

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/internal/cputime"
	"github.com/compactrl/compactrl/optim"
)

// Throughput is a measured rate: Tokens processed in Seconds of wall
// time, using CPUSeconds of process CPU time. On a shared machine
// TokensPerCPUSec·threads is the rate the engine would reach with its
// threads to itself (0 where CPU time is unavailable).
type Throughput struct {
	Tokens          int
	Seconds         float64
	TokensPerSec    float64
	CPUSeconds      float64
	TokensPerCPUSec float64
}

type stopwatch struct {
	wall time.Time
	cpu  time.Duration
}

func startWatch() stopwatch { return stopwatch{time.Now(), cputime.Process()} }

func (w stopwatch) throughput(tokens int) Throughput {
	d, c := time.Since(w.wall).Seconds(), (cputime.Process() - w.cpu).Seconds()
	t := Throughput{Tokens: tokens, Seconds: d, TokensPerSec: float64(tokens) / d, CPUSeconds: c}
	if c > 0 {
		t.TokensPerCPUSec = float64(tokens) / c
	}
	return t
}

// BenchTrain times steps training steps (forward, backward, clipping,
// AdamW) on batch random sequences of seqLen positions, after one warm-up
// step; tokens counted are batch·seqLen per step, as in
// testdata/torch_bench.py. Threads are runtime.GOMAXPROCS.
func BenchTrain(ctx context.Context, cfg Config, batch, seqLen, steps int) (Throughput, error) {
	if batch <= 0 || seqLen <= 0 || steps <= 0 || seqLen+1 > cfg.MaxSeq {
		return Throughput{}, fmt.Errorf("bench train: batch %d, seq %d, steps %d must be positive and seq < max_seq %d", batch, seqLen, steps, cfg.MaxSeq)
	}
	m, err := New(cfg, 1, false)
	if err != nil {
		return Throughput{}, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	seqs := make([]Seq, batch)
	for i := range seqs {
		toks := make([]int, seqLen+1)
		for j := range toks {
			toks[j] = rng.IntN(cfg.Vocab)
		}
		seqs[i] = Seq{Tokens: toks, From: 1}
	}
	ps := m.OptimParams()
	opt := optim.New(ps, 0.9, 0.999, 1e-8, 0.01, IsNorm)
	sc := m.NewScorer()
	step := func() error {
		m.ZeroGrad()
		if _, err := sc.CrossEntropy(seqs); err != nil {
			return err
		}
		optim.ClipGradNorm(ps, 1)
		return opt.Step(ps, 1e-4)
	}
	if err := step(); err != nil {
		return Throughput{}, err
	}
	w := startWatch()
	for s := 0; s < steps; s++ {
		if err := ctx.Err(); err != nil {
			return Throughput{}, err
		}
		if err := step(); err != nil {
			return Throughput{}, err
		}
	}
	return w.throughput(steps * batch * seqLen), nil
}

// BenchDecode times reps rounds of sampling newTokens tokens for each of
// batch random prompts of promptLen tokens in one Decoder (prefill
// included); tokens counted are the generated ones.
func BenchDecode(ctx context.Context, cfg Config, batch, promptLen, newTokens, reps int) (Throughput, error) {
	if batch <= 0 || promptLen <= 0 || newTokens <= 0 || reps <= 0 || promptLen+newTokens > cfg.MaxSeq {
		return Throughput{}, fmt.Errorf("bench decode: batch %d, prompt %d, new %d, reps %d must be positive and fit max_seq %d", batch, promptLen, newTokens, reps, cfg.MaxSeq)
	}
	m, err := New(cfg, 1, false)
	if err != nil {
		return Throughput{}, err
	}
	rng := rand.New(rand.NewPCG(3, 4))
	reqs := make([]infer.Request, batch)
	for i := range reqs {
		p := make([]int, promptLen)
		for j := range p {
			p[j] = rng.IntN(cfg.Vocab)
		}
		reqs[i] = infer.Request{Prompt: p, MaxTokens: newTokens, Temperature: 1, Seed: int64(i)}
	}
	w := startWatch()
	for r := 0; r < reps; r++ {
		if _, err := m.Generate(ctx, reqs); err != nil {
			return Throughput{}, err
		}
	}
	return w.throughput(reps * batch * newTokens), nil
}

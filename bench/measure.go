package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/internal/cputime"
	"github.com/compactrl/compactrl/kernel"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/optim"
	"github.com/compactrl/compactrl/train/builtin"
)

// Measure is a rate measured over several timed runs: Value is the median
// of Samples (one rate per run), so that a burst of other load on shared
// cores moves it less than it moves the mean. CPUShare is the engine
// process's CPU time over the timed runs divided by their wall time times
// the thread count: near 1 when the engine had (and used) every core it
// was given, lower when other load took them; 0 when unknown. Rounds, when
// the samples were taken in interleaved rounds (Run's training rows), is
// the median of each round.
type Measure struct {
	Value    float64   `json:"value"`
	Samples  []float64 `json:"samples"`
	CPUShare float64   `json:"cpu_share"`
	Rounds   []float64 `json:"rounds,omitempty"`
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func newMeasure(samples []float64, share float64) Measure {
	return Measure{Value: median(samples), Samples: samples, CPUShare: share}
}

// Train times steps training steps of the built-in model of cfg after one
// warm-up step: forward and backward of the mean cross-entropy over batch
// random sequences of seq+1 tokens (batch·seq targets), gradient-norm
// clipping to 1 and an AdamW update. Each sample is batch·seq / (wall time
// of one step), in tokens/s, on runtime.GOMAXPROCS threads.
func Train(ctx context.Context, cfg model.Config, batch, seq, steps int) (Measure, error) {
	if steps <= 0 {
		return Measure{}, fmt.Errorf("bench train: steps %d must be positive", steps)
	}
	tr, err := newTrainer(cfg, batch, seq, false)
	if err != nil {
		return Measure{}, err
	}
	r, err := tr.round(ctx, steps)
	if err != nil {
		return Measure{}, err
	}
	return tr.result([]trainRound{r}), nil
}

// trainer is the built-in engine's training step on one model and batch,
// warmed up, timed in rounds (Run interleaves them with PyTorch's).
type trainer struct {
	step   func() error
	tokens int
}

// trainRound is one round's wall time per step and process CPU time.
type trainRound struct {
	stepS []time.Duration
	cpu   time.Duration
}

// newTrainer builds the model of cfg (its products in bfloat16 when bf16:
// model.Model.BF16), the batch and the optimiser of Train and runs the
// warm-up step.
func newTrainer(cfg model.Config, batch, seq int, bf16 bool) (*trainer, error) {
	if batch <= 0 || seq <= 0 {
		return nil, fmt.Errorf("bench train: batch %d and seq %d must be positive", batch, seq)
	}
	if seq+1 > cfg.MaxSeq {
		return nil, fmt.Errorf("bench train: seq %d + 1 exceeds max_seq %d", seq, cfg.MaxSeq)
	}
	m, err := model.New(cfg, 1, false)
	if err != nil {
		return nil, fmt.Errorf("bench train: %w", err)
	}
	m.BF16 = bf16
	rng := rand.New(rand.NewPCG(1, 2))
	seqs := make([]model.Seq, batch)
	for i := range seqs {
		toks := make([]int, seq+1)
		for j := range toks {
			toks[j] = rng.IntN(cfg.Vocab)
		}
		seqs[i] = model.Seq{Tokens: toks, From: 1}
	}
	ps := builtin.OptimParams(m)
	opt := optim.New(ps, 0.9, 0.999, 1e-8, 0.01, model.IsNorm)
	sc := m.NewScorer()
	step := func() error {
		m.ZeroGrad()
		loss, err := sc.CrossEntropy(seqs)
		if err != nil {
			return err
		}
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return fmt.Errorf("loss is %g", loss)
		}
		optim.ClipGradNorm(ps, 1)
		return opt.Step(ps, 1e-4)
	}
	if err := step(); err != nil {
		return nil, fmt.Errorf("bench train warm-up step: %w", err)
	}
	return &trainer{step: step, tokens: batch * seq}, nil
}

// round times steps steps.
func (t *trainer) round(ctx context.Context, steps int) (trainRound, error) {
	var r trainRound
	cpu0 := cputime.Process()
	for s := range steps {
		if err := ctx.Err(); err != nil {
			return trainRound{}, err
		}
		t0 := time.Now()
		if err := t.step(); err != nil {
			return trainRound{}, fmt.Errorf("bench train step %d: %w", s+1, err)
		}
		r.stepS = append(r.stepS, time.Since(t0))
	}
	r.cpu = cputime.Process() - cpu0
	return r, nil
}

// result gathers rounds into a Measure: one rate per step, the median of
// each round, the CPU share over every timed step.
func (t *trainer) result(rounds []trainRound) Measure {
	var samples, per []float64
	var wall, cpu time.Duration
	for _, r := range rounds {
		var rs []float64
		for _, d := range r.stepS {
			rs = append(rs, float64(t.tokens)/d.Seconds())
			wall += d
		}
		cpu += r.cpu
		samples = append(samples, rs...)
		per = append(per, median(rs))
	}
	m := newMeasure(samples, cpuShare(cpu, wall, runtime.GOMAXPROCS(0)))
	m.Rounds = per
	return m
}

// DecodeResult is batched generation throughput, in generated tokens/s.
// Decode is the steady state: the batch·(tokens−1) tokens sampled after
// the first, over the time from the end of the prefill to the last token
// (each of those tokens costs one decode forward of the whole batch).
// Generate counts all batch·tokens tokens over the whole run, prefill of
// the prompts included.
type DecodeResult struct {
	Decode   Measure `json:"decode"`
	Generate Measure `json:"generate"`
}

// Prompts draws batch prompts of n token ids from pick, a seeded stream:
// the same prompts for every engine.
func Prompts(batch, n int, pick func(r *rand.Rand) int) [][]int {
	rng := rand.New(rand.NewPCG(3, 4))
	ps := make([][]int, batch)
	for i := range ps {
		ps[i] = make([]int, n)
		for j := range ps[i] {
			ps[i][j] = pick(rng)
		}
	}
	return ps
}

// Decode times reps rounds of sampling tokens new tokens (temperature 1,
// no truncation, no stop token) for every prompt at once in one
// model.Decoder with its KV cache, after a short warm-up round. A round's
// first Step is the prefill; the other tokens−1 Steps are decode steps.
func Decode(ctx context.Context, m *model.Model, prompts [][]int, tokens, reps int) (DecodeResult, error) {
	if reps <= 0 {
		return DecodeResult{}, fmt.Errorf("bench decode: %d reps must be positive", reps)
	}
	d, err := newDecodeRounds(ctx, m, prompts, tokens)
	if err != nil {
		return DecodeResult{}, err
	}
	for range reps {
		if err := d.round(ctx); err != nil {
			return DecodeResult{}, err
		}
	}
	return d.result(), nil
}

// decodeRounds times the built-in decoder one round at a time, so that
// Run can interleave its rounds with llama.cpp's (see Decode).
type decodeRounds struct {
	m       *model.Model
	prompts [][]int
	tokens  int
	tally   roundTally
}

// roundTally gathers one engine's timed decode rounds: each round's rates,
// and the wall time and its process's CPU time summed over the rounds.
type roundTally struct {
	cpu, wall time.Duration
	dec, gen  []float64
}

func (r *roundTally) add(decode, generate float64, wall, cpu time.Duration) {
	r.dec, r.gen = append(r.dec, decode), append(r.gen, generate)
	r.wall += wall
	r.cpu += cpu
}

// result is the rounds' medians, each round its own Rounds entry, with the
// process's CPU share of threads cores.
func (r *roundTally) result(threads int) DecodeResult {
	share := cpuShare(r.cpu, r.wall, threads)
	dec, gen := newMeasure(r.dec, share), newMeasure(r.gen, share)
	dec.Rounds, gen.Rounds = r.dec, r.gen
	return DecodeResult{Decode: dec, Generate: gen}
}

// newDecodeRounds checks the arguments and runs the warm-up round.
func newDecodeRounds(ctx context.Context, m *model.Model, prompts [][]int, tokens int) (*decodeRounds, error) {
	if len(prompts) == 0 || tokens < 2 {
		return nil, fmt.Errorf("bench decode: %d prompts and %d tokens (≥ 2) must be positive", len(prompts), tokens)
	}
	d := &decodeRounds{m: m, prompts: prompts, tokens: tokens}
	if _, _, _, err := d.run(ctx, min(tokens, 8)); err != nil {
		return nil, err
	}
	return d, nil
}

// round times one round of d.tokens new tokens a prompt.
func (d *decodeRounds) round(ctx context.Context) error {
	cpu0 := cputime.Process()
	dec, gen, wall, err := d.run(ctx, d.tokens)
	if err != nil {
		return err
	}
	d.tally.add(dec, gen, wall, cputime.Process()-cpu0)
	return nil
}

// result is the rounds' medians; each round is its own Rounds entry.
func (d *decodeRounds) result() DecodeResult { return d.tally.result(runtime.GOMAXPROCS(0)) }

// run samples n new tokens for every prompt in a new Decoder and returns
// the decode and generate rates and the wall time from the prefill on.
func (d *decodeRounds) run(ctx context.Context, n int) (decode, generate float64, wall time.Duration, err error) {
	dec := d.m.NewDecoder()
	for i, p := range d.prompts {
		if len(p)+n > d.m.Cfg.MaxSeq {
			return 0, 0, 0, fmt.Errorf("bench decode: prompt %d of %d tokens + %d new exceeds max_seq %d", i, len(p), n, d.m.Cfg.MaxSeq)
		}
		if _, err := dec.Add(infer.Request{Prompt: p, MaxTokens: n, Temperature: 1, Seed: int64(i)}); err != nil {
			return 0, 0, 0, fmt.Errorf("bench decode: prompt %d: %w", i, err)
		}
	}
	t0 := time.Now()
	finished := len(dec.Step())
	t1 := time.Now()
	for s := 1; s < n; s++ {
		if err := ctx.Err(); err != nil {
			return 0, 0, 0, err
		}
		finished += len(dec.Step())
	}
	t2 := time.Now()
	if finished != len(d.prompts) || dec.Active() != 0 {
		return 0, 0, 0, fmt.Errorf("bench decode: %d of %d sequences finished after %d steps", finished, len(d.prompts), n)
	}
	b := float64(len(d.prompts))
	return b * float64(n-1) / t2.Sub(t1).Seconds(), b * float64(n) / t2.Sub(t0).Seconds(), t2.Sub(t0), nil
}

// GemmShape is one product C[M×N] = op(A)·op(B) with depth K.
type GemmShape struct {
	Name           string `json:"name"`
	TransA, TransB bool   `json:"-"`
	M, N, K        int    `json:"-"`
	// Packed measures kernel.GemmPacked with op(B) packed once before the timing, as the
	// decoder multiplies by its weights (TransA must be false).
	Packed bool `json:"-"`
}

// Flops is 2·M·N·K.
func (s GemmShape) Flops() float64 { return 2 * float64(s.M) * float64(s.N) * float64(s.K) }

// Gemm measures kernel.Gemm on shape s in GFLOP/s (2·M·N·K flops a call),
// on runtime.GOMAXPROCS threads: samples timed batches of calls, each
// batch about total/samples long, after one warm-up call.
func Gemm(ctx context.Context, s GemmShape, total time.Duration, samples int) (Measure, error) {
	if s.M <= 0 || s.N <= 0 || s.K <= 0 || samples <= 0 {
		return Measure{}, fmt.Errorf("bench gemm %s: dimensions %d×%d×%d and samples %d must be positive", s.Name, s.M, s.N, s.K, samples)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	a, b, c := fill(s.M*s.K), fill(s.K*s.N), make([]float32, s.M*s.N)
	lda, ldb := s.K, s.N
	if s.TransA {
		lda = s.M
	}
	if s.TransB {
		ldb = s.K
	}
	call := func() { kernel.Gemm(s.TransA, s.TransB, s.M, s.N, s.K, 1, a, lda, b, ldb, 0, c, s.N) }
	if s.Packed {
		if s.TransA {
			return Measure{}, fmt.Errorf("bench gemm %s: a packed product has A not transposed", s.Name)
		}
		pb := kernel.PackB(s.TransB, s.N, s.K, b, ldb)
		call = func() { kernel.GemmPacked(s.M, 1, a, lda, pb, 0, c, s.N) }
	}
	t0 := time.Now()
	call()
	one := max(time.Since(t0), time.Microsecond)
	iters := max(1, int(total/time.Duration(samples)/one))
	out := make([]float64, 0, samples)
	var wall time.Duration
	cpu0 := cputime.Process()
	for range samples {
		if err := ctx.Err(); err != nil {
			return Measure{}, err
		}
		t0 := time.Now()
		for range iters {
			call()
		}
		d := time.Since(t0)
		wall += d
		out = append(out, s.Flops()*float64(iters)/d.Seconds()/1e9)
	}
	share := cpuShare(cputime.Process()-cpu0, wall, runtime.GOMAXPROCS(0))
	for _, v := range c {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return Measure{}, fmt.Errorf("bench gemm %s: non-finite result", s.Name)
		}
	}
	return newMeasure(out, share), nil
}

// ModelShapes are the products the built-in model runs for cfg: the
// training step's projections x·Wᵀ over batch·seq rows (attention, MLP,
// language-model head), the weight gradient dyᵀ·x of the MLP, and the
// batched decode step's MLP projection over decodeBatch rows.
func ModelShapes(cfg model.Config, batch, seq, decodeBatch int) []GemmShape {
	n := batch * seq
	d := cfg.Dim
	return []GemmShape{
		{Name: fmt.Sprintf("train x·Wqᵀ %d×%d×%d", n, cfg.Heads*cfg.HeadDim(), d), TransB: true, M: n, N: cfg.Heads * cfg.HeadDim(), K: d},
		{Name: fmt.Sprintf("train x·Wgᵀ %d×%d×%d", n, cfg.FFN, d), TransB: true, M: n, N: cfg.FFN, K: d},
		{Name: fmt.Sprintf("train x·Wdᵀ %d×%d×%d", n, d, cfg.FFN), TransB: true, M: n, N: d, K: cfg.FFN},
		{Name: fmt.Sprintf("train head %d×%d×%d", n, cfg.Vocab, d), TransB: true, M: n, N: cfg.Vocab, K: d},
		{Name: fmt.Sprintf("train dWg = dyᵀ·x %d×%d×%d", cfg.FFN, d, n), TransA: true, M: cfg.FFN, N: d, K: n},
		{Name: fmt.Sprintf("decode x·Wgᵀ %d×%d×%d", decodeBatch, cfg.FFN, d), TransB: true, M: decodeBatch, N: cfg.FFN, K: d},
		{Name: fmt.Sprintf("decode x·Wgᵀ %d×%d×%d, W packed once (the decoder's)", decodeBatch, cfg.FFN, d), TransB: true, M: decodeBatch, N: cfg.FFN, K: d, Packed: true},
	}
}

// SquareShapes are the n×n×n products (no transposes) of docs/design.md §6's table.
func SquareShapes(ns ...int) []GemmShape {
	out := make([]GemmShape, len(ns))
	for i, n := range ns {
		out[i] = GemmShape{Name: fmt.Sprintf("%d³", n), M: n, N: n, K: n}
	}
	return out
}

package train

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/internal/splitmix"
)

// bigram is a small but real differentiable model for the trainer's tests:
// π(x_j | x_{j−1}) = softmax(W[x_{j−1}]) for a policy, V = W[x_{j−1}][0]
// for a critic, trained with Adam and global-norm clipping. It implements
// Model, Policy and (through its published copy) infer.Sampler.
type bigram struct {
	V        int
	value    bool
	W, G     []float64
	M, S     []float64 // Adam moments
	Steps    int
	gradClip float64

	last []Sequence
	mu   sync.RWMutex
	pub  []float64
}

func newBigram(v int, value bool, seed int64) *bigram {
	n := v * v
	if value {
		n = v
	}
	b := &bigram{V: v, value: value, W: make([]float64, n), G: make([]float64, n), M: make([]float64, n), S: make([]float64, n), gradClip: 1}
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	for i := range b.W {
		b.W[i] = 0.01 * r.NormFloat64()
	}
	return b
}

func (b *bigram) ctxTok(s Sequence, j int) int {
	if j == 0 {
		return s.Prompt[len(s.Prompt)-1]
	}
	return s.Response[j-1]
}

func logSoftmax(row []float64) []float64 {
	mx := math.Inf(-1)
	for _, x := range row {
		mx = math.Max(mx, x)
	}
	var z float64
	for _, x := range row {
		z += math.Exp(x - mx)
	}
	out := make([]float64, len(row))
	for i, x := range row {
		out[i] = x - mx - math.Log(z)
	}
	return out
}

func (b *bigram) Forward(ctx context.Context, seqs []Sequence, grad bool) ([]Output, error) {
	outs := make([]Output, len(seqs))
	for i, s := range seqs {
		for j, tok := range s.Response {
			c := b.ctxTok(s, j)
			if b.value {
				outs[i].Values = append(outs[i].Values, b.W[c])
				continue
			}
			ls := logSoftmax(b.W[c*b.V : (c+1)*b.V])
			h := 0.0
			for _, l := range ls {
				h -= math.Exp(l) * l
			}
			outs[i].Logprobs = append(outs[i].Logprobs, ls[tok])
			outs[i].Entropy = append(outs[i].Entropy, h)
		}
	}
	if grad {
		b.last = seqs
	}
	return outs, nil
}

func (b *bigram) Backward(ctx context.Context, dout [][]float64) error {
	if len(dout) != len(b.last) {
		return fmt.Errorf("backward: %d gradients for %d sequences", len(dout), len(b.last))
	}
	for i, s := range b.last {
		for j, tok := range s.Response {
			d := dout[i][j]
			if d == 0 {
				continue
			}
			c := b.ctxTok(s, j)
			if b.value {
				b.G[c] += d
				continue
			}
			ls := logSoftmax(b.W[c*b.V : (c+1)*b.V])
			for k, l := range ls {
				g := -math.Exp(l)
				if k == tok {
					g++
				}
				b.G[c*b.V+k] += d * g
			}
		}
	}
	b.last = nil
	return nil
}

func (b *bigram) Step(ctx context.Context, lr float64) (float64, error) {
	var n2 float64
	for _, g := range b.G {
		n2 += g * g
	}
	norm := math.Sqrt(n2)
	scale := 1.0
	if b.gradClip > 0 && norm > b.gradClip {
		scale = b.gradClip / norm
	}
	b.Steps++
	const b1, b2, eps = 0.9, 0.999, 1e-8
	c1, c2 := 1-math.Pow(b1, float64(b.Steps)), 1-math.Pow(b2, float64(b.Steps))
	for i, g := range b.G {
		g *= scale
		b.M[i] = b1*b.M[i] + (1-b1)*g
		b.S[i] = b2*b.S[i] + (1-b2)*g*g
		b.W[i] -= lr * (b.M[i] / c1) / (math.Sqrt(b.S[i]/c2) + eps)
		b.G[i] = 0
	}
	return norm, nil
}

type bigramState struct {
	W, M, S []float64
	Steps   int
}

func (b *bigram) Save(dir string) error {
	js, err := json.Marshal(bigramState{b.W, b.M, b.S, b.Steps})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "bigram.json"), js, 0o644)
}

func (b *bigram) Load(dir string) error {
	js, err := os.ReadFile(filepath.Join(dir, "bigram.json"))
	if err != nil {
		return err
	}
	var st bigramState
	if err := json.Unmarshal(js, &st); err != nil {
		return err
	}
	if len(st.W) != len(b.W) {
		return fmt.Errorf("load %s: %d weights, want %d", dir, len(st.W), len(b.W))
	}
	b.W, b.M, b.S, b.Steps = st.W, st.M, st.S, st.Steps
	return nil
}

func (b *bigram) Publish(ctx context.Context) error {
	b.mu.Lock()
	b.pub = append([]float64(nil), b.W...)
	b.mu.Unlock()
	return nil
}

func (b *bigram) Sampler() infer.Sampler { return bigramSampler{b} }

type bigramSampler struct{ b *bigram }

// Sample draws from softmax(W[prev]/T) of the published weights; the
// log-probs are those of the temperature-1 policy (the trainer's π_old
// when T = 1).
func (s bigramSampler) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	s.b.mu.RLock()
	w := s.b.pub
	s.b.mu.RUnlock()
	if w == nil {
		return infer.Completion{}, fmt.Errorf("sampler: no published weights")
	}
	V := s.b.V
	r := rand.New(rand.NewPCG(uint64(req.Seed), 11))
	prev := req.Prompt[len(req.Prompt)-1]
	var c infer.Completion
	for len(c.Tokens) < req.MaxTokens {
		ls := logSoftmax(w[prev*V : (prev+1)*V])
		var tok int
		if req.Temperature == 0 {
			for k := range ls {
				if ls[k] > ls[tok] {
					tok = k
				}
			}
		} else {
			u := r.Float64()
			acc := 0.0
			scaled := make([]float64, V)
			for k := range ls {
				scaled[k] = ls[k] / req.Temperature
			}
			ps := logSoftmax(scaled)
			tok = V - 1
			for k, l := range ps {
				acc += math.Exp(l)
				if u < acc {
					tok = k
					break
				}
			}
		}
		c.Tokens = append(c.Tokens, tok)
		c.Logprobs = append(c.Logprobs, ls[tok])
		prev = tok
	}
	c.FinishReason = infer.FinishLength
	return c, nil
}

// memoryTask is the trainer tests' toy of the suite: task k = seed mod K is
// shown once; the policy writes a one-token summary (segment 1, kind
// summary; the expert writes K+k), the context is compacted to that
// summary, and the answer must be (k+1) mod K (segment 2, with a mask-0 observation token after it). The
// reward therefore needs a summary that kept the task: summary training
// matters, and cross-segment credit assignment too. In single-window mode
// the task stays in view and the episode is one segment.
type memoryTask struct {
	K, V    int
	workers int
	obs     int // the observation token

	mu    sync.Mutex
	calls int
	// beforeCollect, if set, runs at the start of every Collect call.
	beforeCollect func(call int) error
}

func newMemoryTask() *memoryTask { return &memoryTask{K: 4, V: 10, workers: 3, obs: 9} }

func (m *memoryTask) episode(ctx context.Context, s infer.Sampler, seed, sampleSeed int64, temp float64, single bool, expertP float64, expert *rand.Rand) (episode.Episode, error) {
	k := int(seed % int64(m.K))
	ep := episode.Episode{ID: fmt.Sprintf("mem-%d-%d", seed, sampleSeed), Task: fmt.Sprint(seed), Status: episode.StatusOK, Metrics: map[string]float64{}}
	draw := func(prompt []int, call int64) (int, float64, error) {
		if expert != nil {
			return -1, 0, nil
		}
		c, err := s.Sample(ctx, infer.Request{Prompt: prompt, MaxTokens: 1, Temperature: temp, Seed: splitmix.Chain(sampleSeed, call)})
		if err != nil {
			return 0, 0, err
		}
		return c.Tokens[0], c.Logprobs[0], nil
	}
	if single {
		a, lp, err := draw([]int{k}, 0)
		if err != nil {
			return ep, err
		}
		if expert != nil {
			a = (k + 1) % m.K
		}
		ep.Segments = []episode.Segment{{Kind: episode.KindExec, Trainable: true, PromptIDs: []int{k}, ResponseIDs: []int{a, m.obs}, LossMask: []int{1, 0}, Logprobs: []float64{lp, 0}}}
		if a == (k+1)%m.K {
			ep.Reward = 1
		}
		ep.Metrics["turns"] = 1
		return ep, nil
	}
	sum, lp1, err := draw([]int{k}, 0)
	if err != nil {
		return ep, err
	}
	if expert != nil {
		sum = m.K + k
		if expert.Float64() >= expertP {
			sum = m.K + expert.IntN(m.K)
		}
	}
	ans, lp2, err := draw([]int{sum}, 1)
	if err != nil {
		return ep, err
	}
	if expert != nil {
		ans = (sum - m.K + 1) % m.K
	}
	ep.Segments = []episode.Segment{
		{Kind: episode.KindSummary, Trainable: true, PromptIDs: []int{k}, ResponseIDs: []int{sum}, LossMask: []int{1}, Logprobs: []float64{lp1}},
		{Kind: episode.KindExec, Trainable: true, PromptIDs: []int{sum}, ResponseIDs: []int{ans, m.obs}, LossMask: []int{1, 0}, Logprobs: []float64{lp2, 0}},
	}
	if ans == (k+1)%m.K {
		ep.Reward = 1
	}
	q := 0.0
	if sum == m.K+k {
		q = 1
	}
	ep.Metrics["compactions"] = 1
	ep.Metrics["turns"] = 2
	ep.Metrics["summary_quality"] = q
	return ep, nil
}

func (m *memoryTask) Collect(ctx context.Context, r Rollouts) ([]episode.Episode, error) {
	m.mu.Lock()
	m.calls++
	call := m.calls
	m.mu.Unlock()
	if m.beforeCollect != nil {
		if err := m.beforeCollect(call); err != nil {
			return nil, err
		}
	}
	out := make([]episode.Episode, len(r.Seeds))
	errs := make([]error, len(r.Seeds))
	jobs := make(chan int)
	var wg sync.WaitGroup
	var done int
	var dmu sync.Mutex
	for w := 0; w < m.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				out[j], errs[j] = m.episode(ctx, r.Sampler, r.Seeds[j], r.SampleSeeds[j], r.Temperature, r.NoCompaction, 0, nil)
				dmu.Lock()
				done++
				if r.Progress != nil {
					r.Progress(done, len(r.Seeds))
				}
				dmu.Unlock()
			}
		}()
	}
	for j := range r.Seeds {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, ctx.Err()
}

func (m *memoryTask) Demonstrations(ctx context.Context, seeds, _ []int64, p float64) ([]episode.Episode, error) {
	out := make([]episode.Episode, len(seeds))
	for j, s := range seeds {
		var err error
		r := rand.New(rand.NewPCG(uint64(s), 3))
		if out[j], err = m.episode(ctx, nil, s, 0, 0, false, p, r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

package local

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/model"
)

func testModel(t *testing.T, seed int64) *model.Model {
	t.Helper()
	cfg := model.Config{Vocab: 40, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, FFN: 48, MaxSeq: 128, RopeTheta: 10000, NormEps: 1e-5}
	m, err := model.New(cfg, seed, false)
	if err != nil {
		t.Fatal(err)
	}
	// Sharpen the random model so that samples depend visibly on the weights.
	for _, p := range m.Params() {
		for i := range p.Data {
			p.Data[i] *= 8
		}
	}
	return m
}

func request(i int) infer.Request {
	p := make([]int, 3+i%7)
	for j := range p {
		p[j] = (i*7 + j*3) % 40
	}
	return infer.Request{Prompt: p, MaxTokens: 5 + i%9, Temperature: 1, TopP: 0.95, Seed: int64(i), Stop: []int{39}}
}

// bitDiff describes the first difference between two completions' tokens,
// finish reasons or log-probabilities (compared bit for bit), or returns "".
func bitDiff(a, b infer.Completion) string {
	for i := range min(len(a.Tokens), len(b.Tokens)) {
		if a.Tokens[i] != b.Tokens[i] {
			return fmt.Sprintf("token %d is %d, not %d", i, a.Tokens[i], b.Tokens[i])
		}
		if math.Float64bits(a.Logprobs[i]) != math.Float64bits(b.Logprobs[i]) {
			return fmt.Sprintf("token %d has log-prob %v, not %v", i, a.Logprobs[i], b.Logprobs[i])
		}
	}
	if len(a.Tokens) != len(b.Tokens) || a.FinishReason != b.FinishReason {
		return fmt.Sprintf("%d tokens (%s), not %d (%s)", len(a.Tokens), a.FinishReason, len(b.Tokens), b.FinishReason)
	}
	return ""
}

// Concurrent calls joining and leaving the batch at different steps get
// what each request gets when decoded alone (model.Generate), to the bit.
func TestConcurrentSamplesMatchSolo(t *testing.T) {
	m := testModel(t, 1)
	s, err := New(m, Options{MaxBatch: 5, PrefillChunk: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 24
	if testing.Short() {
		n = 10
	}
	got := make([]infer.Completion, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := s.Sample(context.Background(), request(i))
			if err != nil {
				t.Error(err)
			}
			got[i] = c
		}()
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		want, err := m.Generate(context.Background(), []infer.Request{request(i)})
		if err != nil {
			t.Fatal(err)
		}
		if d := bitDiff(got[i], want[0]); d != "" {
			t.Fatalf("request %d: engine, %s solo", i, d)
		}
	}
}

func TestPublishSwitchesWeights(t *testing.T) {
	a, b := testModel(t, 1), testModel(t, 2)
	s, err := New(a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := request(3)
	wantA, _ := a.Generate(context.Background(), []infer.Request{req})
	wantB, _ := b.Generate(context.Background(), []infer.Request{req})
	if bitDiff(wantA[0], wantB[0]) == "" {
		t.Fatal("test models too similar")
	}
	c, err := s.Sample(context.Background(), req)
	if err != nil || bitDiff(c, wantA[0]) != "" {
		t.Fatalf("before publish: %v %v", c, err)
	}
	if err := s.Publish(b); err != nil {
		t.Fatal(err)
	}
	// Changing b after Publish must not affect the engine's copy.
	for _, p := range b.Params() {
		clear(p.Data)
	}
	c, err = s.Sample(context.Background(), req)
	if err != nil || bitDiff(c, wantB[0]) != "" {
		t.Fatalf("after publish: %v %v, want %v", c, err, wantB[0])
	}
}

func TestCancelBadRequestAndClose(t *testing.T) {
	s, err := New(testModel(t, 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Sample(ctx, request(1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	if _, err := s.Sample(context.Background(), infer.Request{Prompt: []int{99}}); err == nil {
		t.Fatal("out-of-vocab prompt accepted")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	long := infer.Request{Prompt: []int{1}, MaxTokens: 100000, Temperature: 1}
	if _, err := s.Sample(ctx2, long); !errors.Is(err, context.DeadlineExceeded) && err != nil {
		t.Fatalf("deadline: %v", err)
	}
	if c, err := s.Sample(context.Background(), request(2)); err != nil || len(c.Tokens) == 0 {
		t.Fatalf("engine unusable after a cancelled call: %v %v", c, err)
	}
	s.Close()
	if _, err := s.Sample(context.Background(), request(2)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestPrefixCacheAcrossCalls(t *testing.T) {
	m := testModel(t, 1)
	s, err := New(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := request(4)
	c1, err := s.Sample(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	next := first
	next.Prompt = append(append(slices.Clone(first.Prompt), c1.Tokens...), 5, 6, 7)
	if _, err := s.Sample(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Reused != len(first.Prompt)+len(c1.Tokens)-1 || st.Generated == 0 {
		t.Fatalf("stats %+v: want %d reused positions", st, len(first.Prompt)+len(c1.Tokens)-1)
	}
	off, err := New(m, Options{PrefixCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	off.Sample(context.Background(), first)
	off.Sample(context.Background(), next)
	if st := off.Stats(); st.Reused != 0 {
		t.Fatalf("disabled cache reused %d positions", st.Reused)
	}
}

// varied returns request i of a set with prompts of 1 to 80 tokens (past
// one attention block of 64), a few sampling settings and its own seed.
func varied(i int) infer.Request {
	n := 1 + i*37%80
	p := make([]int, n)
	for j := range p {
		p[j] = (i*11 + j*j*5 + j) % 39
	}
	r := infer.Request{Prompt: p, MaxTokens: 4 + i*5%17, Temperature: 1, Seed: int64(1000 + i), Stop: []int{39}}
	switch i % 4 {
	case 1:
		r.TopP = 0.9
	case 2:
		r.Temperature = 0.7
	case 3:
		r.Temperature = 0
	}
	return r
}

// A request's tokens and log-probabilities are bit-for-bit those it gets
// alone (one request at a time, no prefix cache, no prefill chunking), when
// it runs among many concurrent requests of other lengths: other batch
// compositions, prompts split into prefill chunks, and (second wave)
// prompts that extend finished requests, served from the prefix cache.
func TestBitIdenticalWhateverTheBatch(t *testing.T) {
	m := testModel(t, 1)
	solo, err := New(m, Options{MaxBatch: 1, PrefixCacheBytes: -1, PrefillChunk: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer solo.Close()
	crowd, err := New(m, Options{MaxBatch: 12, PrefillChunk: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer crowd.Close()
	n := 24
	if testing.Short() {
		n = 12
	}
	// playAll runs reqs concurrently on crowd, along with as many fillers.
	playAll := func(reqs []infer.Request) []infer.Completion {
		got := make([]infer.Completion, len(reqs))
		var wg sync.WaitGroup
		for i := range 2 * len(reqs) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := varied(500 + i)
				if i < len(reqs) {
					req = reqs[i]
				}
				c, err := crowd.Sample(context.Background(), req)
				if err != nil {
					t.Error(err)
				}
				if i < len(reqs) {
					got[i] = c
				}
			}()
		}
		wg.Wait()
		return got
	}
	check := func(wave string, reqs []infer.Request, got []infer.Completion) {
		t.Helper()
		for i, req := range reqs {
			want, err := solo.Sample(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if d := bitDiff(got[i], want); d != "" {
				t.Errorf("%s request %d (%d prompt tokens): among others, %s alone", wave, i, len(req.Prompt), d)
			}
		}
	}
	first := make([]infer.Request, n)
	for i := range first {
		first[i] = varied(i)
	}
	got := playAll(first)
	check("first wave", first, got)
	// Agent-like next turns: previous prompt ⊕ completion ⊕ new tokens.
	second := make([]infer.Request, n)
	for i, r := range first {
		r.Prompt = append(append(slices.Clone(r.Prompt), got[i].Tokens...), 1+i%30, 2, 3+i%5)
		r.Prompt = r.Prompt[:min(len(r.Prompt), 100)]
		r.Seed += 7
		second[i] = r
	}
	before := crowd.Stats()
	got2 := playAll(second)
	check("second wave", second, got2)
	st := crowd.Stats()
	if st.Reused == before.Reused {
		t.Error("second wave reused no cached prefix: the test does not cover prefix-cache hits")
	}
	if st.Generated <= st.Steps {
		t.Errorf("%d tokens sampled in %d forwards: the test does not cover batched decoding", st.Generated, st.Steps)
	}
}

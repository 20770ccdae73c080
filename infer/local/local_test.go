package local

import (
	"context"
	"errors"
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

func sameCompletion(a, b infer.Completion) bool {
	if !slices.Equal(a.Tokens, b.Tokens) || a.FinishReason != b.FinishReason {
		return false
	}
	for i := range a.Logprobs {
		if math.Abs(a.Logprobs[i]-b.Logprobs[i]) > 1e-4*(1+math.Abs(b.Logprobs[i])) {
			return false
		}
	}
	return true
}

// Concurrent calls joining and leaving the batch at different steps get
// what each request gets when decoded alone.
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
		if !sameCompletion(got[i], want[0]) {
			t.Fatalf("request %d: engine %v, solo %v", i, got[i], want[0])
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
	if sameCompletion(wantA[0], wantB[0]) {
		t.Fatal("test models too similar")
	}
	c, err := s.Sample(context.Background(), req)
	if err != nil || !sameCompletion(c, wantA[0]) {
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
	if err != nil || !sameCompletion(c, wantB[0]) {
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

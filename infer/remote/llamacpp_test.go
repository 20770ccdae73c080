package remote

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactrl/compactrl/infer"
)

// rawStep is one generated position as the server reports it with the full
// (vocabulary-sized) top list of raw log-probs log softmax(z).
type rawStep struct {
	ID   int
	Dist map[int]float64
}

// rawDistribution asks the server directly (not through LlamaCpp) for the
// same sampling as req, with the raw log-probs of the top vocab tokens at
// each position (the whole vocabulary when vocab = testVocab) and of the
// chosen token.
func rawDistribution(t *testing.T, url string, req infer.Request, vocab int) ([]rawStep, string) {
	t.Helper()
	body := map[string]any{
		"prompt": req.Prompt, "max_tokens": req.MaxTokens, "temperature": req.Temperature,
		"top_p": topP(req), "top_k": 0, "min_p": 0, "typical_p": 1, "repeat_penalty": 1,
		"samplers": llamaSamplers, "seed": llamaSeed(req.Seed), "logprobs": vocab,
	}
	var out struct {
		Choices []struct {
			Text     string `json:"text"`
			Logprobs struct {
				Content []struct {
					ID      int     `json:"id"`
					Logprob float64 `json:"logprob"`
					Top     []struct {
						ID      int     `json:"id"`
						Logprob float64 `json:"logprob"`
					} `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := postJSON(context.Background(), httpClient(nil), url+"/v1/completions", body, &out); err != nil {
		t.Fatal(err)
	}
	var steps []rawStep
	for _, c := range out.Choices[0].Logprobs.Content {
		d := map[int]float64{}
		for _, e := range c.Top {
			d[e.ID] = e.Logprob
		}
		if len(d) != vocab {
			t.Fatalf("raw distribution has %d entries, want %d", len(d), vocab)
		}
		if lp, ok := d[c.ID]; ok && lp != c.Logprob {
			t.Fatalf("chosen token %d logprob %v differs from its top entry %v", c.ID, c.Logprob, lp)
		}
		d[c.ID] = c.Logprob
		steps = append(steps, rawStep{c.ID, d})
	}
	return steps, out.Choices[0].Text
}

// samplingLogprob is log q(id) for q the distribution llama.cpp samples
// from with the chain temperature → top-p: q ∝ exp(z/T) on the smallest
// prefix (by descending q) whose mass reaches top_p, renormalised. It
// returns ok=false when id is outside the nucleus.
func samplingLogprob(raw map[int]float64, id int, temp, topP float64) (float64, bool) {
	type e struct {
		id int
		x  float64
	}
	es := make([]e, 0, len(raw))
	m := math.Inf(-1)
	for k, v := range raw {
		es = append(es, e{k, v / temp})
		m = math.Max(m, v/temp)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].x > es[j].x })
	z := 0.0
	for _, x := range es {
		z += math.Exp(x.x - m)
	}
	cum, keep := 0.0, len(es)
	for i, x := range es {
		cum += math.Exp(x.x-m) / z
		if cum >= topP {
			keep = i + 1
			break
		}
	}
	zk := 0.0
	in := false
	for _, x := range es[:keep] {
		zk += math.Exp(x.x - m)
		in = in || x.id == id
	}
	return raw[id]/temp - m - math.Log(zk), in
}

const testVocab = 128

func TestLlamaCppLogprobsAreSamplingDistribution(t *testing.T) {
	url := needLlama(t)
	eng := NewLlamaCpp(url, nil)
	ctx := context.Background()
	for _, tc := range []struct{ temp, topP float64 }{{1, 1}, {0.6, 1}, {1, 0.5}, {0.8, 0.3}} {
		t.Run(fmt.Sprintf("T=%v,p=%v", tc.temp, tc.topP), func(t *testing.T) {
			req := infer.Request{Prompt: []int{1, 2, 3, 4, 5, 6}, MaxTokens: 12, Temperature: tc.temp, TopP: tc.topP, Seed: 11}
			c, err := eng.Sample(ctx, req)
			if err != nil {
				t.Fatalf("T=%v p=%v: %v", tc.temp, tc.topP, err)
			}
			if len(c.Tokens) != req.MaxTokens || c.FinishReason != infer.FinishLength {
				t.Fatalf("T=%v p=%v: %d tokens, finish %q", tc.temp, tc.topP, len(c.Tokens), c.FinishReason)
			}
			raw, _ := rawDistribution(t, url, req, testVocab)
			if len(raw) != len(c.Tokens) {
				t.Fatalf("raw run has %d tokens, client %d", len(raw), len(c.Tokens))
			}
			for i, st := range raw {
				if st.ID != c.Tokens[i] {
					t.Fatalf("T=%v p=%v: same seed, token %d: client %d, raw run %d", tc.temp, tc.topP, i, c.Tokens[i], st.ID)
				}
				want, in := samplingLogprob(st.Dist, st.ID, tc.temp, tc.topP)
				if !in {
					t.Errorf("T=%v p=%v: token %d (id %d) sampled outside the nucleus", tc.temp, tc.topP, i, st.ID)
				}
				if math.Abs(c.Logprobs[i]-want) > 2e-4 {
					t.Errorf("T=%v p=%v: token %d (id %d): client log-prob %.6f, log q from the server's distribution %.6f",
						tc.temp, tc.topP, i, st.ID, c.Logprobs[i], want)
				}
			}
		})
	}
}

func TestLlamaCppGreedyIsArgmaxAndDeterministic(t *testing.T) {
	url := needLlama(t)
	eng := NewLlamaCpp(url, nil)
	req := infer.Request{Prompt: []int{9, 8, 7}, MaxTokens: 10, Temperature: 0}
	a, err := eng.Sample(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := eng.Sample(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !equalInts(a.Tokens, b.Tokens) {
		t.Fatalf("greedy not deterministic: %v vs %v", a.Tokens, b.Tokens)
	}
	raw, _ := rawDistribution(t, url, req, testVocab)
	for i, st := range raw {
		best, bl := -1, math.Inf(-1)
		for id, lp := range st.Dist {
			if lp > bl {
				best, bl = id, lp
			}
		}
		if a.Tokens[i] != best {
			t.Errorf("greedy token %d = %d, argmax %d", i, a.Tokens[i], best)
		}
		// Greedy reports the model's log softmax(z) (T = 1), not log 1.
		if math.Abs(a.Logprobs[i]-bl) > 1e-6 || a.Logprobs[i] > -1 {
			t.Errorf("greedy log-prob %d = %v, raw %v", i, a.Logprobs[i], bl)
		}
	}
}

func TestLlamaCppStopIDEndsStream(t *testing.T) {
	url := needLlama(t)
	eng := NewLlamaCpp(url, nil)
	req := infer.Request{Prompt: []int{1, 2, 3, 4, 5}, MaxTokens: 40, Temperature: 1, Seed: 3}
	full, err := eng.Sample(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	stopAt := 5
	req.Stop = []int{full.Tokens[stopAt], 127}
	first := stopAt
	for i, id := range full.Tokens {
		if id == req.Stop[0] || id == req.Stop[1] {
			first = i
			break
		}
	}
	c, err := eng.Sample(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if c.FinishReason != infer.FinishStop || !equalInts(c.Tokens, full.Tokens[:first+1]) {
		t.Fatalf("stop at %v: got %v (%s), want prefix %v", req.Stop, c.Tokens, c.FinishReason, full.Tokens[:first+1])
	}
	for i := range c.Logprobs {
		if math.Abs(c.Logprobs[i]-full.Logprobs[i]) > 1e-5 {
			t.Errorf("log-prob %d: %v with stop, %v without", i, c.Logprobs[i], full.Logprobs[i])
		}
	}
}

func TestLlamaCppContextOverflowIsPermanent(t *testing.T) {
	url := needLlama(t)
	p, err := Dial(PoolConfig{BaseBackoff: time.Millisecond}, nil, Endpoint{Kind: KindLlamaCpp, URL: url})
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]int, llamaCtx+10)
	_, err = p.Sample(context.Background(), infer.Request{Prompt: prompt, MaxTokens: 4, Temperature: 1})
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 400 || errors.Is(err, ErrUnavailable) {
		t.Fatalf("over-long prompt: %v, want a permanent HTTP 400", err)
	}
	if st := p.Stats()[0]; st.Requests != 1 || !st.Healthy {
		t.Fatalf("a permanent error was retried or took the endpoint out: %+v", st)
	}
}

// Many episodes at once against one server with 4 slots: every answer is
// whole, and the same seed gives the same tokens whatever else runs.
func TestLlamaCppConcurrentEpisodes(t *testing.T) {
	url := needLlama(t)
	p, err := Dial(PoolConfig{Seed: 1}, nil, Endpoint{Kind: KindLlamaCpp, URL: url, MaxConcurrent: llamaNSlots})
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	res := make([]infer.Completion, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := infer.Request{Prompt: []int{1 + i%3, 4, 5, 6}, MaxTokens: 16, Temperature: 1, Seed: int64(i % 6), Stop: []int{100}}
			res[i], errs[i] = p.Sample(context.Background(), req)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
	}
	// i and i+6 share prompt (i%3) and seed (i%6).
	for i := range n - 6 {
		a, b := res[i], res[i+6]
		if !equalInts(a.Tokens, b.Tokens) || a.FinishReason != b.FinishReason {
			t.Errorf("requests %d and %d (same prompt and seed) differ: %v vs %v", i, i+6, a.Tokens, b.Tokens)
			continue
		}
		for k := range a.Logprobs {
			if math.Abs(a.Logprobs[k]-b.Logprobs[k]) > 1e-4 {
				t.Errorf("requests %d and %d: log-prob %d: %v vs %v", i, i+6, k, a.Logprobs[k], b.Logprobs[k])
			}
		}
	}
	st := p.Stats()[0]
	if st.Requests != n || st.Failures != 0 || st.InFlight != 0 {
		t.Fatalf("stats after the run: %+v", st)
	}
}

func TestLlamaCppTokenizer(t *testing.T) {
	url := needLlama(t)
	tok, err := NewTokenizer(KindLlamaCpp, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := infer.Request{Prompt: []int{3, 1, 4, 1, 5}, MaxTokens: 9, Temperature: 0}
	raw, text := rawDistribution(t, url, req, testVocab)
	ids := make([]int, len(raw))
	for i, s := range raw {
		ids[i] = s.ID
	}
	got, err := tok.Decode(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if got != text {
		t.Fatalf("Decode(%v) = %q, server text %q", ids, got, text)
	}
	enc, err := tok.Encode(ctx, text)
	if err != nil {
		t.Fatal(err)
	}
	if len(enc) == 0 {
		t.Fatalf("Encode(%q) is empty", text)
	}
	// The random model's vocabulary does not round-trip text, so only the
	// cache's consistency is checked here.
	if e2, err := tok.Encode(ctx, text); err != nil || !equalInts(e2, enc) {
		t.Fatalf("cached Encode = %v (err %v), want %v", e2, err, enc)
	}
}

// BenchmarkLlamaCppPool measures completions through the Pool against the
// real server (32 tokens each) with 1 and 4 requests in flight.
func BenchmarkLlamaCppPool(b *testing.B) {
	if llamaURL == "" {
		b.Skip(llamaSkip)
	}
	for _, par := range []int{1, 4} {
		b.Run(fmt.Sprintf("inflight=%d", par), func(b *testing.B) {
			p, err := Dial(PoolConfig{}, nil, Endpoint{Kind: KindLlamaCpp, URL: llamaURL, MaxConcurrent: par})
			if err != nil {
				b.Fatal(err)
			}
			var toks atomic.Int64
			var seed atomic.Int64
			b.SetParallelism(par)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := infer.Request{Prompt: []int{1, 2, 3, 4, 5, 6, 7, 8}, MaxTokens: 32, Temperature: 1, Seed: seed.Add(1)}
					c, err := p.Sample(context.Background(), req)
					if err != nil {
						b.Error(err)
						return
					}
					toks.Add(int64(len(c.Tokens)))
				}
			})
			b.ReportMetric(float64(toks.Load())/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkLlamaCppNonStreamed is the same request sent unstreamed, without
// the client (the streaming overhead's reference).
func BenchmarkLlamaCppNonStreamed(b *testing.B) {
	if llamaURL == "" {
		b.Skip(llamaSkip)
	}
	client := httpClient(nil)
	toks := 0
	for i := 0; b.Loop(); i++ {
		body := map[string]any{"prompt": []int{1, 2, 3, 4, 5, 6, 7, 8}, "max_tokens": 32, "temperature": 1,
			"samplers": llamaSamplers, "seed": i, "logprobs": 1, "post_sampling_probs": true}
		var out struct {
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := postJSON(context.Background(), client, llamaURL+"/v1/completions", body, &out); err != nil {
			b.Fatal(err)
		}
		toks += out.Usage.CompletionTokens
	}
	b.ReportMetric(float64(toks)/b.Elapsed().Seconds(), "tokens/s")
}

// scoreNext asks the server for the raw log-probs log softmax(z) of every
// vocabulary token after prefix: one greedy step with the whole vocabulary
// as top list, which scores the position without sampling from it.
func scoreNext(t *testing.T, url string, prefix []int) map[int]float64 {
	t.Helper()
	steps, _ := rawDistribution(t, url, infer.Request{Prompt: prefix, MaxTokens: 1, Temperature: 0}, testVocab)
	if len(steps) != 1 {
		t.Fatalf("scoring %d tokens: %d positions", len(prefix), len(steps))
	}
	return steps[0].Dist
}

// The recorded log-probabilities are π_old: each sampled token's recorded
// log-prob equals log q(token) recomputed by scoring prompt ⊕ the tokens
// before it with the same weights, q the distribution it was drawn from
// (softmax(z/T) on the top-p nucleus, renormalised).
func TestLlamaCppRecordedLogprobsMatchRescoring(t *testing.T) {
	url := needLlama(t)
	eng := NewLlamaCpp(url, nil)
	prompt := []int{3, 14, 15, 92, 65}
	for _, tc := range []struct{ temp, topP float64 }{{1, 1}, {0.7, 1}, {1, 0.9}, {0.7, 0.9}} {
		t.Run(fmt.Sprintf("T=%v,top_p=%v", tc.temp, tc.topP), func(t *testing.T) {
			c, err := eng.Sample(context.Background(), infer.Request{Prompt: prompt, MaxTokens: 12, Temperature: tc.temp, TopP: tc.topP, Seed: 21})
			if err != nil {
				t.Fatal(err)
			}
			maxDiff := 0.0
			for i, id := range c.Tokens {
				prefix := append(append([]int(nil), prompt...), c.Tokens[:i]...)
				want, in := samplingLogprob(scoreNext(t, url, prefix), id, tc.temp, tc.topP)
				if !in {
					t.Errorf("token %d (id %d) is outside the nucleus", i, id)
				}
				maxDiff = math.Max(maxDiff, math.Abs(c.Logprobs[i]-want))
			}
			t.Logf("T=%v top_p=%v: %d tokens, max |recorded − rescored| = %.3g", tc.temp, tc.topP, len(c.Tokens), maxDiff)
			if maxDiff > 2e-4 {
				t.Errorf("recorded log-probs differ from rescoring by %.3g", maxDiff)
			}
		})
	}
}

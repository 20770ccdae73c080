package model

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/compactrl/compactrl/infer"
)

func decodeModel(t *testing.T) *Model {
	t.Helper()
	cfg := Config{Vocab: 61, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, FFN: 48, MaxSeq: 96, RopeTheta: 10000, NormEps: 1e-5}
	m, err := New(cfg, 17, false)
	if err != nil {
		t.Fatal(err)
	}
	perturbed(m, rand.New(rand.NewPCG(1, 1)), 0.1)
	return m
}

func randPrompt(rng *rand.Rand, n, vocab int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = rng.IntN(vocab)
	}
	return p
}

// The KV-cached decode must give the log-probabilities that scoring the
// whole sequence gives, to the bit.
func TestDecodeMatchesScoring(t *testing.T) {
	m := decodeModel(t)
	rng := rand.New(rand.NewPCG(2, 3))
	var reqs []infer.Request
	for i, n := range []int{1, 9, 30, 4, 70} { // 70 spans two attention blocks
		reqs = append(reqs, infer.Request{Prompt: randPrompt(rng, n, 61), MaxTokens: 20 + i, Temperature: 1, Seed: int64(i)})
	}
	reqs[1].TopP = 0.8
	reqs[2].Temperature = 0.7
	reqs[3].Temperature = 0
	comps, err := m.Generate(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []Seq
	for i, c := range comps {
		if len(c.Tokens) != reqs[i].MaxTokens || c.FinishReason != infer.FinishLength {
			t.Fatalf("request %d: %d tokens, finish %q", i, len(c.Tokens), c.FinishReason)
		}
		seqs = append(seqs, Seq{Tokens: append(slices.Clone(reqs[i].Prompt), c.Tokens...), From: len(reqs[i].Prompt)})
	}
	out, err := m.NewScorer().Forward(seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range comps {
		if r := reqs[i]; r.Temperature != 0 && (r.Temperature != 1 || r.TopP != 0) {
			// Tempered or nucleus sampling records the log-prob of the
			// distribution drawn from, not π_θ (infer/local checks those
			// against rescoring the logits).
			continue
		}
		for j, lp := range c.Logprobs {
			if math.Float64bits(lp) != math.Float64bits(out.LogProbs[i][j]) {
				t.Fatalf("request %d token %d: decode log-prob %v, scoring %v", i, j, lp, out.LogProbs[i][j])
			}
		}
	}
	// Greedy decoding picks the argmax, whose log-prob is the row's largest.
	for j, lp := range comps[3].Logprobs {
		if lp < math.Log(1.0/61)-1e-9 {
			t.Fatalf("greedy token %d has log-prob %.4f below uniform", j, lp)
		}
	}
}

func TestDecodeDeterministicAndBatchIndependent(t *testing.T) {
	m := decodeModel(t)
	rng := rand.New(rand.NewPCG(4, 5))
	req := infer.Request{Prompt: randPrompt(rng, 12, 61), MaxTokens: 15, Temperature: 1, TopP: 0.9, Seed: 42}
	alone, err := m.Generate(context.Background(), []infer.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	other := infer.Request{Prompt: randPrompt(rng, 30, 61), MaxTokens: 7, Temperature: 1, Seed: 1}
	batch, err := m.Generate(context.Background(), []infer.Request{other, req})
	if err != nil {
		t.Fatal(err)
	}
	// Tokens and log-probs are identical to the bit (DeepEqual: float ==).
	if !reflect.DeepEqual(batch[1], alone[0]) {
		t.Fatalf("same seed and prompt: %v in a batch, %v alone", batch[1], alone[0])
	}
	req.Seed = 43
	diff, _ := m.Generate(context.Background(), []infer.Request{req})
	if slices.Equal(diff[0].Tokens, alone[0].Tokens) {
		t.Fatalf("different seeds gave identical samples %v", diff[0].Tokens)
	}
}

func TestDecodeStopAndLimits(t *testing.T) {
	m := decodeModel(t)
	rng := rand.New(rand.NewPCG(6, 7))
	prompt := randPrompt(rng, 5, 61)
	free, _ := m.Generate(context.Background(), []infer.Request{{Prompt: prompt, MaxTokens: 30, Temperature: 1, Seed: 3}})
	stopTok := free[0].Tokens[4]
	first := slices.Index(free[0].Tokens, stopTok)
	got, err := m.Generate(context.Background(), []infer.Request{{Prompt: prompt, MaxTokens: 30, Temperature: 1, Seed: 3, Stop: []int{stopTok}}})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].FinishReason != infer.FinishStop || !slices.Equal(got[0].Tokens, free[0].Tokens[:first+1]) {
		t.Fatalf("stop at %d: got %v (%s), free run %v", stopTok, got[0].Tokens, got[0].FinishReason, free[0].Tokens)
	}
	// MaxSeq caps the completion; MaxTokens 0 gives an empty one.
	long, err := m.Generate(context.Background(), []infer.Request{{Prompt: randPrompt(rng, 90, 61), MaxTokens: 50, Temperature: 1}, {Prompt: prompt}})
	if err != nil {
		t.Fatal(err)
	}
	if len(long[0].Tokens) != 6 || long[0].FinishReason != infer.FinishLength || len(long[1].Tokens) != 0 {
		t.Fatalf("limits: %d tokens (%s), %d tokens", len(long[0].Tokens), long[0].FinishReason, len(long[1].Tokens))
	}
	for _, bad := range []infer.Request{{}, {Prompt: []int{61}}, {Prompt: prompt, TopP: 2}, {Prompt: make([]int, 96)}} {
		if _, err := m.Generate(context.Background(), []infer.Request{bad}); err == nil {
			t.Errorf("request %+v accepted", bad)
		}
	}
}

// sampleToken's empirical frequencies follow softmax(z/T) restricted to
// the top-p nucleus.
func TestSampleTokenDistribution(t *testing.T) {
	z := []float32{2, 1, 0, -1}
	rng := rand.New(rand.NewPCG(8, 9))
	probs, order := make([]float32, 4), make([]int32, 4)
	p := make([]float64, 4)
	var tot float64
	for i, v := range z {
		p[i] = math.Exp(float64(v) / 0.5)
		tot += p[i]
	}
	// With T = 0.5: p ≈ [.865, .117, .016, .002]; top-p 0.95 keeps two tokens.
	counts := make([]int, 4)
	const n = 20000
	for i := 0; i < n; i++ {
		tok, lp := sampleToken(z, 0.5, 0.95, rng, probs, order)
		counts[tok]++
		want := math.Log(p[tok] / (p[0] + p[1]))
		if math.Abs(lp-want) > 1e-6 {
			t.Fatalf("log-prob %g, want %g (log-prob in the renormalised T = 0.5 nucleus)", lp, want)
		}
	}
	if counts[2]+counts[3] != 0 {
		t.Fatalf("tokens outside the nucleus sampled: %v", counts)
	}
	want0 := p[0] / (p[0] + p[1])
	if got := float64(counts[0]) / n; math.Abs(got-want0) > 0.01 {
		t.Fatalf("frequency of token 0 %.4f, want %.4f", got, want0)
	}
}

// An agent-like second turn (previous prompt ⊕ completion ⊕ observation)
// reuses the cached positions and still gives the scoring log-probs.
func TestPrefixCacheReuse(t *testing.T) {
	m := decodeModel(t)
	rng := rand.New(rand.NewPCG(10, 11))
	d := m.NewDecoder()
	d.SetPrefixCache(1 << 30)
	run := func(req infer.Request) infer.Completion {
		if _, err := d.Add(req); err != nil {
			t.Fatal(err)
		}
		for {
			if f := d.Step(); len(f) > 0 {
				return f[0].Completion
			}
		}
	}
	p1 := randPrompt(rng, 20, 61)
	c1 := run(infer.Request{Prompt: p1, MaxTokens: 10, Temperature: 1, Seed: 1})
	p2 := append(append(slices.Clone(p1), c1.Tokens...), randPrompt(rng, 7, 61)...)
	before := d.Stats()
	c2 := run(infer.Request{Prompt: p2, MaxTokens: 12, Temperature: 1, Seed: 2})
	st := d.Stats()
	if got, want := st.Reused-before.Reused, len(p1)+len(c1.Tokens)-1; got != want {
		t.Fatalf("reused %d positions, want %d", got, want)
	}
	if fed := st.Fed - before.Fed; fed != len(p2)-(len(p1)+len(c1.Tokens)-1)+len(c2.Tokens)-1 {
		t.Fatalf("fed %d positions", fed)
	}
	out, err := m.NewScorer().Forward([]Seq{{Tokens: append(slices.Clone(p2), c2.Tokens...), From: len(p2)}})
	if err != nil {
		t.Fatal(err)
	}
	for j, lp := range c2.Logprobs {
		if math.Float64bits(lp) != math.Float64bits(out.LogProbs[0][j]) {
			t.Fatalf("token %d: cached-prefix decode %v, scoring %v", j, lp, out.LogProbs[0][j])
		}
	}
	// The longer entry replaced the one it extends; a zero limit frees all.
	if len(d.pool) != 1 || d.PrefixCacheBytes() == 0 {
		t.Fatalf("pool holds %d entries, %d bytes", len(d.pool), d.PrefixCacheBytes())
	}
	d.SetPrefixCache(0)
	if d.PrefixCacheBytes() != 0 || len(d.pool) != 0 {
		t.Fatal("disabling the cache kept entries")
	}
	// A tiny budget keeps nothing.
	d.SetPrefixCache(10)
	run(infer.Request{Prompt: p1, MaxTokens: 3, Temperature: 1})
	if len(d.pool) != 0 {
		t.Fatal("entry larger than the budget kept")
	}
}

// With a prefill chunk, a long prompt is fed over several steps while a
// running sequence keeps decoding, and the samples are unchanged.
func TestChunkedPrefill(t *testing.T) {
	m := decodeModel(t)
	rng := rand.New(rand.NewPCG(12, 13))
	short := infer.Request{Prompt: randPrompt(rng, 3, 61), MaxTokens: 12, Temperature: 1, Seed: 5}
	long := infer.Request{Prompt: randPrompt(rng, 70, 61), MaxTokens: 6, Temperature: 1, TopP: 0.9, Seed: 6}
	want, err := m.Generate(context.Background(), []infer.Request{short, long})
	if err != nil {
		t.Fatal(err)
	}
	d := m.NewDecoder()
	d.SetPrefillChunk(16)
	idShort, _ := d.Add(short)
	d.Step() // the short prompt is fed and samples its first token
	idLong, _ := d.Add(long)
	got := map[int]infer.Completion{}
	at := map[int]int{}
	steps := 0
	for len(got) < 2 {
		before := d.Stats().Generated
		steps++
		for _, f := range d.Step() {
			got[f.ID], at[f.ID] = f.Completion, steps
		}
		if _, ok := got[idShort]; !ok && d.Stats().Generated == before {
			t.Fatalf("step %d: the running sequence did not advance during prefill", steps)
		}
	}
	// 70 prompt tokens in chunks of ≤ 16 take 5 steps, the last of which
	// samples the first of 6 tokens: 10 steps (6 without chunks).
	if at[idLong] != 10 {
		t.Fatalf("long request finished at step %d, want 10", at[idLong])
	}
	for i, id := range []int{idShort, idLong} {
		if !reflect.DeepEqual(got[id], want[i]) {
			t.Fatalf("request %d: chunked %v, unchunked %v", i, got[id], want[i])
		}
	}
}

// TestDecodeGroupsBitIdentical decodes one set of requests (prompts of
// mixed lengths, chunked prefill, so that some steps split the batch into
// sequence groups and some run it whole) with 1, 2, 3 and 5 workers and
// checks every token and log-probability is the same to the bit, and that
// groups covers the batch with contiguous ranges.
func TestDecodeGroupsBitIdentical(t *testing.T) {
	m := decodeModel(t)
	rng := rand.New(rand.NewPCG(8, 9))
	var reqs []infer.Request
	for i := range 11 {
		n := 1 + rng.IntN(6)
		if i == 4 {
			n = 70 // one long prompt: the steps that prefill it run whole
		}
		reqs = append(reqs, infer.Request{Prompt: randPrompt(rng, n, 61), MaxTokens: 10 + i, Temperature: 1, Seed: int64(100 + i)})
	}
	run := func(threads, chunk int) []infer.Completion {
		d := m.NewDecoder()
		d.threads = threads
		d.SetPrefillChunk(chunk)
		ids := map[int]int{}
		for i, r := range reqs {
			id, err := d.Add(r)
			if err != nil {
				t.Fatal(err)
			}
			ids[id] = i
		}
		out := make([]infer.Completion, len(reqs))
		grouped := false
		for d.Active() > 0 {
			fin := d.Step()
			if g := d.groups(threads); len(g) > 1 {
				grouped = true
				if g[0][0] != 0 || g[len(g)-1][1] != len(d.batch) {
					t.Fatalf("groups %v do not cover a batch of %d", g, len(d.batch))
				}
				for j := 1; j < len(g); j++ {
					if g[j][0] != g[j-1][1] || g[j][0] >= g[j][1] {
						t.Fatalf("groups %v not contiguous and non-empty", g)
					}
				}
			}
			for _, f := range fin {
				out[ids[f.ID]] = f.Completion
			}
		}
		if threads > 1 && !grouped {
			t.Fatalf("threads=%d: no step split the batch into groups", threads)
		}
		return out
	}
	for _, chunk := range []int{0, 16} {
		want := run(1, chunk)
		for _, threads := range []int{2, 3, 5} {
			got := run(threads, chunk)
			for i := range want {
				if !reflect.DeepEqual(got[i].Tokens, want[i].Tokens) {
					t.Fatalf("chunk %d threads %d request %d: tokens %v, want %v", chunk, threads, i, got[i].Tokens, want[i].Tokens)
				}
				for j, lp := range want[i].Logprobs {
					if math.Float64bits(got[i].Logprobs[j]) != math.Float64bits(lp) {
						t.Fatalf("chunk %d threads %d request %d token %d: log-prob %v, want %v", chunk, threads, i, j, got[i].Logprobs[j], lp)
					}
				}
			}
		}
	}
}

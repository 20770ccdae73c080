package builtin

import (
	"context"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/train"
)

// peakRSS is the process's peak resident memory (VmHWM), 0 where
// /proc/self/status cannot be read.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestSmolLM2SampleAndTrain runs the built-in engine on SmolLM2-135M-
// Instruct's imported weights: its sampler plays a ChatML prompt, the log-
// probs it reports equal the trainer's forward pass on the same tokens
// (on-policy), and one training step on the sampled response (the
// gradient of its mean log-prob) changes the weights and raises that
// log-prob. Memory and speeds are logged.
func TestSmolLM2SampleAndTrain(t *testing.T) {
	if testing.Short() {
		t.Skip("a 135M-parameter model: the full run (not -short) checks it")
	}
	path := testenv.MustHaveSmolLM2(t)
	testenv.SoftMemoryLimit(t, 6<<30)
	m, err := model.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := format.ReadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := NewPolicy(m, Options{GradClip: 1, MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pol.Close()
	ctx := context.Background()
	prompt := tok.EncodeWithSpecials("<|im_start|>system\nYou search a vault of files for the values of keys.<|im_end|>\n" +
		"<|im_start|>user\ntask: report the values of oak. the vault has 2 files.<|im_end|>\n<|im_start|>assistant\n")
	start := time.Now()
	c, err := pol.Sampler().Sample(ctx, infer.Request{Prompt: prompt, MaxTokens: 32, Temperature: 1, Seed: 5, Stop: []int{2}})
	if err != nil {
		t.Fatal(err)
	}
	sampleTime := time.Since(start)
	t.Logf("sampled %d tokens in %v (%.1f tok/s, prompt of %d): %q", len(c.Tokens), sampleTime.Round(time.Millisecond),
		float64(len(c.Tokens))/sampleTime.Seconds(), len(prompt), tok.Decode(c.Tokens))

	seq := []train.Sequence{{Prompt: prompt, Response: c.Tokens}}
	before := append([]float32(nil), m.Params()[1].Data...)
	start = time.Now()
	out, err := pol.Forward(ctx, seq, true)
	if err != nil {
		t.Fatal(err)
	}
	var maxDiff, sum0 float64
	for i, lp := range out[0].Logprobs {
		maxDiff = math.Max(maxDiff, math.Abs(lp-c.Logprobs[i]))
		sum0 += lp
	}
	t.Logf("sampler vs trainer log-probs: max |Δ| %.2e over %d tokens", maxDiff, len(c.Tokens))
	if maxDiff > 1e-4 {
		t.Errorf("the sampler's log-probs differ from the trainer's by %.3g", maxDiff)
	}
	d := make([]float64, len(c.Tokens))
	for i := range d {
		d[i] = -1 / float64(len(d)) // dL/dlogπ of L = −mean log π
	}
	if err := pol.Backward(ctx, [][]float64{d}); err != nil {
		t.Fatal(err)
	}
	norm, err := pol.Step(ctx, 1e-4)
	if err != nil {
		t.Fatal(err)
	}
	stepTime := time.Since(start)
	n := len(prompt) + len(c.Tokens)
	t.Logf("training step (forward, backward, AdamW) on %d tokens in %v (%.0f tok/s), gradient norm %.3g", n, stepTime.Round(time.Millisecond), float64(n)/stepTime.Seconds(), norm)
	changed := 0
	for i, v := range m.Params()[1].Data {
		if v != before[i] {
			changed++
		}
	}
	if changed == 0 || math.IsNaN(norm) || norm == 0 {
		t.Fatalf("the step changed %d weights of %s (gradient norm %v)", changed, m.Params()[1].Name, norm)
	}
	out, err = pol.Forward(ctx, seq, false)
	if err != nil {
		t.Fatal(err)
	}
	var sum1 float64
	for _, lp := range out[0].Logprobs {
		sum1 += lp
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("mean log-prob of the response %.4f → %.4f after one step; peak RSS %.2f GB (Go heap in use %.2f GB)",
		sum0/float64(len(d)), sum1/float64(len(d)), float64(peakRSS())/1e9, float64(ms.HeapInuse)/1e9)
	if sum1 <= sum0 {
		t.Errorf("one step on the response did not raise its log-prob: %.4f → %.4f", sum0, sum1)
	}
	if rss := peakRSS(); rss > 8<<30 {
		t.Errorf("peak RSS %.2f GB exceeds 8 GB", float64(rss)/1e9)
	}
}

package remote

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/model"
)

// serveGGUF starts llama-server on a model file for one test (float32 KV
// cache, one slot) and returns its URL.
func serveGGUF(t *testing.T, path string) string {
	t.Helper()
	return testenv.LlamaServer(t, path, "-np", "1", "-c", "2048", "-ctk", "f32", "-ctv", "f32", "-fa", "off")
}

// ratioStats summarises log π_train − log π_engine over sampled tokens.
type ratioStats struct {
	n                  int
	meanAbs, maxAbs    float64
	p50, p99, min, max float64 // of the ratio π_train/π_engine
}

func (r ratioStats) String() string {
	return fmt.Sprintf("%d tokens: |Δ log π| mean %.2e, max %.2e; π_train/π_engine median %.6f, 99th pct %.6f, range [%.6f, %.6f]",
		r.n, r.meanAbs, r.maxAbs, r.p50, r.p99, r.min, r.max)
}

// TestSmolLM2EngineLogprobsOnPolicy samples completions of a ChatML prompt
// from llama-server at T = 1 and compares the log-probability the engine
// returns for each sampled token with the built-in model's on the same
// weights: SmolLM2-135M-Instruct exported as F32 GGUF (the on-policy
// case: the ratio must be 1 to float32 rounding), and the original Q4_1
// file (llama.cpp multiplies Q4_1 blocks by activations quantized to Q8,
// the built-in model the dequantized float32 weights: the mismatch is
// measured and bounded); and the BF16 export against the built-in model
// under model.precision bf16 (both round weights and activations to
// bfloat16 and sum in float32, in different orders: measured and bounded;
// on 2026-12-06 mean |Δ| 1.8e-2, max 7.1e-2, no closer than the same file
// against the float32 model, so a bf16 run samples on-policy only from its
// own engine).
func TestSmolLM2EngineLogprobsOnPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("a 135M-parameter model: the full run (not -short) checks it")
	}
	q41 := testenv.MustHaveSmolLM2(t)
	testenv.MustHaveLlama(t)
	m, err := model.Load(q41)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := format.ReadTokenizer(q41)
	if err != nil {
		t.Fatal(err)
	}
	cfg, ts, err := format.ReadGGUFCheckpoint(q41)
	if err != nil {
		t.Fatal(err)
	}
	f32, bf16 := filepath.Join(t.TempDir(), "smollm2-f32.gguf"), filepath.Join(t.TempDir(), "smollm2-bf16.gguf")
	if err := format.WriteGGUF(f32, cfg, ts, tok); err != nil {
		t.Fatal(err)
	}
	if err := format.WriteGGUFWith(bf16, cfg, ts, tok, format.GGUFOptions{Matrices: format.GGMLTypeBF16}); err != nil {
		t.Fatal(err)
	}
	prompt := tok.EncodeWithSpecials("<|im_start|>system\nYou are an agent in a Linux shell. Reply with one command.<|im_end|>\n" +
		"<|im_start|>user\nFind the file that holds the vault code and print it.<|im_end|>\n<|im_start|>assistant\n")
	for _, tc := range []struct {
		name, path string
		bf16       bool
		maxAbs     float64
	}{{"f32", f32, false, 1e-4}, {"q4_1", q41, false, 1.0}, {"bf16", bf16, true, 0.2}} {
		t.Run(tc.name, func(t *testing.T) {
			m.BF16 = tc.bf16
			eng := NewLlamaCpp(serveGGUF(t, tc.path), nil)
			var deltas []float64
			for seed := int64(1); seed <= 4; seed++ {
				c, err := eng.Sample(context.Background(), infer.Request{Prompt: prompt, MaxTokens: 24, Temperature: 1, Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				rows, err := m.NewScorer().Logits(append(slices.Clone(prompt), c.Tokens...))
				if err != nil {
					t.Fatal(err)
				}
				for i, id := range c.Tokens {
					lp := logSoftmaxAt(rows[len(prompt)-1+i], id)
					deltas = append(deltas, lp-c.Logprobs[i])
				}
			}
			st := summarise(deltas)
			t.Logf("%s: %v", tc.name, st)
			if st.maxAbs > tc.maxAbs {
				t.Errorf("%s: max |log π_train − log π_engine| %.3g > %.3g", tc.name, st.maxAbs, tc.maxAbs)
			}
		})
	}
}

func logSoftmaxAt(row []float32, id int) float64 {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	return float64(row[id]) - mx - math.Log(s)
}

func summarise(d []float64) ratioStats {
	r := ratioStats{n: len(d), min: math.Inf(1), max: math.Inf(-1)}
	ratios := make([]float64, len(d))
	for i, x := range d {
		r.meanAbs += math.Abs(x) / float64(len(d))
		r.maxAbs = math.Max(r.maxAbs, math.Abs(x))
		ratios[i] = math.Exp(x)
		r.min, r.max = math.Min(r.min, ratios[i]), math.Max(r.max, ratios[i])
	}
	sort.Float64s(ratios)
	if len(ratios) > 0 {
		r.p50 = ratios[len(ratios)/2]
		r.p99 = ratios[min(len(ratios)-1, len(ratios)*99/100)]
	}
	return r
}

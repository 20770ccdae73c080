package bench

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/compactrl/compactrl/model"
)

// BenchmarkTrainStep: the "bench" preset, 8 sequences of 512 positions (the
// shape bench model compares with PyTorch); the median step's tokens/s.
func BenchmarkTrainStep(b *testing.B) {
	r, err := Train(context.Background(), model.Presets["bench"], 8, 512, b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.Value, "tokens/s")
}

// BenchmarkDecode32: 32 prompts of 64 tokens, 64 new tokens each; the
// median round's decode tokens/s.
func BenchmarkDecode32(b *testing.B) {
	cfg := model.Presets["bench"]
	m, err := model.New(cfg, 1, false)
	if err != nil {
		b.Fatal(err)
	}
	prompts := Prompts(32, 64, func(r *rand.Rand) int { return r.IntN(cfg.Vocab) })
	r, err := Decode(context.Background(), m, prompts, 64, b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.Decode.Value, "tokens/s")
}

// BenchmarkDecode1SmolLM2Shapes: one sequence at a time on SmolLM2-135M's
// shapes (random weights: 30 layers, width 576, 9 heads of which 3 KV,
// FFN 1536, vocab 49,152, tied head), a 16-token prompt and 32 new tokens;
// the median round's decode tokens/s. Every step reads all 135M weights.
func BenchmarkDecode1SmolLM2Shapes(b *testing.B) {
	decodeSmolLM2Shapes(b, 1)
}

// BenchmarkDecode8SmolLM2Shapes: 8 sequences at once on SmolLM2-135M's
// shapes (random weights, as BenchmarkDecode1SmolLM2Shapes), 16-token
// prompts and 32 new tokens; the median round's decode tokens/s. Each of
// the two threads runs half the sequences through every product (the
// decoder's groups), reading all 540 MB of weights, yet on a quiet machine
// that was 2–6% faster than one range whose products split by columns and
// read each weight once (3 interleaved pairs on AMD EPYC Zen 4; tried and
// not kept), probably because the two groups run in step and one thread's
// misses fill the shared L3 for the other.
func BenchmarkDecode8SmolLM2Shapes(b *testing.B) {
	decodeSmolLM2Shapes(b, 8)
}

// decodeSmolLM2Shapes times batch sequences at once on SmolLM2-135M's
// shapes with random weights (16-token prompts, 32 new tokens) and reports
// the median round's decode tokens/s.
func decodeSmolLM2Shapes(b *testing.B, batch int) {
	cfg := model.Config{Vocab: 49152, Dim: 576, Layers: 30, Heads: 9, KVHeads: 3, FFN: 1536, MaxSeq: 2048, RopeTheta: 100000, NormEps: 1e-5, TiedEmbeddings: true}
	m, err := model.New(cfg, 1, false)
	if err != nil {
		b.Fatal(err)
	}
	prompts := Prompts(batch, 16, func(r *rand.Rand) int { return r.IntN(cfg.Vocab) })
	r, err := Decode(context.Background(), m, prompts, 32, b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.Decode.Value, "tokens/s")
}

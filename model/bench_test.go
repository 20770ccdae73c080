package model

import (
	"context"
	"testing"
)

// BenchmarkTrainStep: the "bench" preset, 8 sequences of 512 positions,
// the shape of testdata/torch_bench.py.
func BenchmarkTrainStep(b *testing.B) {
	r, err := BenchTrain(context.Background(), Presets["bench"], 8, 512, b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.TokensPerSec, "tokens/s")
	b.ReportMetric(r.TokensPerCPUSec, "tokens/cpu-s")
}

// BenchmarkDecode32: 32 prompts of 64 tokens, 64 new tokens each.
func BenchmarkDecode32(b *testing.B) {
	r, err := BenchDecode(context.Background(), Presets["bench"], 32, 64, 64, b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.TokensPerSec, "tokens/s")
	b.ReportMetric(r.TokensPerCPUSec, "tokens/cpu-s")
}

func TestBenchArgs(t *testing.T) {
	cfg := Config{Vocab: 16, Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, FFN: 16, MaxSeq: 32, RopeTheta: 10000, NormEps: 1e-5}
	if _, err := BenchTrain(context.Background(), cfg, 2, 40, 1); err == nil {
		t.Fatal("sequence longer than max_seq accepted")
	}
	r, err := BenchTrain(context.Background(), cfg, 2, 8, 1)
	if err != nil || r.Tokens != 16 || r.TokensPerSec <= 0 {
		t.Fatalf("bench train: %+v %v", r, err)
	}
	d, err := BenchDecode(context.Background(), cfg, 3, 4, 5, 1)
	if err != nil || d.Tokens != 15 || d.TokensPerSec <= 0 {
		t.Fatalf("bench decode: %+v %v", d, err)
	}
}

package bench

import (
	"bytes"
	"github.com/compactrl/compactrl/kernel"
	"slices"
	"strings"
	"testing"
)

func TestPathsTableRenders(t *testing.T) {
	base := func(path string, peak, gemm, train, dec float64) *Report {
		return &Report{Date: "2026-12-03 10:00 UTC", Machine: "test CPU", Threads: 2, GoVersion: "go1.26", KernelPath: path,
			Model: DefaultOptions().Model, Params: 3_000_000, Seq: 512, Batch: 8, DecodeBatch: 32, Prompt: 16, DecodeTokens: 128,
			PeakGFLOPS: peak, Gemm: []GemmResult{{Shape: SquareShapes(256)[0], GFLOPS: Measure{Value: gemm}}},
			Train: Measure{Value: train}, Decode: DecodeResult{Decode: Measure{Value: dec}, Generate: Measure{Value: dec / 2}}}
	}
	a := base("avx512", 400, 340, 6000, 12000)
	a.Torch = []TorchResult{{Engine: "PyTorch 2.5", Train: Measure{Value: 2000}, VsCompactrl: Comparison{Validity: Validity{Valid: true}}}}
	a.Validity = Validity{Valid: true}
	a.Llama = &LlamaResult{Engine: "llama.cpp b1", Rate: DecodeResult{Decode: Measure{Value: 3000}, Generate: Measure{Value: 2000}}}
	v := base("avx2", 200, 170, 3000, 6000)
	var b bytes.Buffer
	if err := WritePathsTable(&b, []*Report{a, v}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// Hand-computed: 6000/2000, 3000/2000; 12000/3000, 6000/3000; 340/400, 170/200.
	for _, want := range []string{
		"| measurement | reference | avx512 | avx2 |",
		"| training tokens/s | PyTorch 2.5: 2000 | 6000 (3.00×, valid) | 3000 (1.50×, not interleaved: INVALID) |",
		"Run conditions: avx512 valid; avx2 INVALID: ;",
		"| batch-32 decode tokens/s | llama.cpp b1: 3000 | 12000 (4.00×) | 6000 (2.00×) |",
		"| batch-32 generate tokens/s | llama.cpp b1: 2000 | 6000 (3.00×) | 3000 (1.50×) |",
		"| GEMM 256³ GFLOP/s | the path's FMA peak | 340 (85%) | 170 (85%) |",
		"| float32 FMA peak, 2 threads, GFLOP/s |  | 400 | 200 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	v.Threads = 1
	if err := WritePathsTable(&b, []*Report{a, v}); err == nil {
		t.Error("reports of different thread counts were put side by side")
	}
	if err := WritePathsTable(&b, nil); err == nil {
		t.Error("no reports gave no error")
	}
}

func TestParsePaths(t *testing.T) {
	all, err := ParsePaths("all")
	if err != nil || !slices.Equal(all, kernel.Paths()) {
		t.Fatalf("ParsePaths(all) = %v, %v; want %v", all, err, kernel.Paths())
	}
	if got, err := ParsePaths("go"); err != nil || !slices.Equal(got, []string{"go"}) {
		t.Errorf("ParsePaths(go) = %v, %v", got, err)
	}
	for _, bad := range []string{"go,go", "sse9", ""} {
		if _, err := ParsePaths(bad); err == nil {
			t.Errorf("ParsePaths(%q) gave no error", bad)
		}
	}
}

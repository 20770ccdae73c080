package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/internal/cputime"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/tokenizer"
)

// tinyOptions is a shape that runs each measurement in well under a second.
func tinyOptions() Options {
	o := DefaultOptions()
	o.Model = model.Config{Vocab: 320, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: FFNFor(32), RopeTheta: 10000, NormEps: 1e-5}
	o.Seq, o.Batch, o.Steps = 16, 2, 2
	o.DecodeBatch, o.Prompt, o.DecodeTokens, o.DecodeReps = 4, 3, 5, 1
	o.GemmSquare, o.GemmTime, o.PeakTime = []int{16}, 10*time.Millisecond, 20*time.Millisecond
	return o
}

func checkMeasure(t *testing.T, what string, m Measure, n int) {
	t.Helper()
	if len(m.Samples) != n {
		t.Fatalf("%s: %d samples, want %d", what, len(m.Samples), n)
	}
	for _, v := range append([]float64{m.Value}, m.Samples...) {
		if !(v > 0) || math.IsInf(v, 0) {
			t.Fatalf("%s: rate %g not positive and finite (%+v)", what, v, m)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []float64
		want float64
	}{{"one", []float64{3}, 3}, {"odd", []float64{5, 1, 3}, 3}, {"even", []float64{4, 1, 3, 2}, 2.5}} {
		t.Run(c.name, func(t *testing.T) {
			if got := median(c.in); got != c.want {
				t.Errorf("median(%v) = %g, want %g", c.in, got, c.want)
			}
		})
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is a number")
	}
	in := []float64{3, 1, 2}
	median(in)
	if in[0] != 3 || in[1] != 1 {
		t.Error("median reordered its argument")
	}
}

func TestFFNFor(t *testing.T) {
	// 8·256/3 = 682.7 → 688; 8·128/3 = 341.3 → 352 (the presets' widths).
	if FFNFor(256) != 688 || FFNFor(128) != 352 {
		t.Fatalf("FFNFor(256) = %d, FFNFor(128) = %d", FFNFor(256), FFNFor(128))
	}
}

func TestTrain(t *testing.T) {
	o := tinyOptions()
	m, err := Train(context.Background(), o.config(), o.Batch, o.Seq, 3)
	if err != nil {
		t.Fatal(err)
	}
	checkMeasure(t, "train", m, 3)
	if _, err := Train(context.Background(), o.config(), 1, o.config().MaxSeq, 1); err == nil {
		t.Fatal("sequence longer than max_seq accepted")
	}
}

func TestDecode(t *testing.T) {
	o := tinyOptions()
	m, err := model.New(o.config(), 1, false)
	if err != nil {
		t.Fatal(err)
	}
	prompts := Prompts(3, 4, func(r *rand.Rand) int { return r.IntN(o.Model.Vocab) })
	r, err := Decode(context.Background(), m, prompts, 6, 2)
	if err != nil {
		t.Fatal(err)
	}
	checkMeasure(t, "decode", r.Decode, 2)
	checkMeasure(t, "generate", r.Generate, 2)
	if _, err := Decode(context.Background(), m, prompts, 1, 1); err == nil {
		t.Fatal("one token accepted (no decode step to time)")
	}
	long := [][]int{make([]int, o.config().MaxSeq)}
	if _, err := Decode(context.Background(), m, long, 4, 1); err == nil {
		t.Fatal("prompt beyond max_seq accepted")
	}
}

func TestPromptsDeterministic(t *testing.T) {
	pick := func(r *rand.Rand) int { return r.IntN(100) }
	a, b := Prompts(3, 5, pick), Prompts(3, 5, pick)
	if len(a) != 3 || len(a[2]) != 5 {
		t.Fatalf("shape %d×%d", len(a), len(a[0]))
	}
	for i := range a {
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				t.Fatal("prompts differ between calls")
			}
		}
	}
}

func TestGemm(t *testing.T) {
	o := tinyOptions()
	shapes := append(SquareShapes(8, 33), ModelShapes(o.config(), o.Batch, o.Seq, o.DecodeBatch)...)
	for _, s := range shapes {
		g, err := Gemm(context.Background(), s, 5*time.Millisecond, 3)
		if err != nil {
			t.Fatal(err)
		}
		checkMeasure(t, "gemm "+s.Name, g, 3)
	}
	if _, err := Gemm(context.Background(), GemmShape{Name: "empty"}, time.Millisecond, 1); err == nil {
		t.Fatal("empty shape accepted")
	}
	if _, err := Gemm(context.Background(), GemmShape{Name: "packed Aᵀ", TransA: true, Packed: true, M: 2, N: 2, K: 2}, time.Millisecond, 1); err == nil {
		t.Fatal("a packed product with A transposed accepted")
	}
	// The model's shapes name the products the model runs: 2·M·N·K of the head is 2·B·T·V·d.
	ms := ModelShapes(o.config(), 2, 16, 4)
	if ms[3].Flops() != 2*32*320*32 {
		t.Fatalf("head flops %g", ms[3].Flops())
	}
}

func TestTableRenders(t *testing.T) {
	r := &Report{
		Date: "2026-12-02 10:00 UTC", Machine: "test CPU", Threads: 2, GoVersion: "go1.26", KernelPath: "avx512",
		Model: DefaultOptions().Model, Params: 3_000_000, Seq: 512, Batch: 8, DecodeBatch: 32, Prompt: 16, DecodeTokens: 128,
		PeakGFLOPS: 200,
		Gemm:       []GemmResult{{Shape: SquareShapes(256)[0], GFLOPS: Measure{Value: 150}}},
		Train:      Measure{Value: 3000, CPUShare: 0.975},
		Torch: []TorchResult{{Engine: "PyTorch 1.13", BLAS: "/usr/lib/blas/libblas.so.3", Train: Measure{Value: 2000, CPUShare: 0.5}},
			{Engine: "PyTorch 1.13", Train: Measure{Value: 4000}}},
		Decode: DecodeResult{Decode: Measure{Value: 900}, Generate: Measure{Value: 800}},
		Llama:  &LlamaResult{Engine: "llama.cpp 0.7", Args: []string{"-t", "2"}, Rate: DecodeResult{Decode: Measure{Value: 1200}, Generate: Measure{Value: 1000}}},
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// Hand-computed ratios: 3000/2000, 900/1200, 800/1000, 150/200.
	for _, want := range []string{"| training tokens/s | 3000 tok/s | PyTorch 1.13 + libblas.so.3: 2000 | 1.50× | ≥ 1.0× (aim 1.5×) | 1.95 / 1.00 |",
		"| training tokens/s | 3000 tok/s | PyTorch 1.13: 4000 | 0.75× |",
		"| batch-32 decode tokens/s (steady state) | 900 tok/s | llama.cpp 0.7: 1200 | 0.75× |",
		"prefill included) | 800 tok/s | llama.cpp 0.7: 1000 | 0.80× |",
		"| GEMM 256³ | 150 GFLOP/s | FMA peak: 200 | 0.75× |",
		"| float32 FMA peak, 2 threads (best of 10 windows) | 200 GFLOP/s |", "`-t 2`", "test CPU"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	r.Torch, r.Llama = nil, nil
	b.Reset()
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "PyTorch (skipped) | — |") || !strings.Contains(b.String(), "llama.cpp (skipped) | — |") {
		t.Errorf("skipped references not marked:\n%s", b.String())
	}
}

func TestRunBuiltinOnly(t *testing.T) {
	o := tinyOptions()
	o.SkipTorch, o.SkipLlama = true, true
	r, err := Run(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.PeakGFLOPS <= 0 || len(r.Gemm) != 1+7 || len(r.Torch) != 0 || r.Llama != nil {
		t.Fatalf("report %+v", r)
	}
	checkMeasure(t, "train", r.Train, o.Steps)
	checkMeasure(t, "decode", r.Decode.Decode, o.DecodeReps)
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil || back.Train.Value != r.Train.Value {
		t.Fatalf("JSON round trip: %v", err)
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil || !strings.Contains(b.String(), "training tokens/s") {
		t.Fatalf("table: %v\n%s", err, b.String())
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	for name, mod := range map[string]func(*Options){
		"threads":   func(o *Options) { o.Threads = 0 },
		"tokens":    func(o *Options) { o.DecodeTokens = 1 },
		"heads":     func(o *Options) { o.Model.Heads = 3 },
		"gemm size": func(o *Options) { o.GemmSquare = []int{0} },
		"no python": func(o *Options) { o.SkipTorch, o.Python = false, "" },
		"no llama":  func(o *Options) { o.SkipLlama, o.LlamaDir = false, "" },
	} {
		t.Run(name, func(t *testing.T) {
			o := tinyOptions()
			o.SkipTorch, o.SkipLlama = true, true
			mod(&o)
			if _, err := Run(context.Background(), o, nil); err == nil {
				t.Errorf("%s: bad options accepted", name)
			}
		})
	}
}

func TestTorch(t *testing.T) {
	python := testenv.Python
	testenv.MustHaveTorch(t, python)
	o := tinyOptions()
	r, err := Torch(context.Background(), python, "", o.config(), o.Batch, o.Seq, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkMeasure(t, "torch", r.Train, 2)
	if !strings.HasPrefix(r.Engine, "PyTorch ") || !strings.Contains(r.BLAS, "blas") {
		t.Fatalf("engine %q, BLAS %q", r.Engine, r.BLAS)
	}
	if _, err := os.Stat(OpenBLASDir); err == nil && !testing.Short() {
		ob, err := Torch(context.Background(), python, OpenBLASDir, o.config(), o.Batch, o.Seq, 1, 1)
		if err != nil || !strings.HasPrefix(ob.BLAS, OpenBLASDir) {
			t.Fatalf("torch on OpenBLAS: BLAS %q, %v", ob.BLAS, err)
		}
	}
	// A library directory that holds no BLAS cannot silently fall back to the system's.
	if _, err := Torch(context.Background(), python, t.TempDir(), o.config(), o.Batch, o.Seq, 1, 1); err == nil {
		t.Fatal("run without the asked-for BLAS accepted")
	}
}

// llamaInputs is what Llama compares on: tinyOptions' model, the GGUF's
// tokenizer and three prompts of four ordinary tokens.
func llamaInputs(t *testing.T) (*model.Model, *tokenizer.Tokenizer, [][]int) {
	t.Helper()
	o := tinyOptions()
	m, err := model.New(o.config(), 1, false)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Tokenizer(o.Model.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok, Prompts(3, 4, func(r *rand.Rand) int { return 1 + r.IntN(tok.VocabSize()-1) })
}

func TestLlama(t *testing.T) {
	dir := testenv.MustHaveLlama(t)
	if _, err := os.Stat(filepath.Join(dir, "root/usr/bin/llama-server")); err != nil {
		testenv.Unavailable(t, "no llama-server under %s", dir)
	}
	m, tok, prompts := llamaInputs(t)
	keep := filepath.Join(t.TempDir(), "m.gguf")
	r, err := Llama(context.Background(), dir, keep, m, tok, prompts, 6, 1, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkMeasure(t, "llama decode", r.Rate.Decode, 1)
	checkMeasure(t, "llama generate", r.Rate.Generate, 1)
	if !strings.HasPrefix(r.Engine, "llama.cpp") {
		t.Fatalf("engine %q", r.Engine)
	}
	if st, err := os.Stat(keep); err != nil || st.Size() < int64(4*m.NumParams()) {
		t.Fatalf("kept GGUF: %v", err)
	}
}

// TestLlamaMissingInstallNamesSkipFlag: where the llama.cpp installation
// cannot start (not installed, or a system it was not built for), the
// error names the flag that skips the comparison.
func TestLlamaMissingInstallNamesSkipFlag(t *testing.T) {
	m, tok, prompts := llamaInputs(t)
	_, err := Llama(context.Background(), t.TempDir(), "", m, tok, prompts, 4, 1, 1, nil)
	if err == nil || !strings.Contains(err.Error(), "--skip-llama") {
		t.Fatalf("Llama with no installation = %v; want an error naming --skip-llama", err)
	}
}

func TestCPUAccounting(t *testing.T) {
	// 3 CPU-seconds over 2 s of wall on 2 threads: 75% of the cores.
	if got := cpuShare(3*time.Second, 2*time.Second, 2); got != 0.75 {
		t.Fatalf("cpuShare = %g, want 0.75", got)
	}
	if cpuShare(0, time.Second, 2) != 0 || cpuShare(time.Second, 0, 2) != 0 {
		t.Fatal("unknown CPU time gives a share")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	c0 := cputime.Process()
	deadline := time.Now().Add(30 * time.Millisecond)
	x := 0.0
	for time.Now().Before(deadline) {
		x += math.Sqrt(x + 1)
	}
	if cputime.Process() <= c0 || pidCPU(os.Getpid()) <= 0 || x == 0 {
		t.Fatalf("CPU time did not advance: rusage %v → %v, /proc %v", c0, cputime.Process(), pidCPU(os.Getpid()))
	}
	if pidCPU(-1) != 0 {
		t.Fatal("CPU time of no process")
	}
	if l := loadAverage(); l < 0 {
		t.Fatalf("load average %g", l)
	}
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/internal/cputime"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/kernel"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/tokenizer"
)

// tinyOptions is a shape that runs each measurement in well under a second.
func tinyOptions() Options {
	o := DefaultOptions()
	o.Model = model.Config{Vocab: 320, Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: FFNFor(32), RopeTheta: 10000, NormEps: 1e-5}
	o.Seq, o.Batch, o.Steps, o.Rounds = 16, 2, 2, 2
	o.DecodeBatch, o.Prompt, o.DecodeTokens, o.DecodeReps = 4, 3, 5, 1
	o.GemmSquare, o.GemmTime, o.PeakTime = []int{16}, 10*time.Millisecond, 20*time.Millisecond
	o.BandwidthBytes = 1 << 20
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

// quietConditions are a run's conditions that break no rule: load below
// the threads, no steal, two peaks within 10% of each other, each with
// its cores.
func quietConditions() Conditions {
	return Conditions{Threads: 2, Load1Start: 0.4, Load1End: 2.1, Steal: 0,
		Peaks:     []PeakMeasure{{When: "before", Threads: 2, GFLOPS: 200, CPUShare: 0.99}, {When: "after", Threads: 2, GFLOPS: 190, CPUShare: 0.98}},
		Bandwidth: []BandwidthMeasure{{When: "before", Threads: 2, GBps: 25, CPUShare: 0.99}, {When: "after", Threads: 2, GBps: 24, CPUShare: 0.98}}}
}

func handReport() *Report {
	r := &Report{
		Date: "2026-12-02 10:00 UTC", Machine: "test CPU", Threads: 2, GoVersion: "go1.26", KernelPath: "avx512",
		Model: DefaultOptions().Model, Params: 3_000_000, Seq: 512, Batch: 8, Steps: 3, Rounds: 2, DecodeBatch: 32, Prompt: 16, DecodeTokens: 128,
		FlopsPerToken: 18e6, AttnFlopsPerToken: 2e6,
		Gemm:  []GemmResult{{Shape: SquareShapes(256)[0], GFLOPS: Measure{Value: 150, CPUShare: 0.97}}},
		Train: Measure{Value: 3000, CPUShare: 0.975, Rounds: []float64{2900, 3100}},
		Torch: []TorchResult{{Engine: "PyTorch 2.15.0", Config: TorchEager, BLAS: "MKL 2024.2", Train: Measure{Value: 2000, CPUShare: 0.5, Rounds: []float64{2000, 2000}}},
			{Engine: "PyTorch 2.15.0", Config: TorchCompile, BLAS: "MKL 2024.2", Train: Measure{Value: 4000, CPUShare: 0.95, Rounds: []float64{4000, 4000}}}},
		Decode: DecodeResult{Decode: Measure{Value: 900, CPUShare: 0.95}, Generate: Measure{Value: 800, CPUShare: 0.95}},
		Llama:  &LlamaResult{Engine: "llama.cpp 0.7", Weights: "F32", Args: []string{"-t", "2"}, Rate: DecodeResult{Decode: Measure{Value: 1200, CPUShare: 0.97}, Generate: Measure{Value: 1000, CPUShare: 0.97}}},
		Rules:  DefaultRules, Conditions: quietConditions(), Load1Start: 0.4, Load1End: 2.1,
	}
	r.Judge()
	return r
}

func TestTableRenders(t *testing.T) {
	r := handReport()
	if !r.Validity.Valid || r.PeakGFLOPS != 200 {
		t.Fatalf("quiet run judged %v, peak %g", r.Validity, r.PeakGFLOPS)
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// Hand-computed ratios: 3000/2000 (rounds 2900/2000, 3100/2000), 3000/4000, 900/1200, 800/1000, 150/200.
	// MFU: 3000 · 18e6 / 200e9 = 0.27; with attention 3000 · 20e6 / 200e9 = 0.30; compile 4000 · 18e6 / 200e9 = 0.36.
	for _, want := range []string{
		"| training tokens/s | 3000 tok/s | PyTorch 2.15.0 eager fp32 (attention written out, AdamW default): 2000 | 1.50× (1.45, 1.55) | ≥ 1.0× (aim 1.5×) | 1.95 / 1.00 | INVALID: PyTorch eager had 1.00 of 2 cores",
		"| training tokens/s | 3000 tok/s | PyTorch 2.15.0 torch.compile fp32 (SDPA model, fused AdamW): 4000 | 0.75× (0.72, 0.78) | ≥ 1.0× (aim 1.5×) | 1.95 / 1.90 | valid |",
		"| batch-32 decode tokens/s (steady state) | 900 tok/s | llama.cpp 0.7 on F32 weights: 1200 | 0.75× |",
		"prefill included) | 800 tok/s | llama.cpp 0.7 on F32 weights: 1000 | 0.80× |",
		"| GEMM 256³ | 150 GFLOP/s | FMA peak: 200 | 0.75× |",
		"| float32 FMA peak before, 2 threads (best of 10 windows) | 200 GFLOP/s | | | | 1.98 | |",
		"| streaming read bandwidth after, 2 threads (best of 10 windows) | 24.0 GB/s | | | | 1.96 | |",
		"| compactrl (avx512) | 3000 | 0.27 | 0.30 | 1.95 | valid |",
		"| 2000 | 0.18 | 0.20 | 1.00 | INVALID: PyTorch eager had 1.00 of 2 cores (50% of its threads' time, under 90%) |",
		"| PyTorch 2.15.0 torch.compile fp32 (SDPA model, fused AdamW) | 4000 | 0.36 | 0.40 | 1.90 | valid |",
		"**Run conditions: valid**", "PyTorch: PyTorch 2.15.0 from", "multiplies with MKL 2024.2", "`-t 2`", "test CPU"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	r.Torch, r.Llama, r.DecodeCmp, r.GenerateCmp = nil, nil, nil, nil
	b.Reset()
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "PyTorch (skipped) | — |") || !strings.Contains(b.String(), "llama.cpp (skipped) | — |") {
		t.Errorf("skipped references not marked:\n%s", b.String())
	}
}

// TestValidityRules: each rule on hand-made measurements, alone, marks the
// run (or the one ratio) invalid, and the quiet conditions break none.
func TestValidityRules(t *testing.T) {
	if rs := quietConditions().reasons(DefaultRules); len(rs) != 0 {
		t.Fatalf("quiet conditions judged invalid: %q", rs)
	}
	for _, c := range []struct {
		name string
		mod  func(*Conditions)
		want string
	}{
		{"load before", func(c *Conditions) { c.Load1Start = 2.3 }, "load average 2.30 before the run exceeds the 2 threads"},
		{"load unknown", func(c *Conditions) { c.Load1Start = -1 }, "load average unknown"},
		{"load after", func(c *Conditions) { c.Load1End = 4.5 }, "load average 4.50 after the run exceeds twice"},
		{"steal", func(c *Conditions) { c.Steal = 0.08 }, "8% of CPU time stolen"},
		{"peak share", func(c *Conditions) { c.Peaks[1].CPUShare = 0.7 }, "the FMA peak after had 1.40 of 2 cores"},
		{"peak spread", func(c *Conditions) { c.Peaks[1].GFLOPS = 120 }, "the FMA peak after (120 GFLOP/s) is 60% of the best (200)"},
		{"quiet peak", func(c *Conditions) { c.QuietPeak = 234 }, "the best FMA peak (200 GFLOP/s) is 85% of the quiet machine's 234"},
		{"no peak", func(c *Conditions) { c.Peaks = nil }, "no FMA peak measured"},
		{"bandwidth share", func(c *Conditions) { c.Bandwidth[0].CPUShare = 0.6 }, "the read bandwidth before had 1.20 of 2 cores"},
		{"bandwidth spread", func(c *Conditions) { c.Bandwidth[1].GBps = 15 }, "the read bandwidth after (15.0 GB/s) is 60% of the best (25.0)"},
		{"quiet bandwidth", func(c *Conditions) { c.QuietBandwidth = 30 }, "the best read bandwidth (25.0 GB/s) is 83% of the quiet machine's 30.0"},
		{"quiet bandwidth, none measured", func(c *Conditions) { c.QuietBandwidth, c.Bandwidth = 27, nil }, "a quiet read bandwidth was given but none measured"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cond := quietConditions()
			c.mod(&cond)
			rs := cond.reasons(DefaultRules)
			if len(rs) != 1 || !strings.Contains(rs[0], c.want) {
				t.Fatalf("reasons %q, want one containing %q", rs, c.want)
			}
			r := handReport()
			r.Conditions = cond
			r.Judge()
			var b bytes.Buffer
			if err := r.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			if r.Validity.Valid || !strings.Contains(b.String(), "**NOT A VALID COMPARISON: ") {
				t.Fatalf("run judged %v:\n%s", r.Validity, b.String())
			}
			for _, tr := range r.Torch {
				if tr.VsCompactrl.Validity.Valid {
					t.Errorf("%s ratio valid in an invalid run", tr.Config)
				}
			}
			if r.TrainMFUValidity.Valid || strings.Contains(b.String(), "| valid |") {
				t.Errorf("a row is valid in an invalid run:\n%s", b.String())
			}
		})
	}
	// A quiet peak and bandwidth the run matches (within 10%) are no reason.
	cond := quietConditions()
	cond.QuietPeak, cond.QuietBandwidth = 215, 27
	if rs := cond.reasons(DefaultRules); len(rs) != 0 {
		t.Fatalf("peak 200 against quiet 215 judged invalid: %q", rs)
	}
	// Each side of a ratio: 0.9 of its threads is the limit, unknown CPU time is no pass.
	for _, c := range []struct {
		ours, ref float64
		valid     bool
	}{{0.95, 0.95, true}, {0.9, 0.9, true}, {0.89, 0.95, false}, {0.95, 0.6, false}, {0.95, 0, false}} {
		cmp := compare(DefaultRules, nil, 2, Measure{Value: 1, CPUShare: c.ours}, "ref", Measure{Value: 1, CPUShare: c.ref})
		if cmp.Validity.Valid != c.valid {
			t.Errorf("shares %g / %g: %v, want valid %v", c.ours, c.ref, cmp.Validity, c.valid)
		}
	}
	// The loaded run: MKL lost half its cores, compactrl a quarter; a 5.5× "ratio".
	cmp := compare(DefaultRules, nil, 2, Measure{Value: 5500, CPUShare: 0.75}, "PyTorch eager", Measure{Value: 1000, CPUShare: 0.5})
	if cmp.Validity.Valid || len(cmp.Validity.Reasons) != 2 || cmp.Ratio != 5.5 {
		t.Fatalf("loaded ratio judged %+v", cmp)
	}
}

func TestMFU(t *testing.T) {
	// 6 · 3.69M · 6000 tok/s = 132.8 GFLOP/s over a 232 GFLOP/s peak.
	if got := MFU(6000, 6*3.69e6, 232); math.Abs(got-0.5726) > 1e-3 {
		t.Fatalf("MFU = %g", got)
	}
	if !math.IsNaN(MFU(1, 1, 0)) {
		t.Fatal("MFU without a peak is a number")
	}
	o := DefaultOptions()
	cfg := o.config()
	// 12 · layers · heads · head_dim · seq: 12 · 4 · 4 · 64 · 512.
	if got := 12 * float64(cfg.Layers*cfg.Heads*cfg.HeadDim()*o.Seq); got != 12*4*4*64*512 {
		t.Fatalf("attention FLOPs %g", got)
	}
}

func TestRunBuiltinOnly(t *testing.T) {
	o := tinyOptions()
	o.SkipTorch, o.SkipLlama = true, true
	r, err := Run(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.PeakGFLOPS <= 0 || len(r.Gemm) != 1+7 || len(r.Torch) != 0 || r.Llama != nil || len(r.Conditions.Peaks) != 2 {
		t.Fatalf("report %+v", r)
	}
	if bw := r.Conditions.Bandwidth; len(bw) != 2 || !(bw[0].GBps > 0) || !(bw[1].GBps > 0) || bw[1].When != "after the run" {
		t.Fatalf("read bandwidth %+v", bw)
	}
	checkMeasure(t, "train", r.Train, o.Steps*o.Rounds)
	if len(r.Train.Rounds) != o.Rounds {
		t.Fatalf("%d round medians, want %d", len(r.Train.Rounds), o.Rounds)
	}
	checkMeasure(t, "decode", r.Decode.Decode, o.DecodeReps)
	if r.FlopsPerToken != 6*float64(r.Params) {
		t.Fatalf("flops a token %g for %d parameters", r.FlopsPerToken, r.Params)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil || back.Train.Value != r.Train.Value || back.Validity.Valid != r.Validity.Valid {
		t.Fatalf("JSON round trip: %v", err)
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil || !strings.Contains(b.String(), "training tokens/s") || !strings.Contains(b.String(), "| compactrl (") {
		t.Fatalf("table: %v\n%s", err, b.String())
	}
}

// TestRunBuiltinBF16: with precision bf16 the built-in engine trains and
// decodes on bfloat16 products, and the report and its table say so.
func TestRunBuiltinBF16(t *testing.T) {
	o := tinyOptions()
	o.SkipTorch, o.SkipLlama, o.Precision = true, true, "bf16"
	r, err := Run(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkMeasure(t, "train", r.Train, o.Steps*o.Rounds)
	checkMeasure(t, "decode", r.Decode.Decode, o.DecodeReps)
	if r.Precision != "bf16" || r.BF16Native != kernel.BF16Native() {
		t.Fatalf("report precision %q, native %v (kernel: %v)", r.Precision, r.BF16Native, kernel.BF16Native())
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil || !strings.Contains(b.String(), "bfloat16 products") || !strings.Contains(b.String(), "bf16 products") {
		t.Fatalf("table: %v\n%s", err, b.String())
	}
}

// fakePython writes an executable that speaks torch_train.py's protocol for
// tinyOptions' shape on one thread (configs eager and sdpa), logging each
// command to log, so that Run's interleaving is tested without torch.
func fakePython(t *testing.T, log string) string {
	t.Helper()
	o := tinyOptions()
	script := `#!/bin/sh
echo '{"engine": "PyTorch 9.9 (fake)", "version": "9.9", "threads": 1, "tokens_per_step": ` + strconv.Itoa(o.Batch*o.Seq) + `, "configs": ["eager", "sdpa"], "blas": "MKL 0.0", "blas_library": "", "mkl": true, "mkldnn": true, "cpu_capability": "AVX512", "warmup_s": {}}'
while read cmd cfg n; do
  [ "$cmd" = quit ] && exit 0
  echo "$cmd $cfg $n" >> ` + log + `
  steps=""
  i=0
  while [ $i -lt $n ]; do steps="$steps${steps:+, }0.01"; i=$((i+1)); done
  echo "{\"config\": \"$cfg\", \"step_s\": [$steps], \"cpu_s\": 0.001, \"loss\": 5.0}"
done
`
	p := filepath.Join(t.TempDir(), "python")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// runLogged is Run with its progress lines, which it returns; an error
// fails t with them.
func runLogged(t *testing.T, o Options) (*Report, string) {
	t.Helper()
	var progress bytes.Buffer
	r, err := Run(context.Background(), o, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	return r, progress.String()
}

// TestRunInterleaves: compactrl and each PyTorch configuration take turns,
// the order reversed every other round; the fake's tiny CPU time makes
// its ratios invalid (under 0.9 of its thread).
func TestRunInterleaves(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the fake interpreter is a shell script")
	}
	log := filepath.Join(t.TempDir(), "log")
	o := tinyOptions()
	o.Threads, o.SkipLlama, o.Rounds, o.Steps = 1, true, 3, 2
	o.Python, o.TorchConfigs = fakePython(t, log), []string{TorchEager, TorchSDPA}
	r, progress := runLogged(t, o)
	var order []string
	for _, line := range strings.Split(progress, "\n") {
		if _, rest, ok := strings.Cut(line, "training round "); ok {
			name, _, _ := strings.Cut(rest[strings.Index(rest, ": ")+2:], ",")
			order = append(order, strings.Fields(name)[0]+" "+strings.Fields(name)[len(strings.Fields(name))-1])
		}
	}
	want := []string{"compactrl compactrl", "PyTorch installed)", "PyTorch installed)", "PyTorch installed)", "PyTorch installed)", "compactrl compactrl", "compactrl compactrl", "PyTorch installed)", "PyTorch installed)"}
	if !slices.Equal(order, want) {
		t.Fatalf("round order %q, want %q\n%s", order, want, progress)
	}
	logged, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(logged)); strings.Join(got, " ") != "run eager 2 run sdpa 2 run sdpa 2 run eager 2 run eager 2 run sdpa 2" {
		t.Fatalf("commands %q", logged)
	}
	if len(r.Torch) != 2 || r.Torch[0].Config != TorchEager || r.Torch[1].Config != TorchSDPA {
		t.Fatalf("torch rows %+v", r.Torch)
	}
	for _, tr := range r.Torch {
		// 2 steps × 3 rounds of 0.01 s at 32 tokens a step.
		if len(tr.Train.Samples) != 6 || tr.Train.Value != 3200 || len(tr.VsCompactrl.RoundRatios) != 3 || tr.VsCompactrl.Validity.Valid {
			t.Fatalf("%s: %+v", tr.Config, tr)
		}
		if !strings.Contains(strings.Join(tr.VsCompactrl.Validity.Reasons, ";"), "PyTorch "+tr.Config+" had 0.05 of 1 cores") {
			t.Fatalf("%s: reasons %q", tr.Config, tr.VsCompactrl.Validity.Reasons)
		}
	}
	if !strings.Contains(r.TorchPython, "(--python)") {
		t.Fatalf("interpreter's origin %q", r.TorchPython)
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	for name, mod := range map[string]func(*Options){
		"threads":      func(o *Options) { o.Threads = 0 },
		"tokens":       func(o *Options) { o.DecodeTokens = 1 },
		"heads":        func(o *Options) { o.Model.Heads = 3 },
		"gemm size":    func(o *Options) { o.GemmSquare = []int{0} },
		"rounds":       func(o *Options) { o.Rounds = 0 },
		"rules":        func(o *Options) { o.Rules = Rules{} },
		"quiet peak":   func(o *Options) { o.QuietPeak = -1 },
		"quiet bw":     func(o *Options) { o.QuietBandwidth = -1 },
		"bw buffer":    func(o *Options) { o.BandwidthBytes = 1000 },
		"torch source": func(o *Options) { o.SkipTorch, o.TorchSource = false, "conda" },
		"blas on pypi": func(o *Options) { o.SkipTorch, o.TorchSource, o.TorchBLAS = false, TorchPyPI, []string{""} },
		"config":       func(o *Options) { o.TorchConfigs = []string{"jit"} },
		"no llama":     func(o *Options) { o.SkipLlama, o.LlamaDir = false, "" },
		"precision":    func(o *Options) { o.Precision = "fp16" },
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

func TestResolveTorchPython(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	t.Setenv(TorchPythonEnv, "")
	if _, _, err := ResolveTorchPython(TorchPyPI); err == nil || !strings.Contains(err.Error(), "bench/torch/setup.sh") || !strings.Contains(err.Error(), "--torch debian") {
		t.Fatalf("no venv: %v; want advice naming setup.sh and the fallback", err)
	}
	// Run looks for it before measuring anything.
	o := tinyOptions()
	o.SkipLlama = true
	var progress bytes.Buffer
	if _, err := Run(context.Background(), o, &progress); err == nil || !strings.Contains(err.Error(), "setup.sh") || progress.Len() != 0 {
		t.Fatalf("Run without PyTorch 2.x: %v after %q", err, progress.String())
	}
	venv, err := ManagedTorchVenv()
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" && venv != filepath.Join(cache, "compactrl", "torch-venv") {
		t.Fatalf("managed venv %s", venv)
	}
	py := filepath.Join(venv, "bin", "python")
	if err := os.MkdirAll(filepath.Dir(py), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(py, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, from, err := ResolveTorchPython(TorchPyPI); err != nil || got != py || !strings.Contains(from, "managed venv") {
		t.Fatalf("managed venv: %s (%s), %v", got, from, err)
	}
	t.Setenv(TorchPythonEnv, "/opt/x/python")
	if got, from, err := ResolveTorchPython(TorchPyPI); err != nil || got != "/opt/x/python" || from != "$"+TorchPythonEnv {
		t.Fatalf("env: %s (%s), %v", got, from, err)
	}
	if got, _, err := ResolveTorchPython(TorchDebian); err != nil || got != DebianPython {
		t.Fatalf("debian: %s, %v", got, err)
	}
	if _, _, err := ResolveTorchPython("conda"); err == nil {
		t.Fatal("unknown source accepted")
	}
}

// torch2Python is the interpreter of a venv with PyTorch 2.x from PyPI:
// $COMPACTRL_TORCH_PYTHON, else $COMPACTRL_VERL_PYTHON (the verl venv
// .ci/run makes pins torch 2.15.0 from PyPI).
func torch2Python(t *testing.T) string {
	t.Helper()
	for _, env := range []string{TorchPythonEnv, testenv.VerlEnv} {
		if p := os.Getenv(env); p != "" {
			testenv.MustHaveTorch(t, p)
			return p
		}
	}
	testenv.Unavailable(t, "no PyTorch 2.x: neither %s nor %s is set", TorchPythonEnv, testenv.VerlEnv)
	return ""
}

// TestTorchPyPI runs every configuration of torch_train.py for a tiny shape
// on PyTorch 2.x (torch.compile only outside -short: it compiles for tens
// of seconds): the float32 configurations do the same work (the same loss
// after the same steps), the BLAS is named from torch's build
// configuration, and bad requests fail.
func TestTorchPyPI(t *testing.T) {
	python := torch2Python(t)
	o := tinyOptions()
	configs := []string{TorchEager, TorchSDPA, TorchBF16}
	if !testing.Short() {
		configs = []string{TorchEager, TorchSDPA, TorchCompile, TorchBF16}
	}
	s, err := StartTorch(context.Background(), python, "", configs, o.config(), o.Batch, o.Seq, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Hello
	if !strings.HasPrefix(h.Version, "2.") || !strings.HasPrefix(h.Engine, "PyTorch 2.") {
		t.Fatalf("engine %q, version %q: want PyTorch 2.x", h.Engine, h.Version)
	}
	if h.MKL && !strings.Contains(h.BLAS, "MKL ") || !strings.Contains(h.BLAS, "BLAS_INFO=") || strings.Contains(h.BLAS, "openblas") {
		t.Fatalf("BLAS %q (mkl %v, mkldnn %v)", h.BLAS, h.MKL, h.MKLDNN)
	}
	losses := map[string]float64{}
	for _, c := range configs {
		r, err := s.Round(c, 2)
		if err != nil {
			t.Fatal(err)
		}
		losses[c] = r.Loss
		res := s.Result(c, []TorchRound{r})
		checkMeasure(t, "torch "+c, res.Train, 2)
		if res.Train.CPUShare <= 0 || res.Config != c || !strings.Contains(res.Label(), torchConfigLabel[c]) {
			t.Fatalf("%s: %+v", c, res)
		}
	}
	for _, c := range configs {
		tol := 1e-3
		if c == TorchBF16 {
			tol = 0.05
		}
		if math.Abs(losses[c]-losses[TorchEager]) > tol {
			t.Errorf("%s's loss %g differs from eager's %g by more than %g: not the same work", c, losses[c], losses[TorchEager], tol)
		}
	}
	if _, err := s.Round("jit", 1); err == nil {
		t.Fatal("unknown configuration accepted")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := StartTorch(context.Background(), python, "", []string{"jit"}, o.config(), o.Batch, o.Seq, 1); err == nil {
		t.Fatal("unknown configuration started")
	}
}

// TestTorchDebian is the named fallback: Debian's torch 1.13 runs the eager
// configuration on the system's libblas.so.3 and on OpenBLAS where
// present, refuses the others, and cannot silently fall back to the
// system's BLAS when asked for another.
func TestTorchDebian(t *testing.T) {
	python := DebianPython
	testenv.MustHaveTorch(t, python)
	o := tinyOptions()
	run := func(blas string) TorchResult {
		t.Helper()
		s, err := StartTorch(context.Background(), python, blas, []string{TorchEager}, o.config(), o.Batch, o.Seq, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r, err := s.Round(TorchEager, 2)
		if err != nil {
			t.Fatal(err)
		}
		return s.Result(TorchEager, []TorchRound{r})
	}
	r := run("")
	checkMeasure(t, "torch", r.Train, 2)
	if !strings.HasPrefix(r.Engine, "PyTorch ") || r.BLAS == "" {
		t.Fatalf("engine %q, BLAS %q", r.Engine, r.BLAS)
	}
	if _, err := os.Stat(OpenBLASDir); err == nil && !testing.Short() {
		if ob := run(OpenBLASDir); !strings.HasPrefix(ob.BLASLibrary, OpenBLASDir) || !strings.Contains(ob.Label(), "libblas.so.3") {
			t.Fatalf("torch on OpenBLAS: library %q, label %q", ob.BLASLibrary, ob.Label())
		}
	}
	if _, err := StartTorch(context.Background(), python, t.TempDir(), []string{TorchEager}, o.config(), o.Batch, o.Seq, 1); err == nil {
		t.Fatal("run without the asked-for BLAS accepted")
	}
	if strings.HasPrefix(r.Engine, "PyTorch 1.") {
		if _, err := StartTorch(context.Background(), python, "", []string{TorchSDPA}, o.config(), o.Batch, o.Seq, 1); err == nil || !strings.Contains(err.Error(), "lacks") {
			t.Fatalf("torch 1.x started the SDPA configuration: %v", err)
		}
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

// TestLlama serves the model with llama.cpp on F32 and on BF16 weights
// (the bf16 arm's) and times the decode.
func TestLlama(t *testing.T) {
	dir := testenv.MustHaveLlama(t)
	if _, err := os.Stat(filepath.Join(dir, "root/usr/bin/llama-server")); err != nil {
		testenv.Unavailable(t, "no llama-server under %s", dir)
	}
	m, tok, prompts := llamaInputs(t)
	for _, c := range []struct{ typ uint32 }{{format.GGMLTypeF32}, {format.GGMLTypeBF16}} {
		name := format.GGMLTypeName(c.typ)
		t.Run(name, func(t *testing.T) {
			keep := filepath.Join(t.TempDir(), "m.gguf")
			r, err := Llama(context.Background(), dir, keep, m, c.typ, tok, prompts, 6, 1, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkMeasure(t, "llama decode", r.Rate.Decode, 1)
			checkMeasure(t, "llama generate", r.Rate.Generate, 1)
			if !strings.HasPrefix(r.Engine, "llama.cpp") || r.Weights != name {
				t.Fatalf("engine %q on %q weights, want %s", r.Engine, r.Weights, name)
			}
			f, err := format.ReadGGUFMeta(keep)
			if err != nil {
				t.Fatalf("kept GGUF: %v", err)
			}
			for _, ti := range f.Tensors {
				if want := map[bool]uint32{true: c.typ, false: format.GGMLTypeF32}[len(ti.Shape) == 2]; ti.Type != want {
					t.Errorf("kept GGUF: %s is %s, want %s", ti.Name, format.GGMLTypeName(ti.Type), format.GGMLTypeName(want))
				}
			}
		})
	}
}

// TestRunInterleavesDecode: the built-in decoder and llama.cpp's server
// take turns round by round, the order reversed every other round, and
// every round gets its own ratio (this machine's read bandwidth, which
// bounds decoding, moves within minutes).
func TestRunInterleavesDecode(t *testing.T) {
	dir := testenv.MustHaveLlama(t)
	if _, err := os.Stat(filepath.Join(dir, "root/usr/bin/llama-server")); err != nil {
		testenv.Unavailable(t, "no llama-server under %s", dir)
	}
	o := tinyOptions()
	o.Threads, o.SkipTorch, o.LlamaDir, o.DecodeReps = 1, true, dir, 3
	r, progress := runLogged(t, o)
	var order []string
	for _, line := range strings.Split(progress, "\n") {
		if _, rest, ok := strings.Cut(line, "decode round "); ok {
			_, side, _ := strings.Cut(rest, ": ")
			side, _, _ = strings.Cut(side, ",")
			order = append(order, side)
		}
	}
	want := []string{"compactrl", "llama.cpp", "llama.cpp", "compactrl", "compactrl", "llama.cpp"}
	if !slices.Equal(order, want) {
		t.Fatalf("decode round order %q, want %q\n%s", order, want, progress)
	}
	if r.Llama == nil || r.DecodeCmp == nil {
		t.Fatalf("no llama.cpp comparison: %+v", r)
	}
	ours, ref := r.Decode.Decode, r.Llama.Rate.Decode
	checkMeasure(t, "decode", ours, 3)
	checkMeasure(t, "llama decode", ref, 3)
	if len(r.DecodeCmp.RoundRatios) != 3 || len(r.GenerateCmp.RoundRatios) != 3 {
		t.Fatalf("round ratios %v and %v, want 3 each", r.DecodeCmp.RoundRatios, r.GenerateCmp.RoundRatios)
	}
	for i, x := range r.DecodeCmp.RoundRatios {
		if x != ours.Rounds[i]/ref.Rounds[i] || ours.Rounds[i] != ours.Samples[i] {
			t.Fatalf("round %d: ratio %g from %g and %g", i, x, ours.Rounds[i], ref.Rounds[i])
		}
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "3 interleaved rounds each side") {
		t.Fatalf("table does not say the decode rounds were interleaved:\n%s", table.String())
	}
}

// TestLlamaMissingInstallNamesSkipFlag: where the llama.cpp installation
// cannot start (not installed, or a system it was not built for), the
// error names the flag that skips the comparison.
func TestLlamaMissingInstallNamesSkipFlag(t *testing.T) {
	m, tok, prompts := llamaInputs(t)
	_, err := Llama(context.Background(), t.TempDir(), "", m, format.GGMLTypeF32, tok, prompts, 4, 1, 1, nil)
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

// Each interpreter gets its own torch.compile cache, so that two torch
// installs never load each other's compiled kernels.
func TestInductorCachePerInterpreter(t *testing.T) {
	a, b := inductorCache("/venv-a/bin/python"), inductorCache("/venv-b/bin/python")
	if a == b || a != inductorCache("/venv-a/bin/python") || !strings.HasPrefix(a, os.TempDir()) {
		t.Fatalf("caches %q and %q", a, b)
	}
}

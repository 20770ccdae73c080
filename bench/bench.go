// Package bench measures the performance anchors of docs/design.md §6 side by
// side in one run, on one machine, at one thread count and one model shape,
// and renders them as a table of ratios.
//
// Data flow: Options → Run, which sets runtime.GOMAXPROCS to the thread
// count and measures, in order, the float32 FMA peak
// (kernel.MeasurePeakGFLOPS), kernel.Gemm on square and on the model's own
// shapes (Gemm), the built-in training step (Train) and PyTorch's on the
// same shape (Torch, an embedded script run by python), batched KV-cached
// decoding in model.Decoder (Decode) and in llama.cpp's llama-server on the
// same weights exported to GGUF (Llama) → Report → Report.WriteTable
// (Markdown) or JSON. Every rate is the median of several timed runs.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/compactrl/compactrl/kernel"
	"github.com/compactrl/compactrl/model"
)

// Options say what Run measures. Zero fields take DefaultOptions' values
// where noted.
type Options struct {
	Threads int          // goroutines / intra-op threads of every engine
	Model   model.Config // shape of the benchmarked model (MaxSeq is derived)
	Seq     int          // training sequence length
	Batch   int          // training sequences a step
	Steps   int          // timed training steps (each side)

	DecodeBatch  int // sequences decoded at once
	Prompt       int // prompt tokens of each decoded sequence
	DecodeTokens int // new tokens of each decoded sequence
	DecodeReps   int // timed decode rounds (each side)

	GemmSquare []int         // n of the n×n×n products
	GemmTime   time.Duration // time per GEMM shape
	PeakTime   time.Duration // time of the FMA peak measurement

	Python    string   // interpreter with torch, e.g. /usr/bin/python3
	TorchBLAS []string // one PyTorch run each: "" as installed, or a directory holding a libblas.so.3 (see Torch)
	GGUF      string   // where to keep the exported GGUF ("" : a temporary file)
	LlamaDir  string   // llama.cpp install (DIR/run, DIR/root/usr/bin/llama-server)
	LlamaArgs []string // extra llama-server flags (e.g. -fa off -ctk f32 -ctv f32)
	SkipTorch bool
	SkipLlama bool
}

// DefaultOptions is issue 3's shape: d=256, 4 layers, 4 heads (no
// grouping), SwiGLU width 688, vocab 1024, untied head, sequence 512, batch
// 8, 2 threads; 32 sequences decoding 128 tokens after 16-token prompts.
func DefaultOptions() Options {
	return Options{
		Threads: 2,
		Model:   model.Config{Vocab: 1024, Dim: 256, Layers: 4, Heads: 4, KVHeads: 4, FFN: 688, RopeTheta: 10000, NormEps: 1e-5},
		Seq:     512, Batch: 8, Steps: 5,
		DecodeBatch: 32, Prompt: 16, DecodeTokens: 128, DecodeReps: 3,
		GemmSquare: []int{256, 1024}, GemmTime: 500 * time.Millisecond, PeakTime: time.Second,
		Python: "/usr/bin/python3", TorchBLAS: defaultTorchBLAS(), LlamaDir: os.Getenv(LlamaEnv),
	}
}

// defaultTorchBLAS is torch as installed and, where Debian's OpenBLAS is
// present, torch on OpenBLAS: Debian's python3-torch takes the system
// libblas.so.3, which is the unoptimised reference BLAS unless an optimised
// one is installed and selected.
func defaultTorchBLAS() []string {
	out := []string{""}
	if _, err := os.Stat(OpenBLASDir + "/libblas.so.3"); err == nil {
		out = append(out, OpenBLASDir)
	}
	return out
}

// FFNFor is the SwiGLU width Llama uses for dimension d: 8d/3 rounded up to
// a multiple of 16 (688 for d = 256).
func FFNFor(d int) int { return (8*d/3 + 15) / 16 * 16 }

// config is o.Model with MaxSeq large enough for training and decoding.
func (o Options) config() model.Config {
	c := o.Model
	c.MaxSeq = max(o.Seq+1, o.Prompt+o.DecodeTokens+1)
	return c
}

func (o Options) validate() error {
	switch {
	case o.Threads <= 0:
		return fmt.Errorf("bench: threads %d must be positive", o.Threads)
	case o.Seq <= 0 || o.Batch <= 0 || o.Steps <= 0:
		return fmt.Errorf("bench: seq %d, batch %d and steps %d must be positive", o.Seq, o.Batch, o.Steps)
	case o.DecodeBatch <= 0 || o.Prompt <= 0 || o.DecodeTokens < 2 || o.DecodeReps <= 0:
		return fmt.Errorf("bench: decode batch %d, prompt %d, reps %d must be positive and decode tokens %d at least 2", o.DecodeBatch, o.Prompt, o.DecodeReps, o.DecodeTokens)
	case o.GemmTime <= 0 || o.PeakTime <= 0:
		return fmt.Errorf("bench: gemm time %v and peak time %v must be positive", o.GemmTime, o.PeakTime)
	case !o.SkipTorch && o.Python == "":
		return errors.New("bench: no python interpreter for the PyTorch comparison (set one or skip it)")
	case !o.SkipTorch && len(o.TorchBLAS) == 0:
		return errors.New("bench: no PyTorch variant to run (TorchBLAS is empty; \"\" runs torch as installed)")
	case !o.SkipLlama && o.LlamaDir == "":
		return fmt.Errorf("bench: no llama.cpp directory for the decode comparison (set %s or skip it)", LlamaEnv)
	}
	for _, n := range o.GemmSquare {
		if n <= 0 {
			return fmt.Errorf("bench: gemm size %d must be positive", n)
		}
	}
	if err := o.config().Validate(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// GemmResult is one GEMM shape's throughput in GFLOP/s.
type GemmResult struct {
	Shape  GemmShape `json:"shape"`
	GFLOPS Measure   `json:"gflops"`
}

// Report is everything one Run measured. Torch is empty and Llama nil when
// skipped.
type Report struct {
	Date       string `json:"date"`
	Machine    string `json:"machine"`
	GoVersion  string `json:"go_version"`
	KernelPath string `json:"kernel_path"`
	Threads    int    `json:"threads"`
	// Load1Start and Load1End are the 1-minute load averages before and after the run.
	Load1Start float64 `json:"load1_start"`
	Load1End   float64 `json:"load1_end"`

	Model        model.Config `json:"model"`
	Params       int          `json:"params"`
	Seq          int          `json:"seq"`
	Batch        int          `json:"batch"`
	DecodeBatch  int          `json:"decode_batch"`
	Prompt       int          `json:"prompt"`
	DecodeTokens int          `json:"decode_tokens"`

	PeakGFLOPS float64       `json:"peak_gflops"`
	Gemm       []GemmResult  `json:"gemm"`
	Train      Measure       `json:"train_tokens_per_s"`
	Torch      []TorchResult `json:"torch,omitempty"`
	Decode     DecodeResult  `json:"decode_tokens_per_s"`
	Llama      *LlamaResult  `json:"llama,omitempty"`
}

// Run measures everything o asks for, writing one progress line per
// measurement to progress (may be nil). It sets runtime.GOMAXPROCS to
// o.Threads for its duration.
func Run(ctx context.Context, o Options, progress io.Writer) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if progress == nil {
		progress = io.Discard
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(o.Threads))
	cfg := o.config()
	r := &Report{
		Date: time.Now().UTC().Format("2006-01-02 15:04 MST"), Machine: cpuModel(), GoVersion: runtime.Version(),
		KernelPath: kernel.Path(), Threads: o.Threads, Load1Start: loadAverage(), Model: cfg, Params: cfg.NumParams(),
		Seq: o.Seq, Batch: o.Batch, DecodeBatch: o.DecodeBatch, Prompt: o.Prompt, DecodeTokens: o.DecodeTokens,
	}
	step := func(what string) { fmt.Fprintf(progress, "bench: %s\n", what) }

	step(fmt.Sprintf("FMA peak, %d threads", o.Threads))
	labeled(ctx, "peak", func(context.Context) { r.PeakGFLOPS = kernel.MeasurePeakGFLOPS(o.Threads, o.PeakTime) })
	shapes := append(SquareShapes(o.GemmSquare...), ModelShapes(cfg, o.Batch, o.Seq, o.DecodeBatch)...)
	for _, s := range shapes {
		step("GEMM " + s.Name)
		var g Measure
		var err error
		labeled(ctx, "gemm", func(ctx context.Context) { g, err = Gemm(ctx, s, o.GemmTime, 5) })
		if err != nil {
			return nil, err
		}
		r.Gemm = append(r.Gemm, GemmResult{Shape: s, GFLOPS: g})
	}

	step("built-in training step")
	var err error
	labeled(ctx, "train", func(ctx context.Context) { r.Train, err = Train(ctx, cfg, o.Batch, o.Seq, o.Steps) })
	if err != nil {
		return nil, err
	}
	if !o.SkipTorch {
		for _, lib := range o.TorchBLAS {
			step("PyTorch training step " + map[bool]string{true: "(BLAS as installed)", false: "(BLAS from " + lib + ")"}[lib == ""])
			t, err := Torch(ctx, o.Python, lib, cfg, o.Batch, o.Seq, o.Steps, o.Threads)
			if err != nil {
				return nil, err
			}
			r.Torch = append(r.Torch, t)
		}
	}

	m, err := model.New(cfg, 1, false)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	tok, err := Tokenizer(cfg.Vocab)
	if err != nil && !o.SkipLlama {
		return nil, err
	}
	pick := func(rng *rand.Rand) int { return rng.IntN(cfg.Vocab) }
	if tok != nil {
		// Ordinary (non-special) ids of the GGUF's vocabulary, the same for both engines.
		pick = func(rng *rand.Rand) int {
			for {
				if id := rng.IntN(tok.VocabSize()); !tok.IsSpecial(id) {
					return id
				}
			}
		}
	}
	prompts := Prompts(o.DecodeBatch, o.Prompt, pick)
	step(fmt.Sprintf("built-in decode, %d sequences", o.DecodeBatch))
	labeled(ctx, "decode", func(ctx context.Context) { r.Decode, err = Decode(ctx, m, prompts, o.DecodeTokens, o.DecodeReps) })
	if err != nil {
		return nil, err
	}
	if !o.SkipLlama {
		step(fmt.Sprintf("llama.cpp decode, %d sequences", o.DecodeBatch))
		l, err := Llama(ctx, o.LlamaDir, o.GGUF, m, tok, prompts, o.DecodeTokens, o.DecodeReps, o.Threads, o.LlamaArgs)
		if err != nil {
			return nil, err
		}
		r.Llama = &l
	}
	r.Load1End = loadAverage()
	return r, nil
}

// labeled runs fn with the pprof label phase=name, which the goroutines it
// starts inherit: a CPU profile of Run splits by phase with
// go tool pprof -tagfocus=phase=train (or peak, gemm, decode).
func labeled(ctx context.Context, name string, fn func(context.Context)) {
	pprof.Do(ctx, pprof.Labels("phase", name), fn)
}

// cpuModel is the "model name" of /proc/cpuinfo, or GOOS/GOARCH.
func cpuModel() string {
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v) + fmt.Sprintf(", %d logical CPUs", runtime.NumCPU())
			}
		}
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}

// WriteTable renders r as Markdown: a header naming the machine and shapes,
// then one row per measurement with the reference and the ratio.
func (r *Report) WriteTable(w io.Writer) error {
	c := r.Model
	var b strings.Builder
	fmt.Fprintf(&b, "%s · %s · %d threads · %s, kernel path %s · load average %.2f before, %.2f after\n\n",
		r.Date, r.Machine, r.Threads, r.GoVersion, r.KernelPath, r.Load1Start, r.Load1End)
	fmt.Fprintf(&b, "Model: d=%d, %d layers, %d heads (%d KV), FFN %d, vocab %d, %s head, %.2fM parameters, float32.\n",
		c.Dim, c.Layers, c.Heads, c.KVHeads, c.FFN, c.Vocab, map[bool]string{true: "tied", false: "untied"}[c.TiedEmbeddings], float64(r.Params)/1e6)
	fmt.Fprintf(&b, "Training: batch %d × seq %d = %d tokens a step (forward, backward, clip, AdamW). Decode: %d sequences, %d-token prompts, %d new tokens each (temperature 1, no truncation).\n\n",
		r.Batch, r.Seq, r.Batch*r.Seq, r.DecodeBatch, r.Prompt, r.DecodeTokens)
	b.WriteString("| measurement | compactrl | reference | ratio | target | cores busy |\n|---|---:|---|---:|---|---|\n")
	cores := func(m Measure) string {
		if m.CPUShare <= 0 {
			return "?"
		}
		return fmt.Sprintf("%.2f", m.CPUShare*float64(r.Threads))
	}
	row := func(what string, ours Measure, unit, refName string, ref *Measure, target string) {
		refCell, ratio, busy := refName, "—", cores(ours)
		if ref != nil && ref.Value > 0 {
			refCell = fmt.Sprintf("%s: %s", refName, num(ref.Value))
			ratio = fmt.Sprintf("%.2f×", ours.Value/ref.Value)
			if ref.CPUShare > 0 || ours.CPUShare > 0 {
				busy += " / " + cores(*ref)
			}
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s | %s | %s | %s |\n", what, num(ours.Value), unit, refCell, ratio, target, busy)
	}
	if len(r.Torch) == 0 {
		row("training tokens/s", r.Train, "tok/s", "PyTorch (skipped)", nil, "≥ 1.0× (aim 1.5×)")
	}
	for _, t := range r.Torch {
		row("training tokens/s", r.Train, "tok/s", t.Label(), &t.Train, "≥ 1.0× (aim 1.5×)")
	}
	llamaName, llamaDec, llamaGen := "llama.cpp (skipped)", (*Measure)(nil), (*Measure)(nil)
	if r.Llama != nil {
		llamaName, llamaDec, llamaGen = r.Llama.Engine, &r.Llama.Rate.Decode, &r.Llama.Rate.Generate
	}
	row(fmt.Sprintf("batch-%d decode tokens/s (steady state)", r.DecodeBatch), r.Decode.Decode, "tok/s", llamaName, llamaDec, "≥ 0.5× (aim 1×)")
	row(fmt.Sprintf("batch-%d generate tokens/s (prefill included)", r.DecodeBatch), r.Decode.Generate, "tok/s", llamaName, llamaGen, "—")
	peak := &Measure{Value: r.PeakGFLOPS}
	for _, g := range r.Gemm {
		row("GEMM "+g.Shape.Name, g.GFLOPS, "GFLOP/s", "FMA peak", peak, "—")
	}
	fmt.Fprintf(&b, "| float32 FMA peak, %d threads (best of 10 windows) | %s GFLOP/s | | | | |\n", r.Threads, num(r.PeakGFLOPS))
	if r.Llama != nil {
		fmt.Fprintf(&b, "\nllama-server flags: `%s` (other settings llama.cpp's defaults).\n", strings.Join(r.Llama.Args, " "))
	}
	b.WriteString("Rates are medians of the timed runs. Cores busy: CPU time of the engine's process over the timed runs ÷ their wall time (compactrl / reference); below the thread count, other load had the cores.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// num formats a rate with three significant digits (at least the units).
func num(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Sprint(v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// Package bench measures the performance anchors of docs/design.md §6 side by
// side in one run, on one machine, at one thread count and one model shape,
// and renders them as a table of ratios.
//
// Data flow: Options → Run, which sets runtime.GOMAXPROCS to the thread
// count and measures, in order, the float32 FMA peak (measurePeak, with
// the CPU share it had), kernel.Gemm on square and on the model's own
// shapes (Gemm), the training step in interleaved rounds: the built-in
// engine's (trainer) and PyTorch's in each configuration (StartTorch: an
// embedded script run by a PyTorch 2.x venv's python, or Debian's torch as
// the named fallback, answering one round at a time), batched KV-cached
// decoding in interleaved rounds too: model.Decoder's (decodeRounds, as
// Decode runs them) and llama.cpp's llama-server's on the same weights
// exported to GGUF (llamaRounds, as Llama runs them), the peak and the
// read bandwidth again → Report.Judge,
// which marks every ratio INVALID that load, steal time or a lost CPU share
// distorts (Rules) and computes MFU → Report.WriteTable (Markdown) or
// JSON. Every rate is the median of several timed runs.
package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/kernel"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/tokenizer"
)

// Options say what Run measures. Zero fields take DefaultOptions' values
// where noted.
type Options struct {
	Threads int          // goroutines / intra-op threads of every engine
	Model   model.Config // shape of the benchmarked model (MaxSeq is derived)
	Seq     int          // training sequence length
	Batch   int          // training sequences a step
	Steps   int          // timed training steps a round (each side, each configuration)
	Rounds  int          // interleaved training rounds: compactrl and every PyTorch configuration in turn

	DecodeBatch  int // sequences decoded at once
	Prompt       int // prompt tokens of each decoded sequence
	DecodeTokens int // new tokens of each decoded sequence
	DecodeReps   int // timed decode rounds (each side)

	GemmSquare []int         // n of the n×n×n products
	GemmTime   time.Duration // time per GEMM shape
	PeakTime   time.Duration // time of the FMA peak measurement

	TorchSource  string   // TorchPyPI (PyTorch 2.x in a venv) or TorchDebian (the named fallback, torch 1.13)
	Python       string   // interpreter with torch ("": ResolveTorchPython(TorchSource))
	TorchConfigs []string // PyTorch configurations (TorchConfigs; nil: DefaultTorchConfigs(TorchSource))
	TorchBLAS    []string // TorchDebian only: one PyTorch process each, "" as installed or a directory holding a libblas.so.3 (nil: as installed and, where present, OpenBLASDir)
	QuietPeak    float64  // FMA peak (GFLOP/s, Threads threads) measured on the quiet machine earlier; 0: none to check against
	// BandwidthBytes is the buffer the streaming read bandwidth is measured
	// on (before and after the run, like the peak): it must be far larger
	// than the caches.
	BandwidthBytes int
	QuietBandwidth float64 // read bandwidth (GB/s, Threads threads) measured on the quiet machine earlier; 0: none to check against
	Rules          Rules   // when a ratio is not a valid comparison
	GGUF           string  // where to keep the exported GGUF ("" : a temporary file)
	// Weights is a GGUF model file (a real model, any quantization
	// format.ReadGGUFCheckpoint reads): its shape must be Model's
	// (ModelFromGGUF), and its dequantized weights and vocabulary are what
	// the built-in engine decodes and llama.cpp serves (exported as F32, so
	// both run the same float32 weights; as BF16 with Precision bf16, so
	// both multiply the same bfloat16 weights). "": random weights of Model.
	Weights   string
	LlamaDir  string   // llama.cpp install (DIR/run, DIR/root/usr/bin/llama-server)
	LlamaArgs []string // extra llama-server flags (e.g. -fa off -ctk f32 -ctv f32)
	SkipTorch bool
	SkipLlama bool
	// Precision is the built-in engine's (model.precision): "fp32", or
	// "bf16" (bfloat16 products, float32 sums and weights) for training
	// and decoding, to set against PyTorch's bf16 autocast.
	Precision string

	pythonFrom string // where Run found Python, for the report
}

// DefaultOptions is the nano policy's shape: d=256, 4 layers, 4 heads (no
// grouping), SwiGLU width 688, vocab 1024, untied head, sequence 512, batch
// 8, 2 threads, 3 interleaved rounds of 3 training steps against PyTorch
// 2.x from PyPI in every configuration; 32 sequences decoding 128 tokens
// after 16-token prompts.
func DefaultOptions() Options {
	return Options{
		Threads: 2,
		Model:   model.Config{Vocab: 1024, Dim: 256, Layers: 4, Heads: 4, KVHeads: 4, FFN: 688, RopeTheta: 10000, NormEps: 1e-5},
		Seq:     512, Batch: 8, Steps: 3, Rounds: 3,
		DecodeBatch: 32, Prompt: 16, DecodeTokens: 128, DecodeReps: 3,
		GemmSquare: []int{256, 1024}, GemmTime: 500 * time.Millisecond, PeakTime: time.Second, BandwidthBytes: 256 << 20,
		TorchSource: TorchPyPI, LlamaDir: os.Getenv(LlamaEnv), Rules: DefaultRules, Precision: "fp32",
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
	case o.Seq <= 0 || o.Batch <= 0 || o.Steps <= 0 || o.Rounds <= 0:
		return fmt.Errorf("bench: seq %d, batch %d, steps %d and rounds %d must be positive", o.Seq, o.Batch, o.Steps, o.Rounds)
	case !(o.Rules.MinShare > 0 && o.Rules.MinShare <= 1 && o.Rules.PeakAgreement > 0 && o.Rules.PeakAgreement <= 1 && o.Rules.MaxSteal >= 0):
		return fmt.Errorf("bench: validity rules %+v out of range (shares and agreement in (0, 1], steal ≥ 0)", o.Rules)
	case o.QuietPeak < 0:
		return fmt.Errorf("bench: quiet peak %g GFLOP/s must not be negative", o.QuietPeak)
	case o.QuietBandwidth < 0:
		return fmt.Errorf("bench: quiet bandwidth %g GB/s must not be negative", o.QuietBandwidth)
	case o.BandwidthBytes < 64<<10*o.Threads:
		return fmt.Errorf("bench: bandwidth buffer of %d bytes: want at least 64 KiB a thread (far more than the caches for a real measurement)", o.BandwidthBytes)
	case o.DecodeBatch <= 0 || o.Prompt <= 0 || o.DecodeTokens < 2 || o.DecodeReps <= 0:
		return fmt.Errorf("bench: decode batch %d, prompt %d, reps %d must be positive and decode tokens %d at least 2", o.DecodeBatch, o.Prompt, o.DecodeReps, o.DecodeTokens)
	case o.GemmTime <= 0 || o.PeakTime <= 0:
		return fmt.Errorf("bench: gemm time %v and peak time %v must be positive", o.GemmTime, o.PeakTime)
	case !o.SkipTorch && o.TorchSource != TorchPyPI && o.TorchSource != TorchDebian:
		return fmt.Errorf("bench: unknown PyTorch source %q (want %s or %s)", o.TorchSource, TorchPyPI, TorchDebian)
	case !o.SkipTorch && o.TorchSource == TorchPyPI && len(o.TorchBLAS) > 0:
		return fmt.Errorf("bench: choosing a libblas.so.3 (%q) applies to Debian's torch only (--torch %s); PyTorch from PyPI carries its own MKL", o.TorchBLAS, TorchDebian)
	case o.Precision != "fp32" && o.Precision != "bf16":
		return fmt.Errorf("bench: precision %q (want fp32 or bf16)", o.Precision)
	case !o.SkipLlama && o.LlamaDir == "":
		return fmt.Errorf("bench: no llama.cpp directory for the decode comparison (set %s or skip it)", LlamaEnv)
	}
	for _, c := range o.TorchConfigs {
		if !slices.Contains(TorchConfigs, c) {
			return fmt.Errorf("bench: unknown PyTorch configuration %q (have %s)", c, strings.Join(TorchConfigs, ", "))
		}
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

// GemmResult is one GEMM shape's throughput in GFLOP/s, and its ratio to
// the FMA peak.
type GemmResult struct {
	Shape  GemmShape  `json:"shape"`
	GFLOPS Measure    `json:"gflops"`
	ToPeak Comparison `json:"to_peak"`
}

// Report is everything one Run measured. Torch is empty and Llama nil when
// skipped.
type Report struct {
	Date       string `json:"date"`
	Machine    string `json:"machine"`
	GoVersion  string `json:"go_version"`
	KernelPath string `json:"kernel_path"`
	// Precision is the built-in engine's products: fp32, or bf16 (and then
	// BF16Native: on the CPU's bfloat16 instructions, or emulated).
	Precision  string `json:"precision"`
	BF16Native bool   `json:"bf16_native,omitempty"`
	Threads    int    `json:"threads"`
	// Load1Start and Load1End are the 1-minute load averages before and after the run.
	Load1Start float64 `json:"load1_start"`
	Load1End   float64 `json:"load1_end"`

	Model        model.Config `json:"model"`
	Params       int          `json:"params"`
	Seq          int          `json:"seq"`
	Batch        int          `json:"batch"`
	Steps        int          `json:"steps_per_round"`
	Rounds       int          `json:"rounds"`
	DecodeBatch  int          `json:"decode_batch"`
	Prompt       int          `json:"prompt"`
	DecodeTokens int          `json:"decode_tokens"`
	DecodeReps   int          `json:"decode_rounds"`

	// PeakGFLOPS is the best of Conditions.Peaks: the denominator of the
	// GEMM ratios and of MFU.
	PeakGFLOPS float64      `json:"peak_gflops"`
	Gemm       []GemmResult `json:"gemm"`
	Train      Measure      `json:"train_tokens_per_s"`
	// FlopsPerToken is 6·Params (a training token's multiply-adds in the
	// parameter products, forward and backward; the embedding table counted
	// although its lookup is no product); AttnFlopsPerToken adds attention's
	// score and value products, 12·Layers·Heads·HeadDim·Seq (the full T×T,
	// causal masking not discounted).
	FlopsPerToken     float64 `json:"flops_per_token"`
	AttnFlopsPerToken float64 `json:"attn_flops_per_token"`
	// TrainMFUValidity judges the built-in engine's MFU (TrainMFU).
	TrainMFUValidity Validity `json:"train_mfu_validity"`

	TorchSource string        `json:"torch_source,omitempty"`
	TorchPython string        `json:"torch_python,omitempty"` // the interpreter and where it came from
	Torch       []TorchResult `json:"torch,omitempty"`
	Decode      DecodeResult  `json:"decode_tokens_per_s"`
	Llama       *LlamaResult  `json:"llama,omitempty"`
	DecodeCmp   *Comparison   `json:"decode_vs_llama,omitempty"`
	GenerateCmp *Comparison   `json:"generate_vs_llama,omitempty"`

	Rules      Rules      `json:"rules"`
	Conditions Conditions `json:"conditions"`
	// Validity is the run's: invalid when its conditions (load, steal,
	// peak) distort every ratio. Each ratio has its own too (CPU shares).
	Validity Validity `json:"validity"`
}

// Run measures everything o asks for, writing one progress line per
// measurement to progress (may be nil). It sets runtime.GOMAXPROCS to
// o.Threads for its duration. The training step is measured in o.Rounds
// interleaved rounds: o.Steps steps of compactrl, then of each PyTorch
// configuration, the order reversed every other round, so that load that
// comes and goes falls on both sides.
func Run(ctx context.Context, o Options, progress io.Writer) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if progress == nil {
		progress = io.Discard
	}
	if !o.SkipTorch {
		// Find the interpreter before measuring anything: a missing venv fails at once.
		from := "--python"
		if o.Python == "" {
			var err error
			if o.Python, from, err = ResolveTorchPython(o.TorchSource); err != nil {
				return nil, err
			}
		}
		o.pythonFrom = from
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(o.Threads))
	cfg := o.config()
	steal0, total0, stealOK := stealTimes()
	r := &Report{
		Date: time.Now().UTC().Format("2006-01-02 15:04 MST"), Machine: cpuModel(), GoVersion: runtime.Version(),
		KernelPath: kernel.Path(), Threads: o.Threads, Load1Start: loadAverage(), Model: cfg, Params: cfg.NumParams(),
		Seq: o.Seq, Batch: o.Batch, Steps: o.Steps, Rounds: o.Rounds, DecodeBatch: o.DecodeBatch, Prompt: o.Prompt, DecodeTokens: o.DecodeTokens,
		DecodeReps: o.DecodeReps, Rules: o.Rules, Precision: o.Precision, BF16Native: o.Precision == "bf16" && kernel.BF16Native(),
	}
	r.FlopsPerToken = 6 * float64(r.Params)
	r.AttnFlopsPerToken = 12 * float64(cfg.Layers*cfg.Heads*cfg.HeadDim()*o.Seq)
	began := time.Now()
	step := func(what string) { fmt.Fprintf(progress, "bench: %5.1fs %s\n", time.Since(began).Seconds(), what) }

	step(fmt.Sprintf("FMA peak, %d threads", o.Threads))
	labeled(ctx, "peak", func(context.Context) {
		r.Conditions.Peaks = append(r.Conditions.Peaks, measurePeak("before the run", o.Threads, o.PeakTime))
	})
	step(fmt.Sprintf("read bandwidth, %d threads, %d MiB", o.Threads, o.BandwidthBytes>>20))
	labeled(ctx, "peak", func(context.Context) {
		r.Conditions.Bandwidth = append(r.Conditions.Bandwidth, measureBandwidth("before the run", o.Threads, o.PeakTime, o.BandwidthBytes))
	})
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

	if err := trainCompared(ctx, o, cfg, r, step); err != nil {
		return nil, err
	}

	m, tok, err := o.decodeModel(cfg)
	if err != nil {
		return nil, err
	}
	m.BF16 = o.Precision == "bf16"
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
	if err := decodeCompared(ctx, o, m, tok, prompts, r, step); err != nil {
		return nil, err
	}
	step(fmt.Sprintf("FMA peak again, %d threads", o.Threads))
	labeled(ctx, "peak", func(context.Context) {
		r.Conditions.Peaks = append(r.Conditions.Peaks, measurePeak("after the run", o.Threads, o.PeakTime))
	})
	step(fmt.Sprintf("read bandwidth again, %d threads", o.Threads))
	labeled(ctx, "peak", func(context.Context) {
		r.Conditions.Bandwidth = append(r.Conditions.Bandwidth, measureBandwidth("after the run", o.Threads, o.PeakTime, o.BandwidthBytes))
	})
	r.Load1End = loadAverage()
	r.Conditions.Threads, r.Conditions.Load1Start, r.Conditions.Load1End = o.Threads, r.Load1Start, r.Load1End
	r.Conditions.QuietPeak, r.Conditions.QuietBandwidth = o.QuietPeak, o.QuietBandwidth
	r.Conditions.Steal = stealSince(steal0, total0, stealOK)
	r.Judge()
	return r, nil
}

// decodeCompared times the built-in decoder (and llama.cpp's server on the
// same model, unless skipped) on prompts in o.DecodeReps rounds each side,
// interleaved as the training rounds are (the order reversed every other
// round): this machine's read bandwidth, which bounds decoding, moved
// between 26 and 61 GB/s within minutes, so a side timed in one block
// before the other would compare two different machines.
func decodeCompared(ctx context.Context, o Options, m *model.Model, tok *tokenizer.Tokenizer, prompts [][]int, r *Report, step func(string)) error {
	var ours *decodeRounds
	var err error
	step(fmt.Sprintf("built-in decode warm-up, %d sequences", o.DecodeBatch))
	labeled(ctx, "decode", func(ctx context.Context) { ours, err = newDecodeRounds(ctx, m, prompts, o.DecodeTokens) })
	if err != nil {
		return err
	}
	var ref *llamaRounds
	if !o.SkipLlama {
		step(fmt.Sprintf("llama.cpp start and warm-up, %d sequences", o.DecodeBatch))
		matrices := uint32(format.GGMLTypeF32)
		if o.Precision == "bf16" {
			matrices = format.GGMLTypeBF16
		}
		if ref, err = startLlamaRounds(ctx, o.LlamaDir, o.GGUF, m, matrices, tok, prompts, o.DecodeTokens, o.Threads, o.LlamaArgs); err != nil {
			return err
		}
		defer ref.close()
	}
	for rep := range o.DecodeReps {
		sides := []func() error{
			func() error {
				step(fmt.Sprintf("decode round %d of %d: compactrl, %d sequences", rep+1, o.DecodeReps, o.DecodeBatch))
				var err error
				labeled(ctx, "decode", func(ctx context.Context) { err = ours.round(ctx) })
				return err
			},
		}
		if ref != nil {
			sides = append(sides, func() error {
				step(fmt.Sprintf("decode round %d of %d: llama.cpp, %d sequences", rep+1, o.DecodeReps, o.DecodeBatch))
				return ref.round(ctx)
			})
			if rep%2 == 1 {
				sides[0], sides[1] = sides[1], sides[0]
			}
		}
		for _, side := range sides {
			if err := side(); err != nil {
				return err
			}
		}
	}
	r.Decode = ours.result()
	if ref != nil {
		l := ref.result()
		r.Llama = &l
	}
	return nil
}

// decodeModel is the model the decode comparison runs: Weights' (its
// MaxSeq set to cfg's) with its own vocabulary, else random weights of cfg
// and a trained vocabulary of its size (nil when llama.cpp is skipped and
// none can be made).
func (o Options) decodeModel(cfg model.Config) (*model.Model, *tokenizer.Tokenizer, error) {
	if o.Weights == "" {
		m, err := model.New(cfg, 1, false)
		if err != nil {
			return nil, nil, fmt.Errorf("bench: %w", err)
		}
		tok, err := Tokenizer(cfg.Vocab)
		if err != nil && !o.SkipLlama {
			return nil, nil, err
		}
		return m, tok, nil
	}
	m, err := model.Load(o.Weights)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	if c := m.Cfg; c.Dim != cfg.Dim || c.Layers != cfg.Layers || c.Vocab != cfg.Vocab || c.Heads != cfg.Heads || c.KVHeads != cfg.KVHeads || c.FFN != cfg.FFN {
		return nil, nil, fmt.Errorf("bench: %s has shape %+v, the options %+v (set Model with ModelFromGGUF)", o.Weights, c, cfg)
	}
	m.Cfg.MaxSeq = max(m.Cfg.MaxSeq, cfg.MaxSeq)
	tok, err := format.ReadTokenizer(o.Weights)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	return m, tok, nil
}

// ModelFromGGUF is the model shape of a GGUF file (its metadata only), for
// Options.Model with Options.Weights.
func ModelFromGGUF(path string) (model.Config, error) {
	c, err := model.GGUFConfig(path)
	if err != nil {
		return model.Config{}, fmt.Errorf("bench: %w", err)
	}
	return c, nil
}

// settle is the pause before each training round of the interleaving.
const settle = 250 * time.Millisecond

// trainCompared measures the built-in training step and, unless skipped,
// PyTorch's in every configuration, in interleaved rounds.
func trainCompared(ctx context.Context, o Options, cfg model.Config, r *Report, step func(string)) error {
	type engine struct {
		name    string
		session *TorchSession
		config  string
		rounds  []TorchRound
	}
	var engines []*engine
	if !o.SkipTorch {
		python := o.Python
		r.TorchSource, r.TorchPython = o.TorchSource, python+" ("+o.pythonFrom+")"
		configs := o.TorchConfigs
		if configs == nil {
			configs = DefaultTorchConfigs(o.TorchSource)
		}
		blas := []string{""}
		if o.TorchSource == TorchDebian {
			blas = o.TorchBLAS
			if blas == nil {
				blas = defaultTorchBLAS()
			}
		}
		for _, lib := range blas {
			what := "as installed"
			if lib != "" {
				what = "BLAS from " + lib
			}
			step(fmt.Sprintf("PyTorch (%s, %s): building and warming up %s", python, what, strings.Join(configs, ", ")))
			s, err := StartTorch(ctx, python, lib, configs, cfg, o.Batch, o.Seq, o.Threads)
			if err != nil {
				return err
			}
			defer s.Close()
			for _, c := range configs {
				engines = append(engines, &engine{name: fmt.Sprintf("PyTorch %s (%s)", c, what), session: s, config: c})
			}
		}
	}
	step("built-in training step: warm-up")
	var tr *trainer
	var err error
	labeled(ctx, "train", func(context.Context) { tr, err = newTrainer(cfg, o.Batch, o.Seq, o.Precision == "bf16") })
	if err != nil {
		return err
	}
	ours := &engine{name: "compactrl"}
	var ourRounds []trainRound
	all := append([]*engine{ours}, engines...)
	for round := range o.Rounds {
		order := slices.Clone(all)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, e := range order {
			// The engine before may still spin its idle worker threads (OpenMP
			// waits actively for up to 200 ms by default): let them sleep first.
			time.Sleep(settle)
			step(fmt.Sprintf("training round %d of %d: %s, %d steps", round+1, o.Rounds, e.name, o.Steps))
			if e == ours {
				var tr1 trainRound
				labeled(ctx, "train", func(ctx context.Context) { tr1, err = tr.round(ctx, o.Steps) })
				if err != nil {
					return err
				}
				ourRounds = append(ourRounds, tr1)
				continue
			}
			tr1, err := e.session.Round(e.config, o.Steps)
			if err != nil {
				return err
			}
			e.rounds = append(e.rounds, tr1)
		}
	}
	r.Train = tr.result(ourRounds)
	for _, e := range engines {
		r.Torch = append(r.Torch, e.session.Result(e.config, e.rounds))
	}
	for _, e := range engines {
		if err := e.session.Close(); err != nil {
			return err
		}
	}
	return nil
}

// Judge fills the report's validity, every ratio with its own and the
// MFU of every training engine from what was measured: the best peak,
// the run's conditions, each side's CPU share.
func (r *Report) Judge() {
	r.PeakGFLOPS = 0
	for _, p := range r.Conditions.Peaks {
		r.PeakGFLOPS = max(r.PeakGFLOPS, p.GFLOPS)
	}
	run := r.Conditions.reasons(r.Rules)
	r.Validity = validity(run)
	for i := range r.Gemm {
		g := &r.Gemm[i]
		g.ToPeak = compare(r.Rules, run, r.Threads, g.GFLOPS, "", Measure{Value: r.PeakGFLOPS})
	}
	for i := range r.Torch {
		t := &r.Torch[i]
		t.VsCompactrl = compare(r.Rules, run, r.Threads, r.Train, "PyTorch "+t.Config, t.Train)
		t.MFU = MFU(t.Train.Value, r.FlopsPerToken, r.PeakGFLOPS)
		t.MFUAttn = MFU(t.Train.Value, r.FlopsPerToken+r.AttnFlopsPerToken, r.PeakGFLOPS)
		t.MFUValidity = mfuValidity(r.Rules, run, "PyTorch "+t.Config, t.Train, r.Threads)
	}
	r.TrainMFUValidity = mfuValidity(r.Rules, run, "compactrl", r.Train, r.Threads)
	if r.Llama != nil {
		d := compare(r.Rules, run, r.Threads, r.Decode.Decode, "llama.cpp", r.Llama.Rate.Decode)
		g := compare(r.Rules, run, r.Threads, r.Decode.Generate, "llama.cpp", r.Llama.Rate.Generate)
		r.DecodeCmp, r.GenerateCmp = &d, &g
	}
}

// TrainMFU is the built-in engine's MFU without and with attention's FLOPs.
func (r *Report) TrainMFU() (params, withAttn float64) {
	return MFU(r.Train.Value, r.FlopsPerToken, r.PeakGFLOPS), MFU(r.Train.Value, r.FlopsPerToken+r.AttnFlopsPerToken, r.PeakGFLOPS)
}

// labeled runs fn with the pprof label phase=name, which the goroutines it
// starts inherit: a CPU profile of Run splits by phase with
// go tool pprof -tagfocus=phase=train (or peak, gemm, decode). The
// kernels' helper goroutines (kernel.Parallel) outlive a phase, so they are
// retired as it begins and ends: the phase's shares run on helpers started
// under its label.
func labeled(ctx context.Context, name string, fn func(context.Context)) {
	pprof.Do(ctx, pprof.Labels("phase", name), func(ctx context.Context) {
		kernel.RetireHelpers()
		defer kernel.RetireHelpers()
		fn(ctx)
	})
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

// WriteTable renders r as Markdown: a header naming the machine, the
// shapes and whether the run is a valid comparison, one row per ratio with
// its reference, its per-round ratios, the cores each side had and its
// verdict, then the training engines' MFU.
func (r *Report) WriteTable(w io.Writer) error {
	c := r.Model
	var b strings.Builder
	fmt.Fprintf(&b, "%s · %s · %d threads · %s, kernel path %s · load average %.2f before, %.2f after",
		r.Date, r.Machine, r.Threads, r.GoVersion, r.KernelPath, r.Load1Start, r.Load1End)
	if r.Conditions.Steal >= 0 {
		fmt.Fprintf(&b, " · steal %.1f%%", 100*r.Conditions.Steal)
	}
	b.WriteString("\n\n")
	if r.Validity.Valid {
		b.WriteString("**Run conditions: valid** (load, steal, FMA peak and read bandwidth within the rules; each ratio below also needs both sides' CPU share).\n\n")
	} else {
		fmt.Fprintf(&b, "**NOT A VALID COMPARISON: %s.** Every ratio below is marked INVALID; do not quote them.\n\n", strings.Join(r.Validity.Reasons, "; "))
	}
	fmt.Fprintf(&b, "Model: d=%d, %d layers, %d heads (%d KV), FFN %d, vocab %d, %s head, %.2fM parameters, float32.\n",
		c.Dim, c.Layers, c.Heads, c.KVHeads, c.FFN, c.Vocab, map[bool]string{true: "tied", false: "untied"}[c.TiedEmbeddings], float64(r.Params)/1e6)
	fmt.Fprintf(&b, "Training: batch %d × seq %d = %d tokens a step (forward, backward, clip, AdamW), %d interleaved rounds of %d steps each side. Decode: %d sequences, %d-token prompts, %d new tokens each (temperature 1, no truncation), %d interleaved rounds each side.\n",
		r.Batch, r.Seq, r.Batch*r.Seq, r.Rounds, r.Steps, r.DecodeBatch, r.Prompt, r.DecodeTokens, r.DecodeReps)
	if len(r.Torch) > 0 {
		t := r.Torch[0]
		fmt.Fprintf(&b, "PyTorch: %s from %s; multiplies with %s; CPU capability %s.\n", t.Engine, r.TorchPython, t.BLAS, orUnknown(t.CPUCapability))
	}
	if r.Precision == "bf16" {
		fmt.Fprintf(&b, "compactrl trains and decodes with bfloat16 products (model.precision bf16: inputs rounded to bfloat16, float32 sums, weights and optimiser; %s).\n", r.engineLabel())
	}
	b.WriteString("\n| measurement | compactrl | reference | ratio (per round) | target | cores busy | verdict |\n|---|---:|---|---:|---|---|---|\n")
	cores := func(m Measure) string {
		if m.CPUShare <= 0 {
			return "?"
		}
		return fmt.Sprintf("%.2f", m.CPUShare*float64(r.Threads))
	}
	row := func(what string, ours Measure, unit, refName string, ref *Measure, cmp *Comparison, target string) {
		refCell, ratio, busy, verdict := refName, "—", cores(ours), "—"
		if ref != nil && cmp != nil {
			refCell = fmt.Sprintf("%s: %s", refName, num(ref.Value))
			ratio = fmt.Sprintf("%.2f×", cmp.Ratio)
			if len(cmp.RoundRatios) > 0 {
				parts := make([]string, len(cmp.RoundRatios))
				for i, x := range cmp.RoundRatios {
					parts[i] = fmt.Sprintf("%.2f", x)
				}
				ratio += " (" + strings.Join(parts, ", ") + ")"
			}
			if ref.Samples != nil || ref.CPUShare > 0 {
				busy += " / " + cores(*ref)
			}
			verdict = cmp.Validity.String()
			if !cmp.Validity.Valid {
				// The run's own reasons are in the header; the row names only its own.
				own := cmp.Validity.Reasons[len(r.Validity.Reasons):]
				verdict = "INVALID"
				if len(own) > 0 {
					verdict += ": " + strings.Join(own, "; ")
				}
			}
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s | %s | %s | %s | %s |\n", what, num(ours.Value), unit, refCell, ratio, target, busy, verdict)
	}
	if len(r.Torch) == 0 {
		row("training tokens/s", r.Train, "tok/s", "PyTorch (skipped)", nil, nil, "≥ 1.0× (aim 1.5×)")
	}
	for _, t := range r.Torch {
		row("training tokens/s", r.Train, "tok/s", t.Label(), &t.Train, &t.VsCompactrl, "≥ 1.0× (aim 1.5×)")
	}
	llamaName, llamaDec, llamaGen := "llama.cpp (skipped)", (*Measure)(nil), (*Measure)(nil)
	if r.Llama != nil {
		llamaName, llamaDec, llamaGen = r.Llama.Engine+" on "+r.Llama.Weights+" weights", &r.Llama.Rate.Decode, &r.Llama.Rate.Generate
	}
	row(fmt.Sprintf("batch-%d decode tokens/s (steady state)", r.DecodeBatch), r.Decode.Decode, "tok/s", llamaName, llamaDec, r.DecodeCmp, "≥ 1.0× (aim 4×)")
	row(fmt.Sprintf("batch-%d generate tokens/s (prefill included)", r.DecodeBatch), r.Decode.Generate, "tok/s", llamaName, llamaGen, r.GenerateCmp, "—")
	peak := &Measure{Value: r.PeakGFLOPS}
	for _, g := range r.Gemm {
		row("GEMM "+g.Shape.Name, g.GFLOPS, "GFLOP/s", "FMA peak", peak, &g.ToPeak, "—")
	}
	for _, p := range r.Conditions.Peaks {
		fmt.Fprintf(&b, "| float32 FMA peak %s, %d threads (best of 10 windows) | %s GFLOP/s | | | | %.2f | |\n", p.When, p.Threads, num(p.GFLOPS), p.CPUShare*float64(p.Threads))
	}
	if r.Conditions.QuietPeak > 0 {
		fmt.Fprintf(&b, "| float32 FMA peak on the quiet machine (given) | %s GFLOP/s | | | | | |\n", num(r.Conditions.QuietPeak))
	}
	for _, m := range r.Conditions.Bandwidth {
		fmt.Fprintf(&b, "| streaming read bandwidth %s, %d threads (best of 10 windows) | %.1f GB/s | | | | %.2f | |\n", m.When, m.Threads, m.GBps, m.CPUShare*float64(m.Threads))
	}
	if r.Conditions.QuietBandwidth > 0 {
		fmt.Fprintf(&b, "| streaming read bandwidth on the quiet machine (given) | %.1f GB/s | | | | | |\n", r.Conditions.QuietBandwidth)
	}

	fmt.Fprintf(&b, "\nModel-FLOP utilisation against the best FMA peak (%s GFLOP/s): MFU = tokens/s × %.2f MFLOP (6 × %d parameters, the embedding table included) ÷ peak; with attention, + %.2f MFLOP a token (12 · layers · heads · head_dim · seq, the full T×T).\n\n",
		num(r.PeakGFLOPS), r.FlopsPerToken/1e6, r.Params, r.AttnFlopsPerToken/1e6)
	b.WriteString("| engine | training tok/s | MFU | MFU with attention | cores busy | verdict |\n|---|---:|---:|---:|---|---|\n")
	mfuVerdict := func(v Validity) string {
		if v.Valid {
			return "valid"
		}
		if own := v.Reasons[len(r.Validity.Reasons):]; len(own) > 0 {
			return "INVALID: " + strings.Join(own, "; ")
		}
		return "INVALID"
	}
	mp, ma := r.TrainMFU()
	fmt.Fprintf(&b, "| compactrl (%s) | %s | %.2f | %.2f | %s | %s |\n", r.engineLabel(), num(r.Train.Value), mp, ma, cores(r.Train), mfuVerdict(r.TrainMFUValidity))
	for _, t := range r.Torch {
		note := ""
		if t.Config == TorchBF16 {
			note = " (bf16 products against the float32 peak)"
		}
		fmt.Fprintf(&b, "| %s%s | %s | %.2f | %.2f | %s | %s |\n", t.Label(), note, num(t.Train.Value), t.MFU, t.MFUAttn, cores(t.Train), mfuVerdict(t.MFUValidity))
	}
	b.WriteString("\n")
	if r.Llama != nil {
		fmt.Fprintf(&b, "llama-server flags: `%s` (other settings llama.cpp's defaults).\n", strings.Join(r.Llama.Args, " "))
	}
	fmt.Fprintf(&b, "Rates are medians of the timed steps or decode rounds (per round: each round's median, or the round itself). Cores busy: CPU time of the engine's process over its timed runs ÷ their wall time (compactrl / reference). A ratio is INVALID when either side had under %.0f%% of its threads, the load average before the run exceeded the thread count (after it, twice), steal time exceeded %.0f%%, or an FMA peak or read bandwidth measurement was under %.0f%% of the best (or of the given quiet one).\n",
		100*r.Rules.MinShare, 100*r.Rules.MaxSteal, 100*r.Rules.PeakAgreement)
	_, err := io.WriteString(w, b.String())
	return err
}

// engineLabel names the built-in engine's kernel path and, for bf16, its
// products.
func (r *Report) engineLabel() string {
	switch {
	case r.Precision != "bf16":
		return r.KernelPath
	case r.BF16Native:
		return r.KernelPath + ", bf16 products on AVX512_BF16, against the float32 peak"
	}
	return r.KernelPath + ", bf16 products emulated"
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
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

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/compactrl/compactrl/bench"
)

// runBench dispatches the benchmarks:
//
//	compactrl bench model [flags]   training and decode throughput against PyTorch and llama.cpp, GEMM against the FMA peak
func runBench(ctx context.Context, e env, args []string) error {
	c := newCmdLine("bench", "bench model [flags]   (compactrl bench model -h)")
	c.examples = []string{benchModelExample}
	return dispatch(ctx, e, c, []subcommand{{"model", runBenchModel}}, nil, args)
}

// benchModelExample is bench model's first example.
const benchModelExample = "compactrl bench model --threads 2"

func runBenchModel(ctx context.Context, e env, args []string) error {
	d := bench.DefaultOptions()
	fs := newCmdLine("bench model", "bench model [flags]")
	fs.about = "Measures, in one run at one thread count and one shape: built-in training tokens/s\nagainst PyTorch, batched decode tokens/s against llama.cpp on the exported GGUF, and\nkernel GEMM GFLOP/s against the measured float32 FMA peak."
	fs.examples = []string{benchModelExample, "compactrl bench model --skip-torch --skip-llama --json"}
	threads := fs.Int("threads", d.Threads, "threads of every engine (GOMAXPROCS, torch.set_num_threads, llama-server -t/-tb)")
	dim := fs.Int("dim", d.Model.Dim, "model width")
	layers := fs.Int("layers", d.Model.Layers, "decoder layers")
	heads := fs.Int("heads", d.Model.Heads, "attention heads")
	kvHeads := fs.Int("kv-heads", 0, "key/value heads (0: as many as --heads)")
	ffn := fs.Int("ffn", 0, "SwiGLU width (0: 8·dim/3 rounded up to a multiple of 16)")
	vocab := fs.Int("vocab", d.Model.Vocab, "vocabulary size")
	tied := fs.Bool("tied", false, "tie the language-model head to the embeddings")
	seq := fs.Int("seq", d.Seq, "training sequence length")
	batch := fs.Int("batch", d.Batch, "training sequences a step")
	steps := fs.Int("steps", d.Steps, "timed training steps each side (median reported)")
	decBatch := fs.Int("decode-batch", d.DecodeBatch, "sequences decoded at once")
	decTokens := fs.Int("decode-tokens", d.DecodeTokens, "new tokens a decoded sequence")
	prompt := fs.Int("prompt", d.Prompt, "prompt tokens a decoded sequence")
	reps := fs.Int("decode-reps", d.DecodeReps, "timed decode rounds each side (median reported)")
	gemmSec := fs.Duration("gemm-time", d.GemmTime, "time per GEMM shape")
	peakSec := fs.Duration("peak-time", d.PeakTime, "time of the FMA peak measurement")
	python := fs.String("python", d.Python, "Python interpreter with torch")
	torchBLAS := fs.String("torch-blas", strings.Join(blasNames(d.TorchBLAS), ","), "PyTorch runs, comma-separated: \"installed\" (the system's libblas.so.3) or a directory put first on LD_LIBRARY_PATH (e.g. "+bench.OpenBLASDir+")")
	gguf := fs.String("gguf", "", "keep the exported GGUF at FILE (default: a temporary file)")
	llamaDir := fs.String("llama-dir", d.LlamaDir, "llama.cpp install directory (default $"+bench.LlamaEnv+")")
	llamaArgs := fs.String("llama-args", "", "extra llama-server flags, space-separated (e.g. \"-fa off -ctk f32 -ctv f32\")")
	skipTorch := fs.Bool("skip-torch", false, "do not run the PyTorch comparison")
	skipLlama := fs.Bool("skip-llama", false, "do not run the llama.cpp comparison")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of a Markdown table")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run (built-in engine only; the references are subprocesses) to FILE")
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	o := d
	o.Threads = *threads
	o.Model.Dim, o.Model.Layers, o.Model.Heads, o.Model.Vocab, o.Model.TiedEmbeddings = *dim, *layers, *heads, *vocab, *tied
	o.Model.KVHeads, o.Model.FFN = *kvHeads, *ffn
	if o.Model.KVHeads == 0 {
		o.Model.KVHeads = *heads
	}
	if o.Model.FFN == 0 {
		o.Model.FFN = bench.FFNFor(*dim)
	}
	o.Seq, o.Batch, o.Steps = *seq, *batch, *steps
	o.DecodeBatch, o.DecodeTokens, o.Prompt, o.DecodeReps = *decBatch, *decTokens, *prompt, *reps
	o.GemmTime, o.PeakTime = *gemmSec, *peakSec
	o.Python, o.LlamaDir, o.LlamaArgs, o.GGUF = *python, *llamaDir, strings.Fields(*llamaArgs), *gguf
	o.TorchBLAS = nil
	for _, b := range strings.Split(*torchBLAS, ",") {
		switch b = strings.TrimSpace(b); b {
		case "":
		case "installed":
			o.TorchBLAS = append(o.TorchBLAS, "")
		default:
			o.TorchBLAS = append(o.TorchBLAS, b)
		}
	}
	o.SkipTorch, o.SkipLlama = *skipTorch, *skipLlama

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile %s: %w", *cpuProfile, err)
		}
		defer pprof.StopCPUProfile()
	}
	r, err := bench.Run(ctx, o, e.stderr)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return r.WriteTable(e.stdout)
}

// blasNames writes bench.Options.TorchBLAS for the --torch-blas flag.
func blasNames(dirs []string) []string {
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = d
		if d == "" {
			out[i] = "installed"
		}
	}
	return out
}

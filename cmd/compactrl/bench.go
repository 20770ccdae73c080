package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/compactrl/compactrl/bench"
	"github.com/compactrl/compactrl/kernel"
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
	fs := newCmdLine("bench model", "bench model [flags]")
	fs.about = "Measures, in one run at one thread count and one shape: built-in training tokens/s\nagainst PyTorch 2.x (eager, SDPA + fused AdamW, torch.compile, bf16 autocast; rounds\ninterleaved), batched decode tokens/s against llama.cpp on the exported GGUF, kernel\nGEMM GFLOP/s against the measured float32 FMA peak, and MFU. Ratios measured while\nother load had the cores are marked INVALID."
	fs.examples = []string{benchModelExample, "compactrl bench model --threads 2 --paths all", "compactrl bench model --torch-configs eager,compile --require-valid", "compactrl bench model --torch debian --torch-blas installed," + bench.OpenBLASDir, "compactrl bench model --skip-torch --skip-llama --json"}
	o := bench.DefaultOptions()
	o.Model.KVHeads, o.Model.FFN, o.Model.TiedEmbeddings = 0, 0, false // 0: derived after parsing
	bindBenchFlags(fs, &o)
	torchBLAS := fs.String("torch-blas", "", "--torch "+bench.TorchDebian+" only: PyTorch processes, comma-separated: \"installed\" (the system's libblas.so.3) or a directory put first on LD_LIBRARY_PATH (default: installed and, where present, "+bench.OpenBLASDir+")")
	torchConfigs := fs.String("torch-configs", "", "PyTorch configurations, comma-separated, of "+strings.Join(bench.TorchConfigs, ", ")+" (default: all four for --torch "+bench.TorchPyPI+", eager for --torch "+bench.TorchDebian+")")
	requireValid := fs.Bool("require-valid", false, "exit with an error (after printing the report) when the run is not a valid comparison")
	llamaArgs := fs.String("llama-args", "", "extra llama-server flags, space-separated (e.g. \"-fa off -ctk f32 -ctv f32\")")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of a Markdown table")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run (built-in engine only; the references are subprocesses) to FILE")
	paths := fs.String("paths", "", "kernel code paths to measure side by side, comma-separated, or \"all\" (those this CPU supports: "+strings.Join(kernel.Paths(), ", ")+"); one process each with "+kernel.EnvPath+" set, the references run once (default: the path in use)")
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	if *paths != "" {
		if *cpuProfile != "" {
			return fmt.Errorf("bench model: --cpuprofile profiles one process; it cannot be combined with --paths")
		}
		list, err := bench.ParsePaths(*paths)
		if err != nil {
			return err
		}
		return benchEachPath(ctx, e, list, withoutFlag(withoutFlag(args, "paths"), "require-valid"), *asJSON, *requireValid)
	}
	if o.Weights != "" {
		shape := []string{"dim", "layers", "heads", "kv-heads", "ffn", "vocab", "tied"}
		if set := setFlags(fs, shape...); len(set) > 0 {
			return fs.usageErr("bench model: --model takes the model's shape from the file; drop --%s", strings.Join(set, ", --"))
		}
		cfg, err := bench.ModelFromGGUF(o.Weights)
		if err != nil {
			return err
		}
		o.Model = cfg
	}
	if o.Model.KVHeads == 0 {
		o.Model.KVHeads = o.Model.Heads
	}
	if o.Model.FFN == 0 {
		o.Model.FFN = bench.FFNFor(o.Model.Dim)
	}
	o.LlamaArgs, o.TorchBLAS = strings.Fields(*llamaArgs), blasDirs(*torchBLAS)
	if *torchConfigs != "" {
		o.TorchConfigs = strings.Split(*torchConfigs, ",")
		for i := range o.TorchConfigs {
			o.TorchConfigs[i] = strings.TrimSpace(o.TorchConfigs[i])
		}
	}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	r, err := bench.Run(ctx, o, e.stderr)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	} else {
		err = r.WriteTable(e.stdout)
	}
	if err == nil && *requireValid && !r.Validity.Valid {
		return fmt.Errorf("bench model: not a valid comparison (--require-valid): %s", strings.Join(r.Validity.Reasons, "; "))
	}
	return err
}

// benchEachPath runs `bench model` once per kernel path (bench.RunPaths)
// and prints the reports side by side.
func benchEachPath(ctx context.Context, e env, paths, args []string, asJSON, requireValid bool) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench model --paths: %w", err)
	}
	child := append(append([]string{"bench", "model"}, withoutFlag(args, "json")...), "--json")
	reports, err := bench.RunPaths(ctx, self, paths, child, []string{"--skip-torch", "--skip-llama"}, e.stderr)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(reports)
	} else {
		err = bench.WritePathsTable(e.stdout, reports)
	}
	if err != nil || !requireValid {
		return err
	}
	if invalid := bench.Invalid(reports); len(invalid) > 0 {
		return fmt.Errorf("bench model: not a valid comparison (--require-valid): %s", strings.Join(invalid, " | "))
	}
	return nil
}

// boolFlags are bench model's boolean flags that withoutFlag removes: their
// value is never the next argument.
var boolFlags = map[string]bool{"json": true, "require-valid": true}

// withoutFlag returns args without the flag name (-name, --name, with its
// value as -name=v or as the next argument; a boolean's form -name=v only).
func withoutFlag(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		bare := strings.TrimLeft(a, "-")
		switch {
		case a == "--":
			return append(out, args[i:]...)
		case !strings.HasPrefix(a, "-"):
			out = append(out, a)
		case bare == name:
			if !boolFlags[name] && i+1 < len(args) {
				i++
			}
		case strings.HasPrefix(bare, name+"="):
		default:
			out = append(out, a)
		}
	}
	return out
}

// bindBenchFlags binds bench model's shape and engine flags into o (its
// values are the defaults).
func bindBenchFlags(fs *cmdLine, o *bench.Options) {
	fs.IntVar(&o.Threads, "threads", o.Threads, "threads of every engine (GOMAXPROCS, torch.set_num_threads, llama-server -t/-tb)")
	fs.StringVar(&o.Weights, "model", "", "a real model's GGUF file (e.g. SmolLM2-135M-Instruct.Q4_1.gguf): its shape for the training comparison, its dequantized weights for both decoders (llama.cpp gets them as F32, or as BF16 with --precision bf16)")
	fs.IntVar(&o.Model.Dim, "dim", o.Model.Dim, "model width")
	fs.IntVar(&o.Model.Layers, "layers", o.Model.Layers, "decoder layers")
	fs.IntVar(&o.Model.Heads, "heads", o.Model.Heads, "attention heads")
	fs.IntVar(&o.Model.KVHeads, "kv-heads", 0, "key/value heads (0: as many as --heads)")
	fs.IntVar(&o.Model.FFN, "ffn", 0, "SwiGLU width (0: 8·dim/3 rounded up to a multiple of 16)")
	fs.IntVar(&o.Model.Vocab, "vocab", o.Model.Vocab, "vocabulary size")
	fs.BoolVar(&o.Model.TiedEmbeddings, "tied", false, "tie the language-model head to the embeddings")
	fs.IntVar(&o.Seq, "seq", o.Seq, "training sequence length")
	fs.IntVar(&o.Batch, "batch", o.Batch, "training sequences a step")
	fs.IntVar(&o.Steps, "steps", o.Steps, "timed training steps a round, each side (median reported)")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "interleaved training rounds (compactrl, then each PyTorch configuration; order reversed every other round)")
	fs.IntVar(&o.DecodeBatch, "decode-batch", o.DecodeBatch, "sequences decoded at once")
	fs.IntVar(&o.DecodeTokens, "decode-tokens", o.DecodeTokens, "new tokens a decoded sequence")
	fs.IntVar(&o.Prompt, "prompt", o.Prompt, "prompt tokens a decoded sequence")
	fs.IntVar(&o.DecodeReps, "decode-reps", o.DecodeReps, "timed decode rounds each side (median reported)")
	fs.DurationVar(&o.GemmTime, "gemm-time", o.GemmTime, "time per GEMM shape")
	fs.DurationVar(&o.PeakTime, "peak-time", o.PeakTime, "time of each FMA peak measurement (one before the run, one after)")
	fs.StringVar(&o.TorchSource, "torch", o.TorchSource, "PyTorch reference: \""+bench.TorchPyPI+"\" (2.x from PyPI: --python, else $"+bench.TorchPythonEnv+", else the venv bench/torch/setup.sh makes) or \""+bench.TorchDebian+"\" (the fallback: Debian's python3-torch under "+bench.DebianPython+")")
	fs.StringVar(&o.Python, "python", "", "Python interpreter with torch (overrides --torch's choice of interpreter)")
	fs.Float64Var(&o.QuietPeak, "quiet-peak", 0, "float32 FMA peak (GFLOP/s, same threads) measured earlier on the quiet machine: a run whose peak falls 10% below it is invalid (0: none)")
	fs.Float64Var(&o.QuietBandwidth, "quiet-bandwidth", 0, "streaming read bandwidth (GB/s, same threads; the report prints it) measured earlier on the quiet machine: a run whose bandwidth falls 10% below it is invalid, as when other machines on the host contend for memory (0: none)")
	fs.StringVar(&o.GGUF, "gguf", "", "keep the exported GGUF at FILE (default: a temporary file)")
	fs.StringVar(&o.LlamaDir, "llama-dir", o.LlamaDir, "llama.cpp install directory (default $"+bench.LlamaEnv+")")
	fs.StringVar(&o.Precision, "precision", o.Precision, "the built-in engine's products: fp32, or bf16 (bfloat16 inputs, float32 sums; on AVX512_BF16 where the CPU has it), to set against --torch-configs bf16 (autocast)")
	fs.BoolVar(&o.SkipTorch, "skip-torch", false, "do not run the PyTorch comparison")
	fs.BoolVar(&o.SkipLlama, "skip-llama", false, "do not run the llama.cpp comparison")
}

// blasDirs reads --torch-blas: "installed" is the system's BLAS ("").
func blasDirs(spec string) []string {
	var dirs []string
	for _, b := range strings.Split(spec, ",") {
		switch b = strings.TrimSpace(b); b {
		case "":
		case "installed":
			dirs = append(dirs, "")
		default:
			dirs = append(dirs, b)
		}
	}
	return dirs
}

// startCPUProfile starts a pprof CPU profile into path (nothing when path
// is ""); stop ends it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile %s: %w", path, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// setFlags lists which of names were given on the command line.
func setFlags(fs *cmdLine, names ...string) []string {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(names, f.Name) {
			set = append(set, f.Name)
		}
	})
	return set
}

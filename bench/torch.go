package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/compactrl/compactrl/model"
)

//go:embed torch_train.py
var torchScript []byte

// OpenBLASDir is where Debian's libopenblas0-pthread puts its libblas.so.3.
const OpenBLASDir = "/usr/lib/x86_64-linux-gnu/openblas-pthread"

// TorchResult is PyTorch's training throughput on the built-in model's
// shape, in tokens/s, with the engine's version and the BLAS library the
// process loaded.
type TorchResult struct {
	Engine string  `json:"engine"`
	BLAS   string  `json:"blas"`
	Train  Measure `json:"train"`
}

// Label is the engine and its BLAS library's file name.
func (t TorchResult) Label() string {
	if t.BLAS == "" {
		return t.Engine
	}
	return t.Engine + " + " + filepath.Base(t.BLAS)
}

// Torch runs torch_train.py (embedded) with python on the shape of cfg,
// batch sequences of seq positions and threads intra-op threads (also
// OMP_NUM_THREADS and OPENBLAS_NUM_THREADS), timing steps steps after one
// warm-up: the same step as Train. A Debian torch built against the
// generic BLAS interface loads whichever libblas.so.3 the dynamic linker
// finds: blasDir, when not empty, is put first on LD_LIBRARY_PATH for this
// process only (e.g. OpenBLASDir), so the system's choice stays as it is.
func Torch(ctx context.Context, python, blasDir string, cfg model.Config, batch, seq, steps, threads int) (TorchResult, error) {
	if batch <= 0 || seq <= 0 || steps <= 0 || threads <= 0 {
		return TorchResult{}, fmt.Errorf("bench torch: batch %d, seq %d, steps %d, threads %d must be positive", batch, seq, steps, threads)
	}
	dir, err := os.MkdirTemp("", "compactrl-bench-torch")
	if err != nil {
		return TorchResult{}, fmt.Errorf("bench torch: %w", err)
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "torch_train.py")
	if err := os.WriteFile(script, torchScript, 0o644); err != nil {
		return TorchResult{}, fmt.Errorf("bench torch: %w", err)
	}
	itoa := strconv.Itoa
	args := []string{script,
		"--dim", itoa(cfg.Dim), "--layers", itoa(cfg.Layers), "--heads", itoa(cfg.Heads),
		"--kv-heads", itoa(cfg.KVHeads), "--ffn", itoa(cfg.FFN), "--vocab", itoa(cfg.Vocab),
		"--seq", itoa(seq), "--batch", itoa(batch), "--threads", itoa(threads), "--steps", itoa(steps),
		"--rope-theta", strconv.FormatFloat(cfg.RopeTheta, 'g', -1, 64),
		"--eps", strconv.FormatFloat(cfg.NormEps, 'g', -1, 64),
	}
	if cfg.TiedEmbeddings {
		args = append(args, "--tied")
	}
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS="+itoa(threads), "MKL_NUM_THREADS="+itoa(threads), "OPENBLAS_NUM_THREADS="+itoa(threads))
	if blasDir != "" {
		lp := blasDir
		if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
			lp += string(os.PathListSeparator) + old
		}
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+lp)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return TorchResult{}, fmt.Errorf("bench torch: %s %s: %w\n%s", python, script, err, tail(stderr.Bytes(), 2000))
	}
	var out struct {
		Engine        string    `json:"engine"`
		BLAS          string    `json:"blas"`
		Threads       int       `json:"threads"`
		TokensPerStep int       `json:"tokens_per_step"`
		StepS         []float64 `json:"step_s"`
		CPUS          float64   `json:"cpu_s"`
	}
	lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))
	if err := json.Unmarshal(lines[len(lines)-1], &out); err != nil {
		return TorchResult{}, fmt.Errorf("bench torch: parse output %q: %w", tail(stdout.Bytes(), 500), err)
	}
	if out.Threads != threads || out.TokensPerStep != batch*seq || len(out.StepS) != steps {
		return TorchResult{}, fmt.Errorf("bench torch: script ran %d threads, %d tokens a step, %d steps; want %d, %d, %d", out.Threads, out.TokensPerStep, len(out.StepS), threads, batch*seq, steps)
	}
	samples := make([]float64, len(out.StepS))
	var wall float64
	for i, s := range out.StepS {
		wall += s
		if s <= 0 {
			return TorchResult{}, fmt.Errorf("bench torch: step %d took %g s", i, s)
		}
		samples[i] = float64(out.TokensPerStep) / s
	}
	if blasDir != "" && !strings.HasPrefix(out.BLAS, blasDir) {
		return TorchResult{}, fmt.Errorf("bench torch: asked for the BLAS in %s, the process loaded %q", blasDir, out.BLAS)
	}
	return TorchResult{Engine: out.Engine, BLAS: out.BLAS, Train: newMeasure(samples, cpuShare(seconds(out.CPUS), seconds(wall), threads))}, nil
}

// tail is the last n bytes of b, as text.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

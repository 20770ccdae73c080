package bench

import (
	"bufio"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/compactrl/compactrl/model"
)

//go:embed torch_train.py
var torchScript []byte

// OpenBLASDir is where Debian's libopenblas0-pthread puts its libblas.so.3.
const OpenBLASDir = "/usr/lib/x86_64-linux-gnu/openblas-pthread"

// TorchPythonEnv names the interpreter of a venv with PyTorch 2.x (from
// PyPI) that bench model uses when --python is not given.
const TorchPythonEnv = "COMPACTRL_TORCH_PYTHON"

// DebianPython is the interpreter of the named fallback: Debian's
// python3-torch (1.13), which multiplies with whichever libblas.so.3 the
// dynamic linker finds.
const DebianPython = "/usr/bin/python3"

// Where the PyTorch reference comes from.
const (
	TorchPyPI   = "pypi"   // PyTorch 2.x from PyPI in a venv (bench/torch/setup.sh makes one)
	TorchDebian = "debian" // the named fallback: Debian's python3-torch under DebianPython
)

// The PyTorch configurations torch_train.py runs (see its docstring).
const (
	TorchEager   = "eager"   // float32, attention and RMSNorm written out, AdamW's default implementation
	TorchSDPA    = "sdpa"    // float32, scaled_dot_product_attention(is_causal=True), F.rms_norm, fused AdamW
	TorchCompile = "compile" // sdpa's model under torch.compile
	TorchBF16    = "bf16"    // sdpa's model under bfloat16 autocast: not float32
)

// TorchConfigs is every configuration, in the order they are run.
var TorchConfigs = []string{TorchEager, TorchSDPA, TorchCompile, TorchBF16}

// torchConfigLabel describes each configuration in the report.
var torchConfigLabel = map[string]string{
	TorchEager:   "eager fp32 (attention written out, AdamW default)",
	TorchSDPA:    "eager fp32, SDPA is_causal + F.rms_norm + fused AdamW",
	TorchCompile: "torch.compile fp32 (SDPA model, fused AdamW)",
	TorchBF16:    "bf16 autocast (SDPA model, fused AdamW) — not fp32",
}

// DefaultTorchConfigs are the configurations a source's torch can run:
// all four for PyTorch 2.x, eager only for Debian's 1.13 (it has no
// scaled_dot_product_attention, F.rms_norm or torch.compile).
func DefaultTorchConfigs(source string) []string {
	if source == TorchDebian {
		return []string{TorchEager}
	}
	return slices.Clone(TorchConfigs)
}

// ManagedTorchVenv is the venv bench/torch/setup.sh makes by default:
// $XDG_CACHE_HOME/compactrl/torch-venv (os.UserCacheDir).
func ManagedTorchVenv() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("bench torch: no cache directory for the managed venv: %w", err)
	}
	return filepath.Join(dir, "compactrl", "torch-venv"), nil
}

// ResolveTorchPython picks the interpreter for source when none was given:
// for TorchPyPI $COMPACTRL_TORCH_PYTHON, else the managed venv's python if
// it exists; for TorchDebian DebianPython. from says which, for the report.
func ResolveTorchPython(source string) (python, from string, err error) {
	switch source {
	case TorchDebian:
		return DebianPython, "Debian's python3-torch (fallback)", nil
	case TorchPyPI:
		if p := os.Getenv(TorchPythonEnv); p != "" {
			return p, "$" + TorchPythonEnv, nil
		}
		venv, err := ManagedTorchVenv()
		if err != nil {
			return "", "", err
		}
		p := filepath.Join(venv, "bin", "python")
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("bench: no PyTorch 2.x: %s is missing (bash bench/torch/setup.sh makes it), %s is not set and --python was not given; or run the fallback with --torch %s, or --skip-torch", p, TorchPythonEnv, TorchDebian)
		}
		return p, "the managed venv " + venv, nil
	}
	return "", "", fmt.Errorf("bench: unknown PyTorch source %q (want %s or %s)", source, TorchPyPI, TorchDebian)
}

// TorchHello is what torch_train.py reports once its configurations are
// built and warmed up.
type TorchHello struct {
	Engine        string             `json:"engine"`
	Version       string             `json:"version"`
	Threads       int                `json:"threads"`
	TokensPerStep int                `json:"tokens_per_step"`
	Configs       []string           `json:"configs"`
	BLAS          string             `json:"blas"`
	BLASLibrary   string             `json:"blas_library"`
	MKL           bool               `json:"mkl"`
	MKLDNN        bool               `json:"mkldnn"`
	CPUCapability string             `json:"cpu_capability"`
	WarmupS       map[string]float64 `json:"warmup_s"`
}

// TorchResult is one PyTorch configuration's training throughput on the
// built-in model's shape, in tokens/s.
type TorchResult struct {
	Engine        string  `json:"engine"`
	Config        string  `json:"config"`
	BLAS          string  `json:"blas"`
	BLASLibrary   string  `json:"blas_library,omitempty"`
	CPUCapability string  `json:"cpu_capability,omitempty"`
	Python        string  `json:"python"`
	Train         Measure `json:"train"`
	// VsCompactrl is compactrl's training rate over this one's; MFU and
	// MFUAttn as Report.TrainMFU (filled by Report.Judge).
	VsCompactrl Comparison `json:"compactrl_ratio"`
	MFU         float64    `json:"mfu"`
	MFUAttn     float64    `json:"mfu_with_attention"`
	MFUValidity Validity   `json:"mfu_validity"`
}

// Label names the engine, the configuration and, for a run on a chosen
// libblas.so.3, that library's file name.
func (t TorchResult) Label() string {
	s := t.Engine
	if l := torchConfigLabel[t.Config]; l != "" {
		s += " " + l
	}
	if t.BLASLibrary != "" {
		s += " + " + filepath.Base(t.BLASLibrary)
	}
	return s
}

// TorchSession is one torch_train.py process: its configurations built
// and warmed up, running timed rounds on request, so that Run can
// alternate them with the built-in engine's.
type TorchSession struct {
	Hello   TorchHello
	Python  string
	threads int
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Scanner
	stderr  *lockedBuffer
	dir     string

	closeOnce sync.Once
	closeErr  error
}

// inductorCacheEnv is where torch.compile keeps its compiled kernels.
const inductorCacheEnv = "TORCHINDUCTOR_CACHE_DIR"

// inductorCache is torch.compile's cache directory for the interpreter
// python, unless the user names one: the default (/tmp/torchinductor_USER)
// is shared by every torch on the machine, and two installs of the same
// torch version (a Python 3.12 venv and a 3.11 one) then load each
// other's kernels, which fail to link (undefined symbol Sleef_expf16_u10,
// seen with torch 2.15.0).
func inductorCache(python string) string {
	abs, err := filepath.Abs(python)
	if err != nil {
		abs = python
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(os.TempDir(), "compactrl-torchinductor-"+hex.EncodeToString(sum[:6]))
}

// StartTorch starts torch_train.py (embedded) under python on the shape of
// cfg, batch sequences of seq positions and threads intra-op threads (also
// OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS), and waits
// for it to build and warm up configs. blasDir, when not empty, is put
// first on LD_LIBRARY_PATH of this process only (a Debian torch built on
// the generic BLAS interface then loads that directory's libblas.so.3, e.g.
// OpenBLASDir); the process must report loading it.
func StartTorch(ctx context.Context, python, blasDir string, configs []string, cfg model.Config, batch, seq, threads int) (*TorchSession, error) {
	if batch <= 0 || seq <= 0 || threads <= 0 {
		return nil, fmt.Errorf("bench torch: batch %d, seq %d, threads %d must be positive", batch, seq, threads)
	}
	if len(configs) == 0 {
		return nil, errors.New("bench torch: no configuration to run")
	}
	for _, c := range configs {
		if !slices.Contains(TorchConfigs, c) {
			return nil, fmt.Errorf("bench torch: unknown configuration %q (have %s)", c, strings.Join(TorchConfigs, ", "))
		}
	}
	dir, err := os.MkdirTemp("", "compactrl-bench-torch")
	if err != nil {
		return nil, fmt.Errorf("bench torch: %w", err)
	}
	script := filepath.Join(dir, "torch_train.py")
	if err := os.WriteFile(script, torchScript, 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench torch: %w", err)
	}
	itoa := strconv.Itoa
	args := []string{script,
		"--dim", itoa(cfg.Dim), "--layers", itoa(cfg.Layers), "--heads", itoa(cfg.Heads),
		"--kv-heads", itoa(cfg.KVHeads), "--ffn", itoa(cfg.FFN), "--vocab", itoa(cfg.Vocab),
		"--seq", itoa(seq), "--batch", itoa(batch), "--threads", itoa(threads),
		"--configs", strings.Join(configs, ","),
		"--rope-theta", strconv.FormatFloat(cfg.RopeTheta, 'g', -1, 64),
		"--eps", strconv.FormatFloat(cfg.NormEps, 'g', -1, 64),
	}
	if cfg.TiedEmbeddings {
		args = append(args, "--tied")
	}
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS="+itoa(threads), "MKL_NUM_THREADS="+itoa(threads), "OPENBLAS_NUM_THREADS="+itoa(threads))
	if os.Getenv(inductorCacheEnv) == "" {
		cmd.Env = append(cmd.Env, inductorCacheEnv+"="+inductorCache(python))
	}
	if blasDir != "" {
		lp := blasDir
		if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
			lp += string(os.PathListSeparator) + old
		}
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+lp)
	}
	s := &TorchSession{Python: python, threads: threads, cmd: cmd, stderr: &lockedBuffer{}, dir: dir}
	cmd.Stderr = s.stderr
	if s.in, err = cmd.StdinPipe(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench torch: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench torch: %w", err)
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench torch: %s: %w", python, err)
	}
	s.out = bufio.NewScanner(stdout)
	s.out.Buffer(make([]byte, 0, 64<<10), 16<<20)
	if err := s.read(&s.Hello); err != nil {
		s.Close()
		return nil, fmt.Errorf("bench torch: starting %s: %w", python, err)
	}
	h := s.Hello
	if h.Threads != threads || h.TokensPerStep != batch*seq || !slices.Equal(h.Configs, configs) {
		s.Close()
		return nil, fmt.Errorf("bench torch: script runs %d threads, %d tokens a step, configurations %v; want %d, %d, %v", h.Threads, h.TokensPerStep, h.Configs, threads, batch*seq, configs)
	}
	if blasDir != "" && !strings.HasPrefix(h.BLASLibrary, blasDir) {
		s.Close()
		return nil, fmt.Errorf("bench torch: asked for the BLAS in %s, the process loaded %q", blasDir, h.BLASLibrary)
	}
	return s, nil
}

// read decodes the next line of the script's output into v; a line with
// "error" is the script's failure.
func (s *TorchSession) read(v any) error {
	if !s.out.Scan() {
		err := s.out.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("no reply (%v); its stderr:\n%s", err, s.stderr.tail(2000))
	}
	line := s.out.Bytes()
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(line, &e); err != nil {
		return fmt.Errorf("reading %q: %w", tail(line, 500), err)
	}
	if e.Error != "" {
		return fmt.Errorf("the script failed: %s; its stderr:\n%s", e.Error, s.stderr.tail(2000))
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("reading %q: %w", tail(line, 500), err)
	}
	return nil
}

// TorchRound is one round of timed steps of one configuration.
type TorchRound struct {
	Config string    `json:"config"`
	StepS  []float64 `json:"step_s"`
	CPUS   float64   `json:"cpu_s"`
	Loss   float64   `json:"loss"`
}

// Round times steps training steps of config (one of the session's).
func (s *TorchSession) Round(config string, steps int) (TorchRound, error) {
	if steps <= 0 {
		return TorchRound{}, fmt.Errorf("bench torch: %d steps must be positive", steps)
	}
	if !slices.Contains(s.Hello.Configs, config) {
		return TorchRound{}, fmt.Errorf("bench torch: configuration %q was not started (have %v)", config, s.Hello.Configs)
	}
	if _, err := fmt.Fprintf(s.in, "run %s %d\n", config, steps); err != nil {
		return TorchRound{}, fmt.Errorf("bench torch %s: %w; its stderr:\n%s", config, err, s.stderr.tail(2000))
	}
	var r TorchRound
	if err := s.read(&r); err != nil {
		return TorchRound{}, fmt.Errorf("bench torch %s: %w", config, err)
	}
	if r.Config != config || len(r.StepS) != steps {
		return TorchRound{}, fmt.Errorf("bench torch %s: the script ran %q for %d steps, want %d", config, r.Config, len(r.StepS), steps)
	}
	for i, d := range r.StepS {
		if !(d > 0) {
			return TorchRound{}, fmt.Errorf("bench torch %s: step %d took %g s", config, i+1, d)
		}
	}
	return r, nil
}

// Close asks the script to quit, waits for it and removes its directory;
// later calls return the first one's error.
func (s *TorchSession) Close() error {
	s.closeOnce.Do(func() {
		fmt.Fprintln(s.in, "quit")
		s.in.Close()
		err := s.cmd.Wait()
		os.RemoveAll(s.dir)
		if err != nil {
			s.closeErr = fmt.Errorf("bench torch: %s exited: %w; its stderr:\n%s", s.Python, err, s.stderr.tail(2000))
		}
	})
	return s.closeErr
}

// Result gathers a configuration's rounds into a TorchResult: one rate per
// step, the CPU share over every timed step.
func (s *TorchSession) Result(config string, rounds []TorchRound) TorchResult {
	var samples, per []float64
	var cpu, wall float64
	for _, r := range rounds {
		var rs []float64
		for _, d := range r.StepS {
			rs = append(rs, float64(s.Hello.TokensPerStep)/d)
			wall += d
		}
		cpu += r.CPUS
		samples = append(samples, rs...)
		per = append(per, median(rs))
	}
	m := newMeasure(samples, cpuShare(seconds(cpu), seconds(wall), s.threads))
	m.Rounds = per
	return TorchResult{Engine: s.Hello.Engine, Config: config, BLAS: s.Hello.BLAS, BLASLibrary: s.Hello.BLASLibrary,
		CPUCapability: s.Hello.CPUCapability, Python: s.Python, Train: m}
}

// tail is the last n bytes of b, as text.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

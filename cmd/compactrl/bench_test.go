package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
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
	for _, bad := range [][]string{{"bench"}, {"bench", "model", "--threads", "0", "--skip-torch", "--skip-llama"}, {"bench", "model", "extra"}} {
		if code := run(context.Background(), env{stdout: &out, stderr: &errb}, bad); code == 0 {
			t.Errorf("%q accepted", bad)
		}
	}
}

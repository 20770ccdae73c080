package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeEpisodes writes a rollout-style episode file: task seeds from
// first on, passed[i] the outcome of the i-th.
func writeEpisodes(t *testing.T, name string, first int, passed []bool) string {
	t.Helper()
	var b strings.Builder
	for i, p := range passed {
		r := 0
		if p {
			r = 1
		}
		fmt.Fprintf(&b, `{"id":"vault-%d","task":"t","status":"ok","reward":%d,"segments":[]}`+"\n", first+i, r)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Two rollouts of the same four tasks: the second passes the first's two
// and one more, Δ = 3/4 − 2/4 = +0.25, paired by task seed whatever the
// order the episodes finished in.
func TestEvalCompareEpisodeFiles(t *testing.T) {
	own := writeEpisodes(t, "own.jsonl", 100, []bool{true, true, false, false})
	exp := writeEpisodes(t, "expert.jsonl", 100, []bool{true, true, true, false})
	// The same episodes written in another order pair the same way.
	b, _ := os.ReadFile(exp)
	lines := strings.SplitAfter(strings.TrimSpace(string(b))+"\n", "\n")
	os.WriteFile(exp, []byte(lines[3]+lines[1]+lines[0]+lines[2]), 0o644)
	stdout, stderr, code := runCmd(t, "eval", "compare", "own="+own, "expert="+exp)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"task seeds 100…103 (4 tasks)", "| own | 1 | 0.500 |", "| expert | 1 | 0.750 | 0.750 [", "| +0.250 [+0.000, +0.750] |"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	// Other tasks do not pair.
	other := writeEpisodes(t, "other.jsonl", 200, []bool{true, true, true, false})
	if stdout, _, _ := runCmd(t, "eval", "compare", "own="+own, "other="+other); !strings.Contains(stdout, "not comparable") {
		t.Errorf("other tasks compared:\n%s", stdout)
	}
	gap := filepath.Join(t.TempDir(), "gap.jsonl")
	os.WriteFile(gap, []byte(`{"id":"vault-3","task":"t","status":"ok","reward":1,"segments":[]}`+"\n"+`{"id":"vault-1","task":"t","status":"ok","reward":1,"segments":[]}`+"\n"), 0o644)
	if _, stderr, code := runCmd(t, "eval", "compare", own, gap); code == 0 || !strings.Contains(stderr, "consecutive") {
		t.Errorf("non-consecutive seeds: exit %d, %s", code, stderr)
	}
}

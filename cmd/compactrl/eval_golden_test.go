package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/compactrl/compactrl/eval"
	"github.com/compactrl/compactrl/train"
)

// The comparison eval compare prints for an arm read from a run directory
// (its outcomes/final.json) and one read from an episode file. The golden
// file was written before the reading moved out of package main.
func TestEvalCompareGolden(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	line := func(seed int, st string, reward float64) string {
		return fmt.Sprintf(`{"id":"vault-%d","task":"t","status":%q,"reward":%g,"segments":[]}`+"\n", seed, st, reward)
	}
	a := write("a.jsonl", line(12, "ok", 1)+line(10, "ok", 0)+line(11, "infra_error", 0)+line(13, "ok", 0.5)+line(14, "overlong", 0))
	b := write("b.jsonl", line(10, "ok", 1)+line(11, "ok", 1)+line(12, "ok", 1)+line(13, "verifier_error", 0)+line(14, "ok", 1))
	evs, _, err := eval.ReadRuns([]string{a})
	if err != nil {
		t.Fatal(err)
	}
	if err := train.WriteOutcomes(train.FinalOutcomes(filepath.Join(dir, "run")), evs[0]); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCmd(t, "eval", "compare", "run="+filepath.Join(dir, "run"), "b="+b)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// The golden file is the output of the code before the move; a change
	// of the table is a change of this file, made by hand.
	want, err := os.ReadFile(filepath.Join("testdata", "eval", "compare.stdout"))
	if err != nil {
		t.Fatal(err)
	}
	if stdout != string(want) {
		t.Errorf("eval compare changed:\n--- got\n%s\n--- want\n%s", stdout, want)
	}
}

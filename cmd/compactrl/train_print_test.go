package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/train"
)

// A run without the evaluation before RL (run.eval_every: 0) prints "not
// evaluated" for it, not 0.000 [NaN, NaN].
func TestPrintResultWithoutBaseEvaluation(t *testing.T) {
	var out bytes.Buffer
	printResult(env{stdout: &out}, train.Result{Iterations: 3, After: train.EvalResult{Episodes: 8, Pass1Compact: 0.5, Pass1Single: 0.25}})
	s := out.String()
	if strings.Contains(s, "NaN") || !strings.Contains(s, "not evaluated") || !strings.Contains(s, "0.500") {
		t.Fatalf("output:\n%s", s)
	}
}

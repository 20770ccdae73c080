package train

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// A log line never prints NaN: no compaction (summary quality) and no
// critic (value loss) show as a dash.
func TestMetricsLineWithoutSummariesOrCritic(t *testing.T) {
	m := Metrics{Iteration: 3, Reward: 0.5, SummaryQual: math.NaN(), ValueLoss: math.NaN()}
	line := m.Line()
	if strings.Contains(line, "NaN") || !strings.Contains(line, "summary_q   -  ") || !strings.Contains(line, "vloss    -  ") {
		t.Fatalf("line %q", line)
	}
	m.SummaryQual, m.ValueLoss = 0.25, 0.0123
	if line := m.Line(); !strings.Contains(line, "summary_q 0.250") || !strings.Contains(line, "vloss 0.0123") {
		t.Fatalf("line %q", line)
	}
}

func TestEvalResultJSONKeepsNaNAsNull(t *testing.T) {
	in := EvalResult{Episodes: 4, Pass1Compact: 0.25, Pass1Single: 0, SummaryQuality: math.NaN(), Compactions: 1.5, PassCompacted: math.NaN(), Reward: 0.25}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"summary_quality":null`) {
		t.Errorf("NaN written as %s", b)
	}
	var out EvalResult
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Episodes != 4 || out.Pass1Compact != 0.25 || !math.IsNaN(out.SummaryQuality) || !math.IsNaN(out.PassCompacted) || out.Reward != 0.25 {
		t.Errorf("round trip %+v", out)
	}
}

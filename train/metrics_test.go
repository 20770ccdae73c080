package train

import (
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

package stats

import (
	"fmt"
	"math"
	"testing"
)

func TestWilsonHandValues(t *testing.T) {
	// p̂ = 0.5, n = 10, z = 1.96: centre 0.5, half-width
	// 1.96·sqrt(0.025 + 0.0096)/1.384 = 0.2634.
	lo, hi := Wilson(5, 10)
	if math.Abs(lo-0.2366) > 1e-4 || math.Abs(hi-0.7634) > 1e-4 {
		t.Errorf("Wilson(5, 10) = [%.4f, %.4f], want [0.2366, 0.7634]", lo, hi)
	}
	if lo, hi := Wilson(0, 20); lo != 0 || math.Abs(hi-0.1611) > 1e-4 {
		t.Errorf("Wilson(0, 20) = [%.4f, %.4f], want [0, 0.1611]", lo, hi)
	}
	if lo, hi := Wilson(0, 0); !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("Wilson(0, 0) = [%v, %v], want NaN", lo, hi)
	}
}

func TestRateCIRoundsToACount(t *testing.T) {
	// 0.25 of 100 → Wilson(25, 100) = [0.175, 0.343]; 0.7/3 → k = 1 of 3.
	if got := RateCI(0.25, 100); got != "0.250 [0.175, 0.343]" {
		t.Errorf("RateCI(0.25, 100) = %q", got)
	}
	lo, hi := Wilson(1, 3)
	if got, want := RateCI(1.0/3, 3), fmt.Sprintf("0.333 [%.3f, %.3f]", lo, hi); got != want {
		t.Errorf("RateCI(1/3, 3) = %q, want %q", got, want)
	}
}

func TestSeedMeanHandValues(t *testing.T) {
	// 0.2, 0.4, 0.6: mean 0.4, sd 0.2, t(2) = 4.303 → ±4.303·0.2/√3 = ±0.4969.
	m, lo, hi := SeedMean([]float64{0.2, 0.4, 0.6})
	if math.Abs(m-0.4) > 1e-12 || math.Abs(lo-(0.4-0.49687)) > 1e-4 || math.Abs(hi-(0.4+0.49687)) > 1e-4 {
		t.Errorf("SeedMean = %.4f [%.4f, %.4f], want 0.4 [-0.0969, 0.8969]", m, lo, hi)
	}
	if _, lo, _ := SeedMean([]float64{0.3}); !math.IsNaN(lo) {
		t.Error("one seed has no interval")
	}
	if t975(100) != 1.960 || t975(4) != 2.776 {
		t.Errorf("t975(100) = %v, t975(4) = %v", t975(100), t975(4))
	}
}

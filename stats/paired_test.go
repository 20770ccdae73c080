package stats

import (
	"math"
	"strings"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestGridMeanAndSeedMeansByHand(t *testing.T) {
	// Seed means 3/4 and 2/4; their mean 0.625.
	y := [][]float64{{1, 0, 1, 1}, {0, 0, 1, 1}}
	if got := GridMean(y); got != 0.625 {
		t.Errorf("GridMean = %v, want 0.625", got)
	}
	if got := seedMeans(y); len(got) != 2 || got[0] != 0.75 || got[1] != 0.5 {
		t.Errorf("seedMeans = %v, want [0.75 0.5]", got)
	}
	// A task not scored in one seed leaves every seed: tasks 0 and 2 remain,
	// seed means 1 and 0.5, mean 0.75.
	nan := math.NaN()
	y = [][]float64{{1, nan, 1}, {0, 1, 1}}
	if got := GridMean(y); got != 0.75 {
		t.Errorf("GridMean with an unscored task = %v, want 0.75", got)
	}
}

func TestQuantileInterpolates(t *testing.T) {
	v := []float64{1, 2, 3, 4}
	// Positions q·(n−1): 0.5 → 1.5 → 2.5; 0.025 → 0.075 → 1.075; 1 → 4.
	for _, c := range []struct{ q, want float64 }{{0.5, 2.5}, {0.025, 1.075}, {1, 4}, {0, 1}} {
		if got := Quantile(v, c.q); !near(got, c.want, 1e-12) {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("Quantile of nothing must be NaN")
	}
}

// One seed per arm, two tasks, the arm passes task 0 only and the
// reference neither: Δ = 0.5. A replicate draws the tasks (0,0) with
// probability 1/4 (Δ* = 1), (0,1) or (1,0) with 1/2 (Δ* = 0.5), (1,1) with
// 1/4 (Δ* = 0): the 2.5% and 97.5% quantiles are 0 and 1.
func TestPairedDiffTwoTasksByHand(t *testing.T) {
	b, err := PairedDiff([][]float64{{1, 0}}, [][]float64{{0, 0}}, 4000, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b.Est != 0.5 || b.Lo != 0 || b.Hi != 1 || b.Tasks != 2 || b.Seeds != 1 {
		t.Errorf("PairedDiff = %+v, want 0.5 [0, 1] over 2 tasks", b)
	}
}

// Seeds resample: the arm's two seeds pass everything and nothing, the
// reference nothing. Δ* is the mean of two drawn seeds: 1 (1/4), 0.5
// (1/2), 0 (1/4), whatever the tasks drawn.
func TestPairedDiffResamplesSeedsByHand(t *testing.T) {
	b, err := PairedDiff([][]float64{{1, 1, 1}, {0, 0, 0}}, [][]float64{{0, 0, 0}}, 4000, 2)
	if err != nil {
		t.Fatal(err)
	}
	if b.Est != 0.5 || b.Lo != 0 || b.Hi != 1 || b.Seeds != 2 {
		t.Errorf("PairedDiff = %+v, want 0.5 [0, 1] from 2 seeds", b)
	}
}

// Pairing by task: two arms with the same outcomes on every task differ by
// exactly 0 in every replicate, though each arm alone (half its tasks
// passed) has a wide interval. An unpaired bootstrap, resampling each arm's
// tasks on its own, would give the difference an interval as wide as
// ±0.3 here.
func TestPairedDiffKeepsTasksPaired(t *testing.T) {
	y := [][]float64{{1, 0, 1, 0, 1, 0, 1, 0, 1, 0}, {1, 0, 1, 0, 1, 0, 1, 0, 1, 0}}
	b, err := PairedDiff(y, y, 2000, 3)
	if err != nil {
		t.Fatal(err)
	}
	if b.Est != 0 || b.Lo != 0 || b.Hi != 0 {
		t.Errorf("PairedDiff of identical arms = %+v, want 0 [0, 0]", b)
	}
	m, err := HierarchicalMean(y, 2000, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Binomial(10, 0.5)/10: the 2.5% and 97.5% quantiles are 0.2 and 0.8.
	if m.Est != 0.5 || m.Lo > 0.25 || m.Hi < 0.75 {
		t.Errorf("HierarchicalMean = %+v, want 0.5 with an interval about [0.2, 0.8]", m)
	}
}

// Tasks only (one seed each): Δ* is Binomial(100, 0.3)/100 when the arm
// gains 30 of 100 tasks and loses none, so the interval is the binomial's
// 2.5% and 97.5% quantiles, 0.21 and 0.39 (0.3 ± 1.96·√(0.21/100) =
// 0.3 ± 0.090 by the normal approximation).
func TestPairedDiffTaskSpreadMatchesTheBinomial(t *testing.T) {
	a, r := make([]float64, 100), make([]float64, 100)
	for i := range 30 {
		a[i] = 1
	}
	for i := 30; i < 60; i++ { // tasks both pass: no effect on Δ
		a[i], r[i] = 1, 1
	}
	b, err := PairedDiff([][]float64{a}, [][]float64{r}, 20000, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !near(b.Est, 0.3, 1e-12) || !near(b.Lo, 0.21, 0.011) || !near(b.Hi, 0.39, 0.011) {
		t.Errorf("PairedDiff = %+v, want 0.3 [0.21, 0.39]", b)
	}
}

func TestBootstrapIsDeterministicGivenItsSeed(t *testing.T) {
	a := [][]float64{{1, 0, 1, 1, 0, 1}, {0, 1, 1, 0, 0, 1}, {1, 1, 1, 0, 1, 1}}
	r := [][]float64{{0, 0, 1, 1, 0, 0}, {0, 1, 0, 0, 0, 1}}
	x, _ := PairedDiff(a, r, 500, 7)
	y, _ := PairedDiff(a, r, 500, 7)
	if x != y {
		t.Errorf("same seed, different results: %+v %+v", x, y)
	}
	// Seed means 4/6, 3/6, 5/6 and 2/6, 2/6: Δ = 0.6667 − 0.3333.
	if !near(x.Est, 1.0/3, 1e-12) || x.Lo > x.Est || x.Hi < x.Est {
		t.Errorf("PairedDiff = %+v, want 1/3 inside its interval", x)
	}
}

func TestPairedStatsRejectBadInput(t *testing.T) {
	nan := math.NaN()
	for name, c := range map[string]struct {
		a, b [][]float64
		reps int
		want string
	}{
		"no seed":        {nil, [][]float64{{1}}, 10, "no seed"},
		"no task":        {[][]float64{{}}, [][]float64{{1}}, 10, "no task"},
		"ragged":         {[][]float64{{1, 0}, {1}}, [][]float64{{1, 0}}, 10, "same tasks"},
		"other tasks":    {[][]float64{{1, 0}}, [][]float64{{1, 0, 1}}, 10, "same tasks"},
		"one replicate":  {[][]float64{{1}}, [][]float64{{1}}, 1, "reps"},
		"nothing scored": {[][]float64{{nan}}, [][]float64{{1}}, 10, "scored"},
	} {
		if _, err := PairedDiff(c.a, c.b, c.reps, 1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
	if _, err := HierarchicalMean([][]float64{{nan, nan}}, 10, 1); err == nil {
		t.Error("HierarchicalMean of nothing scored must fail")
	}
}

// Two tasks of four attempts, one always passed and one never: p̂ = 4/8 =
// 0.5; the clustered variance 2·((4−2)² + (0−2)²)/8² = 0.25 against the
// binomial 0.25/8 is a design effect of 8, clamped to 8/2 = 4 attempts a
// task: n_eff = 2 and Wilson(0.5, 2) = 0.5 ± 1.96·√(0.125 + 0.2401)/2.9207
// = 0.5 ± 0.4055 = [0.0945, 0.9055], where the eight attempts as if independent give
// Wilson(4, 8) = [0.2152, 0.7848].
func TestClusterRateCountsTasksNotAttempts(t *testing.T) {
	b, err := ClusterRate([]int{4, 0}, []int{4, 4})
	if err != nil {
		t.Fatal(err)
	}
	if b.Est != 0.5 || !near(b.Lo, 0.0945, 1e-4) || !near(b.Hi, 0.9055, 1e-4) || b.Tasks != 2 {
		t.Errorf("ClusterRate = %+v, want 0.5 [0.0945, 0.9055] over 2 tasks", b)
	}
	// Attempts that vary within tasks as much as across them: tasks (2 of
	// 4) and (2 of 4): clustered variance 0 → deff 1, Wilson(4, 8).
	lo, hi := Wilson(4, 8)
	if b, err := ClusterRate([]int{2, 2}, []int{4, 4}); err != nil || b.Lo != lo || b.Hi != hi {
		t.Errorf("ClusterRate of alike tasks = %+v, %v; want Wilson(4, 8) = [%v, %v]", b, err, lo, hi)
	}
	// Every attempt passed: each task counts once, Wilson(2, 2); a task
	// without a scored attempt takes no part.
	lo, hi = Wilson(2, 2)
	if b, err := ClusterRate([]int{2, 2, 0}, []int{2, 2, 0}); err != nil || b.Est != 1 || !near(b.Lo, lo, 1e-12) || b.Hi != hi || b.Tasks != 2 {
		t.Errorf("ClusterRate all passed = %+v, %v; want 1 [%v, %v]", b, err, lo, hi)
	}
	for name, c := range map[string]struct{ k, n []int }{
		"lengths": {[]int{1}, []int{1, 2}}, "too many": {[]int{3}, []int{2}}, "none scored": {[]int{0}, []int{0}},
	} {
		if _, err := ClusterRate(c.k, c.n); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

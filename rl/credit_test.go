package rl

import (
	"math"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

func near(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.IsNaN(want) != math.IsNaN(got) || !math.IsNaN(want) && math.Abs(got-want) > 1e-12 {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

// On handEpisode with γ = λ = 0.5 (advantages as in TestHandCrossGAE),
// by hand: l = 5, n_0 = 3, so the first segment's factor is 0.25² = 0.0625;
// mean |Â| over segment 0's tokens (−0.021484375, 0.0078125, 0.03125) is
// 0.060546875/3, over segment 2's (−0.1875, 0.75) 0.46875. Distances
// N_{>i}: segment 0's tokens p0, p2, p3 have 4, 3, 2 later optimised
// tokens, so G = 0.0625, 0.125, 0.25 against V = 0.5, 0.25, 0.5: mean
// error (0.4375 + 0.125 + 0.25)/3; segment 2's p0, p1: G = 0.5, 1 against
// V = 0.5, 0.25: mean error 0.375.
func TestCreditHand(t *testing.T) {
	cfg := fixedCfg(CrossGAE)
	eps := []episode.Episode{handEpisode()}
	if err := ComputeAdvantages(eps, cfg); err != nil {
		t.Fatal(err)
	}
	c := CreditOf(eps, cfg)
	if c.Episodes != 1 {
		t.Fatalf("episodes = %d, want 1", c.Episodes)
	}
	near(t, "lambda", c.Lambda, 0.5)
	near(t, "first scale", c.FirstScale, 0.0625)
	near(t, "adv first", c.AdvFirst, 0.060546875/3)
	near(t, "adv last", c.AdvLast, 0.46875)
	near(t, "value err first", c.ValueErrFirst, 0.8125/3)
	near(t, "value err last", c.ValueErrLast, 0.375)
	// One boundary: segment 0's last optimised token (p3, V = 0.5) to
	// segment 2's first (p0, V = 0.5); segment 1 is not trainable.
	near(t, "value jump", c.ValueJump, 0)
	ep := handEpisode()
	ep.Segments[1].Trainable = true // V 3, 3: jumps |3 − 0.5| and |0.5 − 3|
	eps = []episode.Episode{ep}
	if err := ComputeAdvantages(eps, cfg); err != nil {
		t.Fatal(err)
	}
	near(t, "value jump through segment 1", CreditOf(eps, cfg).ValueJump, 2.5)

	// independent: the same episode's first segment keeps its local
	// advantages (−0.34375, 0.125, 0.5); the factor cross-gae would apply is
	// still reported.
	cfg = fixedCfg(Independent)
	eps = []episode.Episode{handEpisode()}
	if err := ComputeAdvantages(eps, cfg); err != nil {
		t.Fatal(err)
	}
	c = CreditOf(eps, cfg)
	near(t, "independent first scale", c.FirstScale, 0.0625)
	near(t, "independent adv first", c.AdvFirst, 0.96875/3)
}

// The adaptive λ = 1 − 1/(α·l) with α = 1.5, γ = 1: handEpisode has l = 5,
// so λ = 1 − 1/7.5 and the first factor is λ². A one-segment episode
// (l = 2: λ = 1 − 1/3) counts in Lambda only; a masked one in nothing.
func TestCreditAdaptiveAndCounts(t *testing.T) {
	cfg := DefaultAdvantageConfig()
	one := handEpisode()
	one.ID, one.Segments = "one", one.Segments[2:]
	masked := handEpisode()
	masked.ID, masked.Status = "masked", episode.StatusOverlong
	eps := []episode.Episode{handEpisode(), one, masked}
	if err := ComputeAdvantages(eps, cfg); err != nil {
		t.Fatal(err)
	}
	c := CreditOf(eps, cfg)
	l5, l2 := 1-1/7.5, 1-1/3.0
	if c.Episodes != 1 {
		t.Fatalf("episodes = %d, want 1", c.Episodes)
	}
	near(t, "lambda", c.Lambda, (l5+l2)/2)
	near(t, "first scale", c.FirstScale, l5*l5)
	// γ = 1: every G is R = 1; V of segment 0's tokens 0.5, 0.25, 0.5.
	near(t, "value err first", c.ValueErrFirst, (0.5+0.75+0.5)/3)
}

// Without values (grpo) the value errors are NaN; with no multi-segment
// episode every mean is NaN.
func TestCreditNaN(t *testing.T) {
	cfg := DefaultAdvantageConfig()
	cfg.Estimator = GRPO
	ep := handEpisode()
	for i := range ep.Segments {
		ep.Segments[i].Values = nil
	}
	eps := []episode.Episode{ep}
	if err := ComputeAdvantages(eps, cfg); err != nil {
		t.Fatal(err)
	}
	c := CreditOf(eps, cfg)
	near(t, "value err first", c.ValueErrFirst, math.NaN())
	near(t, "value jump", c.ValueJump, math.NaN())
	if math.IsNaN(c.AdvFirst) || math.IsNaN(c.FirstScale) {
		t.Errorf("grpo: adv first %v, first scale %v, want numbers", c.AdvFirst, c.FirstScale)
	}
	c = CreditOf(nil, cfg)
	near(t, "empty lambda", c.Lambda, math.NaN())
	near(t, "empty first scale", c.FirstScale, math.NaN())
}

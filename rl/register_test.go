package rl

import (
	"math"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

// A newcomer's estimator in one registration: the Monte Carlo advantage
// Â_i = R − V_i on every optimised token (0 elsewhere and on masked
// episodes), G_i = R. Registered, it is parsed, listed, value-based
// (the trainer keeps its critic) and computed by ComputeAdvantages; a
// second registration of the name, and one with both or no functions, are
// refused.
func TestRegisterEstimator(t *testing.T) {
	mc := func(ep *episode.Episode, cfg AdvantageConfig) error {
		masked := Masked(ep, cfg.MaskOverlong)
		for s := range ep.Segments {
			seg := &ep.Segments[s]
			for i := range seg.ResponseIDs {
				seg.Advantages[i], seg.Returns[i] = 0, 0
				if !masked && seg.Trainable && seg.LossMask[i] == 1 {
					seg.Advantages[i], seg.Returns[i] = ep.Reward-seg.Values[i], ep.Reward
				}
			}
		}
		return nil
	}
	if err := RegisterEstimator("test-mc-return", mc, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the registry is the process's: leave it as found
		registered.Lock()
		registered.list = registered.list[:0]
		registered.Unlock()
	})
	if err := RegisterEstimator("test-mc-return", mc, nil); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("second registration: %v", err)
	}
	if err := RegisterEstimator("cross-gae", mc, nil); err == nil {
		t.Fatal("a built-in's name was taken")
	}
	if err := RegisterEstimator("test-both", mc, GRPOAdvantage); err == nil {
		t.Fatal("both functions accepted")
	}
	e, err := ParseEstimator("test-mc-return")
	if err != nil || !e.UsesValues() {
		t.Fatalf("ParseEstimator: %v %v", e, err)
	}
	found := false
	for _, n := range EstimatorNames() {
		found = found || n == "test-mc-return"
	}
	if !found || EstimatorNames()[0] != string(CrossGAE) {
		t.Fatalf("names %v", EstimatorNames())
	}
	ep := episode.Episode{Status: episode.StatusOK, Reward: 1, Segments: []episode.Segment{
		{Kind: episode.KindSummary, Trainable: true, ResponseIDs: []int{1, 2}, LossMask: []int{1, 0}, Values: []float64{0.25, 0.5}},
		{Kind: episode.KindExec, Trainable: true, ResponseIDs: []int{3}, LossMask: []int{1}, Values: []float64{0.75}},
	}}
	eps := []episode.Episode{ep}
	cfg := AdvantageConfig{Estimator: e, Gamma: 1, Alpha: 1.5, MaskOverlong: true}
	if err := ComputeAdvantages(eps, cfg); err != nil {
		t.Fatal(err)
	}
	got := [][]float64{eps[0].Segments[0].Advantages, eps[0].Segments[1].Advantages}
	want := [][]float64{{0.75, 0}, {0.25}}
	for s := range want {
		for i := range want[s] {
			if math.Abs(got[s][i]-want[s][i]) > 1e-15 {
				t.Fatalf("advantages %v, want %v", got, want)
			}
		}
	}
	if err := EpisodeAdvantages(&eps[0], cfg); err != nil {
		t.Fatalf("a value-based registered estimator streams: %v", err)
	}
}

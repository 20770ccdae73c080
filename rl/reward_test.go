package rl

import (
	"math"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

// oneSeg is an episode of one trainable segment of n optimised tokens,
// values 0, in group g.
func oneSeg(id string, r float64, n int) episode.Episode {
	s := episode.Segment{Kind: episode.KindExec, Trainable: true, PromptIDs: []int{1}}
	for range n {
		s.ResponseIDs = append(s.ResponseIDs, 2)
		s.LossMask = append(s.LossMask, 1)
		s.Values = append(s.Values, 0)
	}
	return episode.Episode{ID: id, Task: "t", Group: "g", Reward: r, Status: episode.StatusOK, Segments: []episode.Segment{s}}
}

// Rewards of ±1e308 gave advantages of 0 with no error: (R − mean)² is
// +Inf, so std is +Inf and (R − mean)/(std + ε) = 0; 1e308 twice sums to
// +Inf (NaN advantages). Such rewards, non-finite ones and any beyond
// MaxAbsReward are now an error naming the episode, for every estimator.
func TestAbsurdRewardsRejected(t *testing.T) {
	for _, est := range []Estimator{GRPO, DrGRPO, CrossGAE, Independent, Concat} {
		for _, rs := range [][]float64{{1e308, -1e308}, {1e308, 1e308}, {math.NaN(), 0}, {math.Inf(1), 0}, {0, -2e6}} {
			eps := []episode.Episode{oneSeg("a", rs[0], 2), oneSeg("b", rs[1], 2)}
			cfg := DefaultAdvantageConfig()
			cfg.Estimator = est
			err := ComputeAdvantages(eps, cfg)
			if err == nil || !strings.Contains(err.Error(), "reward") || !strings.Contains(err.Error(), "MaxAbsReward") {
				t.Errorf("%s rewards %v: error %v, advantages %v %v", est, rs, err, eps[0].Segments[0].Advantages, eps[1].Segments[0].Advantages)
			}
		}
	}
	// A masked episode's reward takes no part: it is not checked.
	eps := []episode.Episode{oneSeg("a", 1, 2), oneSeg("b", 0, 2), oneSeg("c", math.NaN(), 2)}
	eps[2].Status = episode.StatusInfraError
	cfg := DefaultAdvantageConfig()
	cfg.Estimator = GRPO
	if err := ComputeAdvantages(eps, cfg); err != nil {
		t.Fatalf("masked NaN reward: %v", err)
	}
	// A non-finite critic value on an optimised token is an error too.
	eps = []episode.Episode{oneSeg("v", 1, 2)}
	eps[0].Segments[0].Values[1] = math.Inf(-1)
	if err := ComputeAdvantages(eps, DefaultAdvantageConfig()); err == nil || !strings.Contains(err.Error(), "values[1]") {
		t.Fatalf("infinite value: %v", err)
	}
}

// At the bound the estimators are exact. By hand, rewards 1e6, −1e6, 0:
// mean 0, std = sqrt((1e12 + 1e12 + 0)/2) = 1e6, so GRPO (ε = 0) gives
// 1, −1, 0 and Dr. GRPO 1e6, −1e6, 0; GAE with γ = λ = 1 and values 0
// gives A = R on every token.
func TestRewardsAtTheBound(t *testing.T) {
	rs := []float64{MaxAbsReward, -MaxAbsReward, 0}
	for _, c := range []struct {
		est  Estimator
		want []float64
	}{
		{GRPO, []float64{1, -1, 0}},
		{DrGRPO, []float64{1e6, -1e6, 0}},
		{Independent, []float64{1e6, -1e6, 0}},
		{Concat, []float64{1e6, -1e6, 0}},
	} {
		eps := []episode.Episode{oneSeg("a", rs[0], 2), oneSeg("b", rs[1], 2), oneSeg("c", rs[2], 2)}
		cfg := DefaultAdvantageConfig()
		cfg.Estimator, cfg.Eps, cfg.Alpha, cfg.Lambda = c.est, 0, 0, 1
		if err := ComputeAdvantages(eps, cfg); err != nil {
			t.Fatalf("%s: %v", c.est, err)
		}
		for i, w := range c.want {
			checkVec(t, string(c.est)+" "+eps[i].ID, eps[i].Segments[0].Advantages, []float64{w, w})
			checkVec(t, string(c.est)+" ret "+eps[i].ID, eps[i].Segments[0].Returns, []float64{rs[i], rs[i]})
		}
	}
}

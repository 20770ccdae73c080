package rl

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

func TestRegistryNames(t *testing.T) {
	if got, want := EstimatorNames(), []string{"cross-gae", "independent", "concat", "grpo", "dr-grpo"}; !slices.Equal(got, want) {
		t.Errorf("EstimatorNames() = %v, want %v", got, want)
	}
	if got, want := LossAggModes(), []string{"token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "episode-mean-token-mean"}; !slices.Equal(got, want) {
		t.Errorf("LossAggModes() = %v, want %v", got, want)
	}
	if string(DefaultAdvantageConfig().Estimator) != EstimatorNames()[0] {
		t.Errorf("default estimator %s is not listed first", DefaultAdvantageConfig().Estimator)
	}
}

func TestRegistryUnknownName(t *testing.T) {
	for _, c := range []struct {
		name   string
		lookup func() error
		valid  []string
	}{
		{"estimator", func() error { _, err := EstimatorByName("gae"); return err }, EstimatorNames()},
		{"parse estimator", func() error { _, err := ParseEstimator("gae"); return err }, EstimatorNames()},
		{"loss agg", func() error { _, err := LossAggByName("mean"); return err }, LossAggModes()},
		{"parse loss agg", func() error { _, err := ParseAggregation("mean"); return err }, LossAggModes()},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.lookup()
			if err == nil {
				t.Fatal("unknown name accepted")
			}
			for _, v := range c.valid {
				if !strings.Contains(err.Error(), v) {
					t.Errorf("error %q does not name %s", err, v)
				}
			}
		})
	}
}

// The function registered under a name computes what ComputeAdvantages
// does for that name, whatever cfg.Estimator says.
func TestEstimatorByNameMatchesComputeAdvantages(t *testing.T) {
	for _, name := range EstimatorNames() {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			a := make([]episode.Episode, 5)
			b := make([]episode.Episode, 5)
			for i := range a {
				a[i] = randomEpisode(rng, 1+rng.IntN(4))
				b[i] = cloneEpisode(a[i])
			}
			cfg := fixedCfg(Estimator(name))
			if err := ComputeAdvantages(a, cfg); err != nil {
				t.Fatal(err)
			}
			f, err := EstimatorByName(name)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Estimator = "not read"
			if err := f(b, cfg); err != nil {
				t.Fatal(err)
			}
			for i := range a {
				for s := range a[i].Segments {
					if !slices.Equal(a[i].Segments[s].Advantages, b[i].Segments[s].Advantages) || !slices.Equal(a[i].Segments[s].Returns, b[i].Segments[s].Returns) {
						t.Fatalf("episode %d segment %d: registry %v/%v, ComputeAdvantages %v/%v", i, s,
							b[i].Segments[s].Advantages, b[i].Segments[s].Returns, a[i].Segments[s].Advantages, a[i].Segments[s].Returns)
					}
				}
			}
		})
	}
}

func TestLossAggByNameMatchesAssignWeights(t *testing.T) {
	toks := []Token{{Ep: 0, Seg: 0}, {Ep: 0, Seg: 1}, {Ep: 0, Seg: 1}, {Ep: 1, Seg: 0}}
	for _, name := range LossAggModes() {
		t.Run(name, func(t *testing.T) {
			want := slices.Clone(toks)
			if err := AssignWeights(want, Aggregation(name)); err != nil {
				t.Fatal(err)
			}
			f, err := LossAggByName(name)
			if err != nil {
				t.Fatal(err)
			}
			got := slices.Clone(toks)
			f(got)
			if !slices.Equal(got, want) {
				t.Errorf("registry %v, AssignWeights %v", got, want)
			}
		})
	}
}

func cloneEpisode(ep episode.Episode) episode.Episode {
	ep.Segments = slices.Clone(ep.Segments)
	for i := range ep.Segments {
		s := &ep.Segments[i]
		s.Advantages, s.Returns = nil, nil
	}
	return ep
}

package rl

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

// handEpisode is the small episode of the hand-computed vectors: three
// segments, mask-0 tokens inside segments 0 and 2, segment 1 not
// trainable. Optimised tokens: segment 0 positions 0, 2, 3 and segment 2
// positions 0, 1, so l = 5, n_0 = 3, n_2 = 2.
func handEpisode() episode.Episode {
	return episode.Episode{
		ID: "hand", Task: "t", Group: "g", Reward: 1, Status: episode.StatusOK,
		Segments: []episode.Segment{
			{Kind: episode.KindExec, Trainable: true, PromptIDs: []int{1}, ResponseIDs: []int{2, 3, 4, 5},
				LossMask: []int{1, 0, 1, 1}, Values: []float64{0.5, 9, 0.25, 0.5}},
			{Kind: episode.KindSummary, Trainable: false, PromptIDs: []int{1}, ResponseIDs: []int{6, 7},
				LossMask: []int{1, 1}, Values: []float64{3, 3}},
			{Kind: episode.KindExec, Trainable: true, PromptIDs: []int{1}, ResponseIDs: []int{8, 9, 10},
				LossMask: []int{1, 1, 0}, Values: []float64{0.5, 0.25, 7}},
		},
	}
}

func fixedCfg(e Estimator) AdvantageConfig {
	c := DefaultAdvantageConfig()
	c.Estimator, c.Gamma, c.Alpha, c.Lambda = e, 0.5, 0, 0.5
	return c
}

func checkVec(t *testing.T, name string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %v, want %v", name, got, want)
		return
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("%s: got %v, want %v", name, got, want)
			return
		}
	}
}

// With γ = λ = 0.5 (γλ = 0.25), R = 1, by hand (positions in order):
//
// segment 2 (last; tokens p0 V=0.5, p1 V=0.25; reward at p1):
//
//	p1: δ = 1 + 0.5·0 − 0.25 = 0.75          A = 0.75                       G = 1
//	p0: δ = 0 + 0.5·0.25 − 0.5 = −0.375      A = −0.375 + 0.25·0.75 = −0.1875  G = 0.3125
//
// segment 0 (tokens p0 V=0.5, p2 V=0.25, p3 V=0.5; reward at p3):
//
//	p3: δ = 1 − 0.5 = 0.5                    A = 0.5                        G = 1
//	p2: δ = 0.5·0.5 − 0.25 = 0               A = 0.25·0.5 = 0.125           G = 0.375
//	p0: δ = 0.5·0.25 − 0.5 = −0.375          A = −0.375 + 0.25·0.125 = −0.34375  G = 0.15625
//
// cross-gae scales segment 0 by (γλ)^{N_{>0}} = 0.25² = 0.0625.
var (
	handIndepAdv0 = []float64{-0.34375, 0, 0.125, 0.5}
	handIndepRet0 = []float64{0.15625, 0, 0.375, 1}
	handAdv2      = []float64{-0.1875, 0.75, 0}
	handRet2      = []float64{0.3125, 1, 0}
	zeros2        = []float64{0, 0}
)

func TestHandIndependent(t *testing.T) {
	eps := []episode.Episode{handEpisode()}
	if err := ComputeAdvantages(eps, fixedCfg(Independent)); err != nil {
		t.Fatal(err)
	}
	s := eps[0].Segments
	checkVec(t, "adv[0]", s[0].Advantages, handIndepAdv0)
	checkVec(t, "ret[0]", s[0].Returns, handIndepRet0)
	checkVec(t, "adv[1]", s[1].Advantages, zeros2)
	checkVec(t, "ret[1]", s[1].Returns, zeros2)
	checkVec(t, "adv[2]", s[2].Advantages, handAdv2)
	checkVec(t, "ret[2]", s[2].Returns, handRet2)
}

func TestHandCrossGAE(t *testing.T) {
	eps := []episode.Episode{handEpisode()}
	if err := ComputeAdvantages(eps, fixedCfg(CrossGAE)); err != nil {
		t.Fatal(err)
	}
	s := eps[0].Segments
	checkVec(t, "adv[0]", s[0].Advantages, []float64{-0.021484375, 0, 0.0078125, 0.03125})
	checkVec(t, "ret[0]", s[0].Returns, handIndepRet0)
	checkVec(t, "adv[1]", s[1].Advantages, zeros2)
	checkVec(t, "adv[2]", s[2].Advantages, handAdv2)
	checkVec(t, "ret[2]", s[2].Returns, handRet2)

	cfg := fixedCfg(CrossGAE)
	cfg.ScaledReturns = true
	eps = []episode.Episode{handEpisode()}
	if err := ComputeAdvantages(eps, cfg); err != nil {
		t.Fatal(err)
	}
	// Â + V: −0.021484375 + 0.5, 0.0078125 + 0.25, 0.03125 + 0.5.
	checkVec(t, "scaled ret[0]", eps[0].Segments[0].Returns, []float64{0.478515625, 0, 0.2578125, 0.53125})
	checkVec(t, "scaled ret[2]", eps[0].Segments[2].Returns, handRet2)
}

// concat, one recursion over s0p0 s0p2 s0p3 s2p0 s2p1, reward at s2p1 only:
//
//	s2p1: A = 0.75; s2p0: A = −0.1875 (as above)
//	s0p3: δ = 0 + 0.5·0.5 − 0.5 = −0.25   A = −0.25 + 0.25·(−0.1875) = −0.296875      G = 0.203125
//	s0p2: δ = 0.5·0.5 − 0.25 = 0          A = 0.25·(−0.296875) = −0.07421875        G = 0.17578125
//	s0p0: δ = 0.5·0.25 − 0.5 = −0.375     A = −0.375 + 0.25·(−0.07421875) = −0.3935546875  G = 0.1064453125
func TestHandConcat(t *testing.T) {
	eps := []episode.Episode{handEpisode()}
	if err := ComputeAdvantages(eps, fixedCfg(Concat)); err != nil {
		t.Fatal(err)
	}
	s := eps[0].Segments
	checkVec(t, "adv[0]", s[0].Advantages, []float64{-0.3935546875, 0, -0.07421875, -0.296875})
	checkVec(t, "ret[0]", s[0].Returns, []float64{0.1064453125, 0, 0.17578125, 0.203125})
	checkVec(t, "adv[1]", s[1].Advantages, zeros2)
	checkVec(t, "adv[2]", s[2].Advantages, handAdv2)
	checkVec(t, "ret[2]", s[2].Returns, handRet2)
}

// Group g: rewards 1 (hand), 0, 0.5, plus an infra_error episode with
// reward 100 that must not count. mean 0.5, sample std
// sqrt((0.25 + 0.25 + 0)/2) = 0.5, so grpo gives the hand episode
// 0.5/(0.5 + ε) and dr-grpo 0.5.
func TestHandGRPO(t *testing.T) {
	other := func(id string, r float64, st episode.Status) episode.Episode {
		return episode.Episode{ID: id, Task: "t", Group: "g", Reward: r, Status: st, Segments: []episode.Segment{
			{Kind: episode.KindExec, Trainable: true, ResponseIDs: []int{1, 2}, LossMask: []int{0, 1}}}}
	}
	for _, c := range []struct {
		name    string
		est     Estimator
		a, a1   float64
		byTask  bool
		groupOf string
	}{
		{"grpo", GRPO, 0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), false, "g"},
		{"dr-grpo", DrGRPO, 0.5, -0.5, false, "g"},
		{"grpo-by-task", GRPO, 0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			eps := []episode.Episode{handEpisode(), other("b", 0, episode.StatusOK), other("c", 0.5, episode.StatusFormatError),
				other("d", 100, episode.StatusInfraError), other("e", 3, episode.StatusOK)}
			eps[4].Group, eps[4].Task = "alone", "other-task"
			if c.byTask {
				for i := range eps {
					eps[i].Group = ""
				}
			}
			cfg := DefaultAdvantageConfig()
			cfg.Estimator, cfg.GroupByTask = c.est, c.byTask
			if err := ComputeAdvantages(eps, cfg); err != nil {
				t.Fatal(err)
			}
			name := string(c.est)
			s := eps[0].Segments
			checkVec(t, name+" adv[0]", s[0].Advantages, []float64{c.a, 0, c.a, c.a})
			checkVec(t, name+" ret[0]", s[0].Returns, []float64{1, 0, 1, 1})
			checkVec(t, name+" adv[1]", s[1].Advantages, zeros2)
			checkVec(t, name+" ret[1]", s[1].Returns, zeros2)
			checkVec(t, name+" adv[2]", s[2].Advantages, []float64{c.a, c.a, 0})
			checkVec(t, name+" b", eps[1].Segments[0].Advantages, []float64{0, c.a1})
			checkVec(t, name+" c", eps[2].Segments[0].Advantages, []float64{0, 0})
			checkVec(t, name+" masked d", eps[3].Segments[0].Advantages, []float64{0, 0})
			checkVec(t, name+" masked d ret", eps[3].Segments[0].Returns, []float64{0, 0})
			checkVec(t, name+" singleton e", eps[4].Segments[0].Advantages, []float64{0, 0})
		})
	}
}

func TestGRPOEmptyGroup(t *testing.T) {
	eps := []episode.Episode{handEpisode()}
	eps[0].Group = ""
	cfg := DefaultAdvantageConfig()
	cfg.Estimator = GRPO
	if err := ComputeAdvantages(eps, cfg); err == nil || !strings.Contains(err.Error(), "empty group") {
		t.Fatalf("got %v, want an empty-group error", err)
	}
}

func TestAdaptiveLambda(t *testing.T) {
	cfg := DefaultAdvantageConfig()
	if got, want := cfg.LambdaFor(5), 1-1/7.5; got != want {
		t.Fatalf("LambdaFor(5) = %v, want %v", got, want)
	}
	if got := cfg.LambdaFor(0); got != 0 {
		t.Errorf("LambdaFor(0) = %v", got)
	}
	cfg.Alpha = 0.1
	if got := cfg.LambdaFor(3); got != 0 {
		t.Errorf("α·l < 1: LambdaFor = %v, want 0 (clamped)", got)
	}
	// The adaptive run equals a fixed run with λ = 1 − 1/(1.5·5).
	a := []episode.Episode{handEpisode()}
	if err := ComputeAdvantages(a, DefaultAdvantageConfig()); err != nil {
		t.Fatal(err)
	}
	fixed := DefaultAdvantageConfig()
	fixed.Alpha, fixed.Lambda = 0, 1-1/7.5
	b := []episode.Episode{handEpisode()}
	if err := ComputeAdvantages(b, fixed); err != nil {
		t.Fatal(err)
	}
	for s := range a[0].Segments {
		checkVec(t, "adaptive", a[0].Segments[s].Advantages, b[0].Segments[s].Advantages)
	}
	// And γλ^{N_{>0}} really uses λ(l=5): segment 0's scale is (γλ)².
	ind := []episode.Episode{handEpisode()}
	fixed.Estimator = Independent
	ComputeAdvantages(ind, fixed)
	lam := 1 - 1/7.5
	for i, x := range ind[0].Segments[0].Advantages {
		if math.Abs(a[0].Segments[0].Advantages[i]-lam*lam*x) > 1e-12 {
			t.Fatalf("cross-gae scale: %v vs %v·%v", a[0].Segments[0].Advantages, lam*lam, ind[0].Segments[0].Advantages)
		}
	}
}

func TestMaskedEpisodes(t *testing.T) {
	for _, c := range []struct {
		status       episode.Status
		maskOverlong bool
		masked       bool
	}{
		{episode.StatusInfraError, false, true},
		{episode.StatusInfraError, true, true},
		{episode.StatusOverlong, true, true},
		{episode.StatusOverlong, false, false},
		{episode.StatusFormatError, true, false},
		{episode.StatusVerifierError, false, true},
		{episode.StatusVerifierError, true, true},
		{episode.StatusOK, true, false},
	} {
		t.Run(fmt.Sprintf("%s,mask_overlong=%v", c.status, c.maskOverlong), func(t *testing.T) {
			for _, name := range EstimatorNames() {
				t.Run(name, func(t *testing.T) {
					est := Estimator(name)
					ep := handEpisode()
					ep.Status = c.status
					if est == GRPO || est == DrGRPO {
						ep.Reward = 5 // against two ok episodes of reward 0 and 1
					}
					eps := []episode.Episode{ep, handEpisode(), handEpisode()}
					eps[1].Reward = 0
					cfg := fixedCfg(est)
					cfg.MaskOverlong = c.maskOverlong
					if err := ComputeAdvantages(eps, cfg); err != nil {
						t.Fatal(err)
					}
					nonzero := false
					for _, s := range eps[0].Segments {
						for i := range s.Advantages {
							nonzero = nonzero || s.Advantages[i] != 0 || s.Returns[i] != 0
						}
					}
					if nonzero == c.masked {
						t.Errorf("%s, %s, mask overlong %v: nonzero advantages %v, want masked %v", est, c.status, c.maskOverlong, nonzero, c.masked)
					}
					toks, err := StepTokens(eps, StepConfig{Agg: TokenMean, MaskOverlong: c.maskOverlong, Critic: true})
					if err == nil {
						t.Fatalf("StepTokens without logprobs: no error")
					}
					for i := range eps {
						for s := range eps[i].Segments {
							eps[i].Segments[s].Logprobs = make([]float64, len(eps[i].Segments[s].ResponseIDs))
						}
					}
					toks, err = StepTokens(eps, StepConfig{Agg: TokenMean, MaskOverlong: c.maskOverlong, Critic: true})
					if err != nil {
						t.Fatal(err)
					}
					want := 10
					if !c.masked {
						want = 15
					}
					if len(toks) != want {
						t.Errorf("%s: %d step tokens, want %d", c.status, len(toks), want)
					}
					for _, tk := range toks {
						if c.masked && tk.Ep == 0 {
							t.Errorf("masked episode token in step: %+v", tk)
						}
						if tk.Weight != 1/float64(want) {
							t.Errorf("token-mean weight %v, want 1/%d", tk.Weight, want)
						}
					}
				})
			}
		})
	}
}

func TestMissingValues(t *testing.T) {
	ep := handEpisode()
	ep.Segments[2].Values = nil
	err := ComputeAdvantages([]episode.Episode{ep}, DefaultAdvantageConfig())
	if err == nil || !strings.Contains(err.Error(), `episode "hand": segments[2].values`) {
		t.Fatalf("got %v", err)
	}
	// Non-trainable segments and masked episodes need no values.
	ep = handEpisode()
	ep.Segments[1].Values = nil
	if err := ComputeAdvantages([]episode.Episode{ep}, DefaultAdvantageConfig()); err != nil {
		t.Fatal(err)
	}
	ep.Status = episode.StatusInfraError
	ep.Segments[0].Values = nil
	if err := ComputeAdvantages([]episode.Episode{ep}, DefaultAdvantageConfig()); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []func(*AdvantageConfig){
		func(c *AdvantageConfig) { c.Estimator = "ppo" },
		func(c *AdvantageConfig) { c.Gamma = 1.5 },
		func(c *AdvantageConfig) { c.Gamma = math.NaN() },
		func(c *AdvantageConfig) { c.Alpha = -1 },
		func(c *AdvantageConfig) { c.Alpha, c.Lambda = 0, 2 },
		func(c *AdvantageConfig) { c.Eps = -1 },
	}
	for i, f := range bad {
		c := DefaultAdvantageConfig()
		f(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: %+v accepted", i, c)
		}
	}
}

// randomEpisode makes an episode with k segments of random lengths, masks,
// trainability and values.
func randomEpisode(rng *rand.Rand, k int) episode.Episode {
	ep := episode.Episode{ID: "r", Task: "t", Group: "g", Reward: rng.NormFloat64(), Status: episode.StatusOK}
	for range k {
		n := 1 + rng.IntN(12)
		s := episode.Segment{Kind: episode.KindExec, Trainable: rng.IntN(4) != 0, ResponseIDs: make([]int, n),
			LossMask: make([]int, n), Values: make([]float64, n), Logprobs: make([]float64, n)}
		for i := range n {
			if rng.IntN(3) != 0 {
				s.LossMask[i] = 1
			}
			s.Values[i] = rng.NormFloat64()
			s.Logprobs[i] = -rng.ExpFloat64()
		}
		ep.Segments = append(ep.Segments, s)
	}
	return ep
}

// textbookGAE is GAE straight from its definition
// A_i = Σ_{ℓ≥0} (γλ)^ℓ δ_{i+ℓ} over a dense trajectory with reward R at
// the end and bootstrap 0; returns A_i + V_i.
func textbookGAE(v []float64, R, gamma, lambda float64) (adv, ret []float64) {
	n := len(v)
	delta := make([]float64, n)
	for i := range n {
		next := 0.0
		if i+1 < n {
			next = v[i+1]
		}
		r := 0.0
		if i == n-1 {
			r = R
		}
		delta[i] = r + gamma*next - v[i]
	}
	adv, ret = make([]float64, n), make([]float64, n)
	for i := range n {
		for l := 0; i+l < n; l++ {
			adv[i] += math.Pow(gamma*lambda, float64(l)) * delta[i+l]
		}
		ret[i] = adv[i] + v[i]
	}
	return adv, ret
}

func TestOneSegmentEstimatorsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		ep := randomEpisode(rng, 1)
		ep.Segments[0].Trainable = true
		gamma, lambda := rng.Float64(), rng.Float64()
		if trial%5 == 0 {
			gamma, lambda = 1, 1
		}
		var got [3]episode.Episode
		for i, est := range []Estimator{CrossGAE, Independent, Concat} {
			got[i] = ep
			got[i].Segments = []episode.Segment{ep.Segments[0]}
			cfg := fixedCfg(est)
			cfg.Gamma, cfg.Lambda = gamma, lambda
			if err := ComputeAdvantages(got[i:i+1], cfg); err != nil {
				t.Fatal(err)
			}
		}
		// Textbook GAE over the optimised tokens only, scattered back.
		s := ep.Segments[0]
		var v []float64
		var pos []int
		for i, m := range s.LossMask {
			if m == 1 {
				v = append(v, s.Values[i])
				pos = append(pos, i)
			}
		}
		ta, tr := textbookGAE(v, ep.Reward, gamma, lambda)
		wantA, wantR := make([]float64, len(s.LossMask)), make([]float64, len(s.LossMask))
		for j, p := range pos {
			wantA[p], wantR[p] = ta[j], tr[j]
		}
		for i := range got {
			checkVec(t, "adv", got[i].Segments[0].Advantages, wantA)
			checkVec(t, "ret", got[i].Segments[0].Returns, wantR)
		}
	}
}

func TestCrossGAEUndiscountedGivesR(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		ep := randomEpisode(rng, 1+rng.IntN(5))
		for s := range ep.Segments {
			clear(ep.Segments[s].Values)
		}
		cfg := fixedCfg(CrossGAE)
		cfg.Gamma, cfg.Lambda = 1, 1
		eps := []episode.Episode{ep}
		if err := ComputeAdvantages(eps, cfg); err != nil {
			t.Fatal(err)
		}
		for _, s := range eps[0].Segments {
			for i, m := range s.LossMask {
				want := 0.0
				if s.Trainable && m == 1 {
					want = ep.Reward
				}
				if s.Advantages[i] != want {
					t.Fatalf("γ=λ=1, V=0: advantage %v, want %v (mask %d trainable %v)", s.Advantages[i], want, m, s.Trainable)
				}
			}
		}
	}
}

// With V = 0 the reward reaching token i of segment s is discounted by
// (γλ)^{N_{>s} + n_s − i}: its distance, in optimised tokens, to the end
// of the whole rollout.
func TestCrossGAEDistanceDiscount(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 50 {
		ep := randomEpisode(rng, 1+rng.IntN(5))
		for s := range ep.Segments {
			clear(ep.Segments[s].Values)
		}
		cfg := fixedCfg(CrossGAE)
		cfg.Gamma, cfg.Lambda = 0.9+0.1*rng.Float64(), 0.9+0.1*rng.Float64()
		eps := []episode.Episode{ep}
		if err := ComputeAdvantages(eps, cfg); err != nil {
			t.Fatal(err)
		}
		gl := cfg.Gamma * cfg.Lambda
		dist := 0 // optimised tokens after the current one, over the whole episode
		for si := len(ep.Segments) - 1; si >= 0; si-- {
			s := eps[0].Segments[si]
			for i := len(s.LossMask) - 1; i >= 0; i-- {
				if !s.Trainable || s.LossMask[i] == 0 {
					continue
				}
				want := math.Pow(gl, float64(dist)) * ep.Reward
				if math.Abs(s.Advantages[i]-want) > 1e-12 {
					t.Fatalf("segment %d pos %d: advantage %v, want (γλ)^%d·R = %v", si, i, s.Advantages[i], dist, want)
				}
				dist++
			}
		}
	}
}

package rl

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

// randomStep builds episodes with advantages and returns, and their step tokens.
func randomStep(t *testing.T, rng *rand.Rand, agg Aggregation) ([]episode.Episode, []Token) {
	t.Helper()
	eps := make([]episode.Episode, 6)
	for i := range eps {
		eps[i] = randomEpisode(rng, 1+rng.IntN(4))
	}
	eps[2].Status = episode.StatusInfraError
	if err := ComputeAdvantages(eps, DefaultAdvantageConfig()); err != nil {
		t.Fatal(err)
	}
	toks, err := StepTokens(eps, StepConfig{Agg: agg, MaskOverlong: true, Critic: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) < 10 {
		t.Fatalf("only %d tokens", len(toks))
	}
	return eps, toks
}

// features is a toy policy: log π_θ(t) = OldLogp_t + θ·f_t, so dL/dθ =
// Σ_t dL/dlogp_t · f_t is what a model's backward pass would accumulate.
func features(n int, rng *rand.Rand) [][3]float64 {
	f := make([][3]float64, n)
	for i := range f {
		for j := range 3 {
			f[i][j] = rng.NormFloat64()
		}
	}
	return f
}

func paramGrad(toks []Token, idx []int, f [][3]float64, theta [3]float64, cfg PPOConfig) (float64, [3]float64, PPOStats) {
	sub := make([]Token, len(idx))
	logp := make([]float64, len(idx))
	for j, i := range idx {
		sub[j] = toks[i]
		logp[j] = toks[i].OldLogp + theta[0]*f[i][0] + theta[1]*f[i][1] + theta[2]*f[i][2]
	}
	loss, g, st, err := PPOLoss(sub, logp, cfg)
	if err != nil {
		panic(err)
	}
	var gt [3]float64
	for j, i := range idx {
		for k := range 3 {
			gt[k] += g[j] * f[i][k]
		}
	}
	return loss, gt, st
}

func TestMicroBatchInvariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	cfg := DefaultPPOConfig()
	cfg.DualClip = 3
	for _, name := range LossAggModes() {
		agg := Aggregation(name)
		_, toks := randomStep(t, rng, agg)
		f := features(len(toks), rng)
		theta := [3]float64{0.3, -0.2, 0.25}
		all := make([]int, len(toks))
		for i := range all {
			all[i] = i
		}
		fullLoss, fullG, fullSt := paramGrad(toks, all, f, theta, cfg)
		if fullSt.ClipFrac() == 0 || fullSt.ClipFrac() == 1 {
			t.Fatalf("clip fraction %v: the test should exercise both branches", fullSt.ClipFrac())
		}
		for k := 1; k <= 7; k++ {
			perm := rng.Perm(len(toks))
			cuts := []int{0}
			for range k - 1 {
				cuts = append(cuts, rng.IntN(len(toks)+1))
			}
			cuts = append(cuts, len(toks))
			slices.Sort(cuts)
			var loss float64
			var g [3]float64
			var st PPOStats
			for b := 0; b+1 < len(cuts); b++ {
				l, gb, sb := paramGrad(toks, perm[cuts[b]:cuts[b+1]], f, theta, cfg)
				loss += l
				for j := range 3 {
					g[j] += gb[j]
				}
				st.Add(sb)
			}
			if math.Abs(loss-fullLoss) > 1e-12 || st.Tokens != fullSt.Tokens || st.ClippedHigh != fullSt.ClippedHigh ||
				math.Abs(st.K3Sum-fullSt.K3Sum) > 1e-9 {
				t.Errorf("%s, %d micro-batches: loss %v vs %v, stats %+v vs %+v", agg, k, loss, fullLoss, st, fullSt)
			}
			for j := range 3 {
				if math.Abs(g[j]-fullG[j]) > 1e-12 {
					t.Errorf("%s, %d micro-batches: gradient %v, want %v", agg, k, g, fullG)
					break
				}
			}
		}
	}
}

// Under token-mean the per-token weight is uniform; seq-mean-token-mean
// gives a token of a short segment more weight than one of a long
// segment, so the same step yields a different gradient (by design). And
// normalising each micro-batch on its own (the mistake AssignWeights'
// whole-step counts avoid) changes the token-mean gradient.
func TestAggregationsDiffer(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	_, tm := randomStep(t, rand.New(rand.NewPCG(11, 12)), TokenMean)
	_, sm := randomStep(t, rand.New(rand.NewPCG(11, 12)), SeqMeanTokenMean)
	f := features(len(tm), rng)
	theta := [3]float64{0.1, 0.1, -0.1}
	all := make([]int, len(tm))
	for i := range all {
		all[i] = i
	}
	_, gTM, _ := paramGrad(tm, all, f, theta, DefaultPPOConfig())
	_, gSM, _ := paramGrad(sm, all, f, theta, DefaultPPOConfig())
	if math.Abs(gTM[0]-gSM[0])+math.Abs(gTM[1]-gSM[1])+math.Abs(gTM[2]-gSM[2]) < 1e-6 {
		t.Errorf("seq-mean-token-mean gradient %v equals token-mean's %v", gSM, gTM)
	}
	// Check seq-mean-token-mean weights: each segment's weights sum to 1/S.
	sum := map[[2]int]float64{}
	for _, tk := range sm {
		sum[[2]int{tk.Ep, tk.Seg}] += tk.Weight
	}
	for k, s := range sum {
		if math.Abs(s-1/float64(len(sum))) > 1e-12 {
			t.Errorf("segment %v weights sum to %v, want 1/%d", k, s, len(sum))
		}
	}

	// Naive per-micro-batch normalisation with unequal micro-batches.
	cut := len(tm) / 4
	naive := append([]Token(nil), tm...)
	AssignWeights(naive[:cut], TokenMean)
	AssignWeights(naive[cut:], TokenMean)
	_, g1, _ := paramGrad(naive, all[:cut], f, theta, DefaultPPOConfig())
	_, g2, _ := paramGrad(naive, all[cut:], f, theta, DefaultPPOConfig())
	naiveSum := g1[0] + g2[0]
	if math.Abs(naiveSum-gTM[0]) < 1e-6 {
		t.Errorf("per-micro-batch normalisation gave the step gradient; the test cannot tell them apart")
	}
}

func TestAssignWeightsModes(t *testing.T) {
	// Episode 0: segment 0 with 1 token, segment 1 with 3; episode 1: segment 0 with 2.
	toks := []Token{{Ep: 0, Seg: 0}, {Ep: 0, Seg: 1}, {Ep: 0, Seg: 1}, {Ep: 0, Seg: 1}, {Ep: 1, Seg: 0}, {Ep: 1, Seg: 0}}
	for _, c := range []struct {
		agg  Aggregation
		want []float64
	}{
		{TokenMean, []float64{1. / 6, 1. / 6, 1. / 6, 1. / 6, 1. / 6, 1. / 6}},
		{SeqMeanTokenMean, []float64{1. / 3, 1. / 9, 1. / 9, 1. / 9, 1. / 6, 1. / 6}},
		{SeqMeanTokenSum, []float64{1. / 3, 1. / 3, 1. / 3, 1. / 3, 1. / 3, 1. / 3}},
		{EpisodeMeanTokenMean, []float64{1. / 8, 1. / 8, 1. / 8, 1. / 8, 1. / 4, 1. / 4}},
	} {
		t.Run(string(c.agg), func(t *testing.T) {
			if err := AssignWeights(toks, c.agg); err != nil {
				t.Fatal(err)
			}
			got := make([]float64, len(toks))
			for i := range toks {
				got[i] = toks[i].Weight
			}
			checkVec(t, string(c.agg), got, c.want)
		})
	}
	if AssignWeights(toks, "mean") == nil {
		t.Error("unknown aggregation accepted")
	}
}

// The clipped objective's gradient is zero exactly where a clip is active:
// Â > 0 and ρ > 1+ε_high, Â < 0 and ρ < 1−ε_low, or (dual clip) Â < 0 and
// ρ > c; elsewhere it is −w ρ Â.
func TestClipGradientZeroExactlyWhereClipped(t *testing.T) {
	cfg := PPOConfig{ClipLow: 0.2, ClipHigh: 0.28, DualClip: 3}
	var toks []Token
	var logp []float64
	for _, a := range []float64{-2, -0.5, 0.5, 2} {
		for r := 0.05; r < 5; r += 0.01 {
			toks = append(toks, Token{OldLogp: -1, Adv: a, Weight: 0.5})
			logp = append(logp, -1+math.Log(r))
		}
	}
	_, g, st, err := PPOLoss(toks, logp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	clipped := 0
	for i, tk := range toks {
		rho := math.Exp(logp[i] - tk.OldLogp)
		active := (tk.Adv > 0 && rho > 1.28) || (tk.Adv < 0 && rho < 0.8) || (tk.Adv < 0 && rho > 3)
		if active {
			clipped++
			if g[i] != 0 {
				t.Errorf("Â=%v ρ=%v: clip active but gradient %v", tk.Adv, rho, g[i])
			}
		} else if want := -0.5 * rho * tk.Adv; math.Abs(g[i]-want) > 1e-12 {
			t.Errorf("Â=%v ρ=%v: gradient %v, want −wρÂ = %v", tk.Adv, rho, g[i], want)
		}
	}
	if st.ClippedHigh+st.ClippedLow+st.DualClipped != clipped || clipped == 0 {
		t.Errorf("stats %+v, %d clipped", st, clipped)
	}
}

func TestPPOLossValuesAndFiniteDifference(t *testing.T) {
	cfg := PPOConfig{ClipLow: 0.2, ClipHigh: 0.28, DualClip: 3}
	// ρ, Â → ℓ by the formula.
	cases := []struct{ rho, a, want float64 }{
		{1.1, 2, -2.2},           // unclipped
		{1.5, 2, -1.28 * 2},      // clipped high
		{0.5, 2, -0.5 * 2},       // Â > 0, low ρ: unclipped
		{0.5, -2, 0.8 * 2},       // clipped low
		{2, -2, 4},               // Â < 0, high ρ: unclipped (−ρÂ)
		{4, -2, 6},               // dual clip: −cÂ
		{1, 0, 0},                // no advantage
		{1.28, 1, -1.28},         // tie at the boundary
		{0.8 * 0.999, -1, 0.8},   // just below 1−ε_low
		{1.2, 1e-300, -1.2e-300}, // tiny advantage
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("rho=%v,adv=%v", c.rho, c.a), func(t *testing.T) {
			toks := []Token{{OldLogp: -2, Adv: c.a, Weight: 1}}
			loss, _, _, err := PPOLoss(toks, []float64{-2 + math.Log(c.rho)}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(loss-c.want) > 1e-12 {
				t.Errorf("ρ=%v Â=%v: ℓ = %v, want %v", c.rho, c.a, loss, c.want)
			}
		})
	}

	rng := rand.New(rand.NewPCG(13, 14))
	_, toks := randomStep(t, rng, SeqMeanTokenMean)
	logp := make([]float64, len(toks))
	for i := range toks {
		logp[i] = toks[i].OldLogp + 0.4*rng.NormFloat64()
	}
	_, g, _, err := PPOLoss(toks, logp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const h = 1e-6
	checked := 0
	for i := range toks {
		rho := math.Exp(logp[i] - toks[i].OldLogp)
		// Skip points within h of a kink.
		if math.Abs(rho-0.8) < 1e-4 || math.Abs(rho-1.28) < 1e-4 || math.Abs(rho-3) < 1e-4 {
			continue
		}
		lp, lm := append([]float64(nil), logp...), append([]float64(nil), logp...)
		lp[i] += h
		lm[i] -= h
		Lp, _, _, _ := PPOLoss(toks, lp, cfg)
		Lm, _, _, _ := PPOLoss(toks, lm, cfg)
		fd := (Lp - Lm) / (2 * h)
		if math.Abs(fd-g[i]) > 1e-6*(1+math.Abs(g[i])) {
			t.Errorf("token %d: analytic %v, finite difference %v", i, g[i], fd)
		}
		checked++
	}
	if checked < len(toks)/2 {
		t.Fatalf("only %d of %d tokens checked", checked, len(toks))
	}
}

func TestPPOStatsKL(t *testing.T) {
	toks := []Token{{OldLogp: -1, Adv: 1, Weight: 1}, {OldLogp: -1, Adv: 1, Weight: 1}}
	logp := []float64{-1 + math.Log(1.5), -1 + math.Log(0.5)}
	_, _, st, err := PPOLoss(toks, logp, DefaultPPOConfig())
	if err != nil {
		t.Fatal(err)
	}
	k3 := ((1.5 - 1 - math.Log(1.5)) + (0.5 - 1 - math.Log(0.5))) / 2
	if math.Abs(st.ApproxKL()-k3) > 1e-15 || math.Abs(st.K1Sum-(-math.Log(1.5)-math.Log(0.5))) > 1e-15 {
		t.Errorf("KL stats %+v, want k3 mean %v", st, k3)
	}
	if st.ClipFrac() != 0.5 || st.ClippedHigh != 1 || st.RatioMax != 1.5 {
		t.Errorf("clip stats %+v", st)
	}
}

func TestPPOLossBadInput(t *testing.T) {
	toks := []Token{{OldLogp: -1, Adv: 1, Weight: 1}}
	if _, _, _, err := PPOLoss(toks, nil, DefaultPPOConfig()); err == nil {
		t.Error("length mismatch accepted")
	}
	if _, _, _, err := PPOLoss(toks, []float64{math.NaN()}, DefaultPPOConfig()); err == nil {
		t.Error("NaN logprob accepted")
	}
	if _, _, _, err := PPOLoss(toks, []float64{-1}, PPOConfig{ClipLow: 0.2, ClipHigh: 0.2, DualClip: 0.5}); err == nil {
		t.Error("dual clip c ≤ 1 accepted")
	}
	// A huge log-ratio is clamped: finite loss, zero gradient.
	l, g, st, err := PPOLoss([]Token{{OldLogp: -1000, Adv: -1, Weight: 1}}, []float64{0}, DefaultPPOConfig())
	if err != nil || math.IsInf(l, 0) || g[0] != 0 || st.LogRatioClamped != 1 {
		t.Errorf("clamped: loss %v grad %v stats %+v err %v", l, g, st, err)
	}
}

func TestValueLoss(t *testing.T) {
	cfg := ValueConfig{ValueClip: 0.5}
	// G = 1, V_old = 0.
	cases := []struct{ v, want, grad float64 }{
		{0.25, 0.5 * 0.75 * 0.75, -0.75}, // inside the clip range
		{2, 0.5 * 1, 1},                  // beyond: unclipped error 1 vs clipped 0.5 → unclipped wins
		{-1, 0.5 * 4, -2},                // below: unclipped 2 vs clipped |−0.5−1| = 1.5 → unclipped
		{1.2, 0.5 * 0.25, 0},             // V overshoots G... clipped 0.5: |0.5−1| = 0.5 > 0.2 → clipped wins, grad 0
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("V=%v", c.v), func(t *testing.T) {
			toks := []Token{{Return: 1, OldValue: 0, Weight: 1}}
			loss, g, _, err := ValueLoss(toks, []float64{c.v}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(loss-c.want) > 1e-12 || math.Abs(g[0]-c.grad) > 1e-12 {
				t.Errorf("V=%v: loss %v grad %v, want %v %v", c.v, loss, g[0], c.want, c.grad)
			}
		})
	}
	rng := rand.New(rand.NewPCG(15, 16))
	_, toks := randomStep(t, rng, TokenMean)
	v := make([]float64, len(toks))
	for i := range v {
		v[i] = toks[i].OldValue + rng.NormFloat64()
	}
	for _, clip := range []float64{0, 0.5} {
		t.Run(fmt.Sprintf("finite-difference,clip=%v", clip), func(t *testing.T) {
			_, g, st, err := ValueLoss(toks, v, ValueConfig{ValueClip: clip})
			if err != nil {
				t.Fatal(err)
			}
			if clip == 0 && st.Clipped != 0 || clip > 0 && st.Clipped == 0 {
				t.Errorf("clip %v: %d clipped", clip, st.Clipped)
			}
			const h = 1e-6
			for i := range toks {
				d := v[i] - toks[i].OldValue
				if math.Abs(math.Abs(d)-clip) < 1e-4 {
					continue
				}
				vp, vm := append([]float64(nil), v...), append([]float64(nil), v...)
				vp[i] += h
				vm[i] -= h
				Lp, _, _, _ := ValueLoss(toks, vp, ValueConfig{ValueClip: clip})
				Lm, _, _, _ := ValueLoss(toks, vm, ValueConfig{ValueClip: clip})
				if fd := (Lp - Lm) / (2 * h); math.Abs(fd-g[i]) > 1e-6*(1+math.Abs(g[i])) {
					t.Errorf("clip %v token %d: analytic %v, finite difference %v", clip, i, g[i], fd)
				}
			}
		})
	}
	if _, _, _, err := ValueLoss(toks, v[:1], cfg); err == nil {
		t.Error("length mismatch accepted")
	}
}

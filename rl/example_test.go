package rl_test

import (
	"fmt"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/rl"
)

// The trainer's flow for one optimiser step: advantages, step tokens with
// whole-step weights, then per micro-batch the engine's new log-probs in,
// dL/dlogπ out.
func Example() {
	eps := []episode.Episode{{
		ID: "e", Task: "t", Reward: 1, Status: episode.StatusOK,
		Segments: []episode.Segment{
			{Kind: episode.KindSummary, Trainable: true, ResponseIDs: []int{5, 6, 7}, LossMask: []int{1, 0, 1},
				Logprobs: []float64{-1, 0, -2}, Values: []float64{0.5, 0, 0.5}},
			{Kind: episode.KindExec, Trainable: true, ResponseIDs: []int{8, 9}, LossMask: []int{1, 1},
				Logprobs: []float64{-0.5, -0.5}, Values: []float64{0.5, 0.5}},
		},
	}}
	cfg := rl.DefaultAdvantageConfig()
	cfg.Alpha, cfg.Lambda = 0, 0.5 // fixed λ
	if err := rl.ComputeAdvantages(eps, cfg); err != nil {
		panic(err)
	}
	fmt.Println("advantages:", eps[0].Segments[0].Advantages, eps[0].Segments[1].Advantages)

	toks, err := rl.StepTokens(eps, rl.StepConfig{Agg: rl.TokenMean, MaskOverlong: true})
	if err != nil {
		panic(err)
	}
	// Two micro-batches; the engine would score each and pass its logp.
	var total float64
	for _, mb := range [][]rl.Token{toks[:1], toks[1:]} {
		logp := make([]float64, len(mb))
		for i, t := range mb {
			logp[i] = t.OldLogp + 0.1 // the policy moved
		}
		loss, grad, st, err := rl.PPOLoss(mb, logp, rl.DefaultPPOConfig())
		if err != nil {
			panic(err)
		}
		total += loss
		fmt.Printf("micro-batch: %d tokens, dL/dlogp %.4f, clip fraction %.2f\n", st.Tokens, grad, st.ClipFrac())
	}
	// Checked by hand: γλ = 0.5, segment 0 scaled by 0.5² (two later
	// tokens); w = 1/4, ρ = e^0.1; dL/dlogp = −wρÂ; L = −wρ·ΣÂ.
	fmt.Printf("step loss %.4f\n", total)
	// Output:
	// advantages: [0.0625 0 0.125] [0.25 0.5]
	// micro-batch: 1 tokens, dL/dlogp [-0.0173], clip fraction 0.00
	// micro-batch: 3 tokens, dL/dlogp [-0.0345 -0.0691 -0.1381], clip fraction 0.00
	// step loss -0.2590
}

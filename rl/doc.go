// Package rl holds the algorithm core of CompactionRL (docs/design.md §1) as
// pure functions: advantage estimators over compacted episodes, the
// weights that aggregate per-token losses into one optimiser step's loss,
// and the PPO policy and value objectives with their gradients. It does
// no I/O and knows no model: losses take per-token log-probabilities (or
// values) and return the loss and its gradient with respect to each of
// them, so any engine, built-in or external, can back-propagate.
//
// Data flow: episodes with critic Values → ComputeAdvantages fills
// Advantages and Returns → StepTokens flattens one optimiser step's
// optimised tokens with their weights → the trainer scores the tokens
// (micro-batch by micro-batch) and calls PPOLoss / ValueLoss → it
// back-propagates dL/dlogπ and dL/dV. CreditOf measures, on the same
// episodes, how the advantages reached their segments (the λ used, the
// factor cross-gae gives the first segment, |Â| and the critic's error on
// the first and last segment): the trainer logs it every iteration.
//
// Every estimator and every loss aggregation mode is one named function
// carrying its equation (CrossGAEAdvantage, IndependentGAEAdvantage,
// ConcatGAEAdvantage, GRPOAdvantage, DrGRPOAdvantage; TokenMeanWeights,
// SeqMeanTokenMeanWeights, SeqMeanTokenSumWeights,
// EpisodeMeanTokenMeanWeights), registered under its name:
// EstimatorNames and EstimatorByName, LossAggModes and LossAggByName give
// configurations and command lines one list of valid names.
//
// # Which tokens count
//
// An optimised token is a LossMask-1 response token of a trainable
// segment of an unmasked episode. Episodes with status infra_error are
// always masked, overlong ones when the MaskOverlong switch is on (the
// default): they get advantage 0 and return 0, take no part in GRPO group
// statistics, and StepTokens leaves them out, so they contribute no
// gradient and do not count in any normaliser. Mask-0 tokens and
// non-trainable segments likewise: advantage 0, return 0, no token.
//
// # Advantages
//
// For segment s with optimised tokens 1 … n_s (mask-0 tokens are skipped:
// the recursion passes through them), values V_i and reward r_{n_s} = R,
// r_i = 0 otherwise:
//
//	δ_i = r_i + γ V_{i+1} − V_i           (V_{n_s+1} = 0)
//	A^loc_i = Σ_{ℓ=0}^{n_s−i} (γλ)^ℓ δ_{i+ℓ}  = δ_i + γλ A^loc_{i+1}
//
// cross-gae:   Â_{s,i} = (γλ)^{N_{>s}} A^loc_i, N_{>s} the optimised tokens
// of all later trainable segments; returns (critic targets) A^loc_i + V_i,
// or Â_{s,i} + V_i with ScaledReturns.
// independent: Â_{s,i} = A^loc_i; returns A^loc_i + V_i.
// concat:      the same recursion once over the optimised tokens of all
// trainable segments in order, so V_{n_s+1} is the next trainable
// segment's first optimised value, and R is paid only at the episode's
// very last optimised token; returns A + V.
//
// λ is fixed, or length-adaptive λ = max(0, 1 − 1/(α·l)) with l the
// episode's optimised-token count (episode.NumOptimised).
//
// grpo:    Â = (R − mean_G R)/(std_G R + ε) over the episode's group G
// (its Group, or its Task), std the sample standard deviation
// sqrt(Σ(R − mean)²/(n−1)) as torch.std (verl) computes it;
// dr-grpo: Â = R − mean_G R. A group of one unmasked episode gets Â = 0.
// The same Â goes to every optimised token of the episode; returns R.
//
// # Loss aggregation
//
// The step loss is L = Σ_t w_t ℓ_t over the step's token set M, with w_t
// from counts over the WHOLE step (AssignWeights), so that splitting the
// step into micro-batches or workers changes nothing:
//
//	token-mean              w = 1/|M|           (the paper's choice)
//	seq-mean-token-mean     w = 1/(S·n_s)       (mean per segment, then over the S segments)
//	seq-mean-token-sum      w = 1/S
//	episode-mean-token-mean w = 1/(E·n_e)       (mean per episode, then over the E episodes)
//
// # Policy loss
//
// With ρ = exp(log π_θ − log π_old) (log ρ clamped to ±MaxLogRatio, zero
// gradient beyond):
//
//	ℓ = −min(ρ Â, clip(ρ, 1−ε_low, 1+ε_high) Â)
//	dual clip (Ye et al. 2020), Â < 0:  ℓ = min(ℓ, −c Â), c > 1
//	dℓ/dlog π_θ = −ρ Â on the unclipped branch, 0 where a clip is active
//
// Statistics: clip fraction (tokens whose gradient the clip removed) and
// approximate KL(π_old ‖ π_θ) by the k3 estimator ρ − 1 − log ρ (k1 = −log ρ
// is kept too).
//
// # Value loss
//
//	V_c = V_old + clip(V − V_old, −ε_v, ε_v)
//	ℓ_V = ½ max((V − G)², (V_c − G)²),   dℓ_V/dV = V − G, or 0 where the clipped error wins
//
// The ½ makes the gradient the plain error V − G.
package rl

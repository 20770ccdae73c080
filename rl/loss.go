package rl

import (
	"fmt"
	"math"

	"github.com/compactrl/compactrl/episode"

	"github.com/compactrl/compactrl/internal/field"
)

// Token is one optimised token of an optimiser step: where it sits
// (Episodes[Ep].Segments[Seg].ResponseIDs[Pos]) and what the losses need.
// A micro-batch is any subset of a step's tokens; because Weight is fixed
// for the whole step, the micro-batches' losses and gradients add up to
// the step's.
type Token struct {
	Ep, Seg, Pos int
	// OldLogp is log π_old of the token (the sampler's logprob).
	OldLogp float64
	// Adv is the advantage Â.
	Adv float64
	// Return is the critic target G; OldValue the value V_old at sampling.
	Return, OldValue float64
	// Weight is w, the token's weight in the step loss Σ w_t ℓ_t.
	Weight float64
}

// StepConfig configures StepTokens.
type StepConfig struct {
	Agg Aggregation
	// MaskOverlong leaves overlong episodes out (infra_error always is).
	MaskOverlong bool
	// Critic requires Values and Returns on every trainable segment.
	Critic bool
}

// StepTokens collects the tokens of one optimiser step: every mask-1
// token of every trainable segment of every unmasked episode, in episode,
// segment, position order, with weights from AssignWeights. Trainable
// segments with optimised tokens must carry Logprobs and Advantages (and
// Values and Returns when cfg.Critic).
func StepTokens(eps []episode.Episode, cfg StepConfig) ([]Token, error) {
	if _, err := ParseAggregation(string(cfg.Agg)); err != nil {
		return nil, err
	}
	var toks []Token
	for ei := range eps {
		ep := &eps[ei]
		if Masked(ep, cfg.MaskOverlong) {
			continue
		}
		for si := range ep.Segments {
			s := &ep.Segments[si]
			if !s.Trainable {
				continue
			}
			n := len(s.ResponseIDs)
			if len(s.LossMask) != n {
				return nil, fmt.Errorf("episode %q: segments[%d].loss_mask: length %d, want %d", ep.ID, si, len(s.LossMask), n)
			}
			if s.NumOptimised() == 0 {
				continue
			}
			need := []namedSlice{{"logprobs", s.Logprobs}, {"advantages", s.Advantages}}
			if cfg.Critic {
				need = append(need, namedSlice{"values", s.Values}, namedSlice{"returns", s.Returns})
			}
			for _, f := range need {
				if len(f.v) != n {
					return nil, fmt.Errorf("episode %q: segments[%d].%s: length %d, want %d", ep.ID, si, f.name, len(f.v), n)
				}
			}
			for t, m := range s.LossMask {
				if m == 0 {
					continue
				}
				tok := Token{Ep: ei, Seg: si, Pos: t, OldLogp: s.Logprobs[t], Adv: s.Advantages[t]}
				if cfg.Critic {
					tok.Return, tok.OldValue = s.Returns[t], s.Values[t]
				}
				toks = append(toks, tok)
			}
		}
	}
	return toks, AssignWeights(toks, cfg.Agg)
}

type namedSlice struct {
	name string
	v    []float64
}

// PPOConfig configures PPOLoss. It is the one definition of these
// settings: the YAML keys are those of a training config's rl section
// (train.RLConfig inlines this struct), and Validate the one check of
// their ranges, its errors naming each by its key.
type PPOConfig struct {
	// ClipLow and ClipHigh are ε_low and ε_high: ρ is clipped to
	// [1−ε_low, 1+ε_high].
	ClipLow  float64 `yaml:"clip_low"`
	ClipHigh float64 `yaml:"clip_high"`
	// DualClip is the dual-clip constant c > 1; 0 turns it off.
	DualClip float64 `yaml:"dual_clip"`
}

// DefaultPPOConfig is the paper's setting: ε_low 0.2, ε_high 0.28, no dual clip.
func DefaultPPOConfig() PPOConfig { return PPOConfig{ClipLow: 0.2, ClipHigh: 0.28} }

// Validate checks the configuration's ranges.
func (c PPOConfig) Validate() error {
	if !(c.ClipLow >= 0 && c.ClipLow < 1) {
		return field.Errorf("clip_low", "%v must be in [0, 1)", c.ClipLow)
	}
	if !(c.ClipHigh >= 0) || math.IsInf(c.ClipHigh, 0) {
		return field.Errorf("clip_high", "%v: want a finite value ≥ 0", c.ClipHigh)
	}
	if (c.DualClip != 0 && !(c.DualClip > 1)) || math.IsInf(c.DualClip, 0) {
		return field.Errorf("dual_clip", "%v: want c > 1, or 0 for off", c.DualClip)
	}
	return nil
}

// MaxLogRatio bounds |log ρ| before exponentiation; beyond it the token's
// gradient is 0 (as torch's clamp gives).
const MaxLogRatio = 20

// PPOStats are per-token statistics of one PPOLoss call; Add combines the
// calls of one step's micro-batches.
type PPOStats struct {
	// Tokens is the number of tokens seen.
	Tokens int
	// ClippedHigh counts tokens with Â > 0 and ρ > 1+ε_high, ClippedLow
	// tokens with Â < 0 and ρ < 1−ε_low: the clipped branch is the strict
	// minimum and the gradient is 0. DualClipped counts tokens with Â < 0
	// and ρ > c. LogRatioClamped counts |log ρ| > MaxLogRatio.
	ClippedHigh, ClippedLow, DualClipped, LogRatioClamped int
	// K1Sum and K3Sum sum the estimators k1 = −log ρ and
	// k3 = ρ − 1 − log ρ of KL(π_old ‖ π_θ), tokens sampled from π_old.
	K1Sum, K3Sum float64
	// RatioMax is the largest ρ seen.
	RatioMax float64
}

// Add accumulates o into s.
func (s *PPOStats) Add(o PPOStats) {
	s.Tokens += o.Tokens
	s.ClippedHigh += o.ClippedHigh
	s.ClippedLow += o.ClippedLow
	s.DualClipped += o.DualClipped
	s.LogRatioClamped += o.LogRatioClamped
	s.K1Sum += o.K1Sum
	s.K3Sum += o.K3Sum
	s.RatioMax = math.Max(s.RatioMax, o.RatioMax)
}

// ClipFrac is the fraction of tokens whose gradient the clip removed
// (ClippedHigh + ClippedLow, dual clip not included).
func (s PPOStats) ClipFrac() float64 { return frac(s.ClippedHigh+s.ClippedLow, s.Tokens) }

// DualClipFrac is the fraction of tokens the dual clip capped.
func (s PPOStats) DualClipFrac() float64 { return frac(s.DualClipped, s.Tokens) }

// ApproxKL is the mean k3 estimate of KL(π_old ‖ π_θ) (non-negative, low
// variance; Schulman 2020).
func (s PPOStats) ApproxKL() float64 {
	if s.Tokens == 0 {
		return 0
	}
	return s.K3Sum / float64(s.Tokens)
}

func frac(n, d int) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

// PPOLoss returns the weighted PPO clipped surrogate L = Σ_t w_t ℓ_t over
// tokens, with logp[t] = log π_θ of tokens[t], and dL/dlogp[t]:
//
//	ρ = exp(logp − OldLogp)
//	ℓ = −min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)Â)
//	dual clip (Â < 0):  ℓ ← min(ℓ, −cÂ)
//	dℓ/dlogp = −ρÂ where the unclipped branch is active, else 0
//
// Ties (ρ at a clip boundary) count as unclipped. Summing the results over
// a partition of a step's tokens gives the step's loss and gradient.
func PPOLoss(tokens []Token, logp []float64, cfg PPOConfig) (loss float64, grad []float64, st PPOStats, err error) {
	if len(logp) != len(tokens) {
		return 0, nil, st, fmt.Errorf("ppo loss: %d logprobs for %d tokens", len(logp), len(tokens))
	}
	if err := cfg.Validate(); err != nil {
		return 0, nil, st, fmt.Errorf("ppo loss: %w", err)
	}
	lo, hi, c := 1-cfg.ClipLow, 1+cfg.ClipHigh, cfg.DualClip
	grad = make([]float64, len(tokens))
	st.Tokens = len(tokens)
	for i := range tokens {
		t := &tokens[i]
		lr := logp[i] - t.OldLogp
		if math.IsNaN(lr) || math.IsInf(logp[i], 0) {
			return 0, nil, st, fmt.Errorf("ppo loss: token %d (episode %d segment %d position %d): non-finite log-ratio (logp %v, old %v)", i, t.Ep, t.Seg, t.Pos, logp[i], t.OldLogp)
		}
		clamped := false
		if lr > MaxLogRatio {
			lr, clamped = MaxLogRatio, true
		} else if lr < -MaxLogRatio {
			lr, clamped = -MaxLogRatio, true
		}
		rho := math.Exp(lr)
		st.K1Sum -= lr
		st.K3Sum += rho - 1 - lr
		st.RatioMax = math.Max(st.RatioMax, rho)
		if clamped {
			st.LogRatioClamped++
		}
		a := t.Adv
		var l, g float64
		switch {
		case a > 0 && rho > hi:
			l = -hi * a
			st.ClippedHigh++
		case a < 0 && rho < lo:
			l = -lo * a
			st.ClippedLow++
		case a < 0 && c != 0 && rho > c:
			l = -c * a
			st.DualClipped++
		default:
			l, g = -rho*a, -rho*a
		}
		if clamped {
			g = 0
		}
		loss += t.Weight * l
		grad[i] = t.Weight * g
	}
	return loss, grad, st, nil
}

// ValueConfig configures ValueLoss; its YAML key is that of a training
// config's rl section (train.RLConfig inlines it).
type ValueConfig struct {
	// ValueClip is ε_v: V is clipped to [V_old − ε_v, V_old + ε_v]; 0
	// turns clipping off.
	ValueClip float64 `yaml:"value_clip"`
}

// Validate checks the configuration's range.
func (c ValueConfig) Validate() error {
	if !(c.ValueClip >= 0) || math.IsInf(c.ValueClip, 0) {
		return field.Errorf("value_clip", "%v: want a finite value ≥ 0 (0: off)", c.ValueClip)
	}
	return nil
}

// ValueStats are per-token statistics of one ValueLoss call.
type ValueStats struct {
	Tokens int
	// Clipped counts tokens where the clipped error is the strict maximum
	// (gradient 0).
	Clipped int
	// SqErrSum sums the unclipped (V − G)².
	SqErrSum float64
}

// ValueLoss returns the weighted clipped value loss L = Σ_t w_t ℓ_t, with
// v[t] the critic's value V of tokens[t] and G its Return, and dL/dv[t]:
//
//	V_c = V_old + clip(V − V_old, −ε_v, ε_v)
//	ℓ = ½ max((V − G)², (V_c − G)²)
//	dℓ/dV = V − G where the unclipped error is the maximum, else 0
func ValueLoss(tokens []Token, v []float64, cfg ValueConfig) (loss float64, grad []float64, st ValueStats, err error) {
	if len(v) != len(tokens) {
		return 0, nil, st, fmt.Errorf("value loss: %d values for %d tokens", len(v), len(tokens))
	}
	if err := cfg.Validate(); err != nil {
		return 0, nil, st, fmt.Errorf("value loss: %w", err)
	}
	grad = make([]float64, len(tokens))
	st.Tokens = len(tokens)
	for i := range tokens {
		t := &tokens[i]
		if math.IsNaN(v[i]) || math.IsInf(v[i], 0) {
			return 0, nil, st, fmt.Errorf("value loss: token %d (episode %d segment %d position %d): non-finite value %v", i, t.Ep, t.Seg, t.Pos, v[i])
		}
		d := v[i] - t.Return
		e := d * d
		st.SqErrSum += e
		g := d
		if cfg.ValueClip > 0 {
			vc := t.OldValue + math.Max(-cfg.ValueClip, math.Min(cfg.ValueClip, v[i]-t.OldValue))
			dc := vc - t.Return
			if dc*dc > e {
				e, g = dc*dc, 0
				st.Clipped++
			}
		}
		loss += t.Weight * 0.5 * e
		grad[i] = t.Weight * g
	}
	return loss, grad, st, nil
}

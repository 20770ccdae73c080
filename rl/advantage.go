package rl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/internal/field"
)

// AdvantageConfig configures ComputeAdvantages. It is the one definition
// of these settings: the YAML keys are those of a training config's rl
// section (train.RLConfig inlines this struct), the flags of `compactrl
// advantages` are derived from its yaml and help tags (internal/flagbind),
// and Validate is the one check of their ranges, its errors naming each
// setting by its key.
type AdvantageConfig struct {
	Estimator Estimator `yaml:"estimator" help:"advantage estimator, a registered name"` // one of EstimatorNames()
	// Gamma is the discount γ ∈ [0, 1]. γ = 0 is a legal discount: every
	// optimised token's advantage is then its own δ_i = r_i − V_i, and the
	// cross-segment factor (γλ)^{N_{>s}} is 0 for all but the last
	// trainable segment (docs/design.md §1.7).
	Gamma float64 `yaml:"gamma" help:"discount γ in [0, 1] (0 is legal: each token's advantage is its own δ)"`
	// Alpha > 0 selects the length-adaptive λ = max(0, 1 − 1/(α·l)), l the
	// episode's optimised-token count; Alpha == 0 selects the fixed Lambda.
	Alpha float64 `yaml:"alpha" help:"length-adaptive λ = 1 − 1/(α·l), l the episode's optimised tokens (0: the fixed lambda)"`
	// Lambda is the fixed λ ∈ [0, 1], used when Alpha == 0; it must be 0
	// while Alpha > 0 (it would be ignored).
	Lambda float64 `yaml:"lambda" help:"fixed GAE λ in [0, 1], used with alpha 0"`
	// Eps is the ε of GRPO's (R − mean)/(std + ε).
	Eps float64 `yaml:"eps" help:"ε of grpo's (R − mean)/(std + ε)"`
	// GroupByTask groups GRPO episodes by Task instead of Group.
	GroupByTask bool `yaml:"group_by_task" help:"grpo groups: episodes of one task (default: the group field)"`
	// MaskOverlong masks overlong episodes (infra_error ones always are).
	MaskOverlong bool `yaml:"mask_overlong" help:"give overlong episodes advantages; infra_error and verifier_error episodes are always masked"`
	// ScaledReturns makes the critic target Â + V instead of A^loc + V
	// (the two differ only under cross-gae).
	ScaledReturns bool `yaml:"scaled_returns" help:"critic target Â + V instead of A^loc + V (cross-gae)"`
}

// DefaultAdvantageConfig is docs/design.md §1.7's default: cross-gae, γ = 1,
// λ = 1 − 1/(1.5·l), GRPO ε = 1e-6, overlong episodes masked.
func DefaultAdvantageConfig() AdvantageConfig {
	return AdvantageConfig{Estimator: CrossGAE, Gamma: 1, Alpha: 1.5, Eps: 1e-6, MaskOverlong: true}
}

// Validate checks the configuration's ranges. Its errors name the setting
// by its YAML key ("gamma: …").
func (c AdvantageConfig) Validate() error {
	if _, err := ParseEstimator(string(c.Estimator)); err != nil {
		return field.Under("estimator", err)
	}
	return c.validateParams()
}

// validateParams checks the ranges of everything but the estimator's name,
// which the named estimator functions do not read.
func (c AdvantageConfig) validateParams() error {
	switch {
	case !(c.Gamma >= 0 && c.Gamma <= 1):
		return field.Errorf("gamma", "%v must be in [0, 1]", c.Gamma)
	case !(c.Alpha >= 0) || math.IsInf(c.Alpha, 0):
		return field.Errorf("alpha", "%v: want a finite value ≥ 0 (0 selects the fixed lambda)", c.Alpha)
	case !(c.Lambda >= 0 && c.Lambda <= 1):
		return field.Errorf("lambda", "%v must be in [0, 1]", c.Lambda)
	case c.Alpha > 0 && c.Lambda != 0:
		return field.Errorf("lambda", "%v is used only with alpha 0 (alpha %v selects λ = 1 − 1/(α·l)); set alpha to 0 for a fixed λ", c.Lambda, c.Alpha)
	case !(c.Eps >= 0) || math.IsInf(c.Eps, 0):
		return field.Errorf("eps", "%v: want a finite value ≥ 0", c.Eps)
	}
	return nil
}

// MaxAbsReward bounds the reward |R| of an episode the estimators accept.
// Rewards are scores (a task's verdict is in [0, 1]); far larger ones
// overflow the estimators' float64 arithmetic without a word: rewards of
// ±1e308 in one group give (R − mean)² = +Inf, so std = +Inf and every
// advantage (R − mean)/(std + ε) is 0, and a group of 1e308s sums to +Inf
// (advantages NaN). Below 1e6, (R − mean)² ≤ 4e12 and GAE's sums of
// rewards and values stay exact to float64's precision. A non-finite
// reward, or one beyond the bound, is an error naming the episode.
const MaxAbsReward = 1e6

// checkReward reports an episode whose reward the estimators cannot use,
// and a non-finite critic value on an optimised token (GAE would spread
// it as NaN over the segment).
func checkReward(ep *episode.Episode, values bool) error {
	r := ep.Reward
	if math.IsNaN(r) || math.IsInf(r, 0) || math.Abs(r) > MaxAbsReward {
		return fmt.Errorf("episode %q: reward %v: want a finite value with |R| ≤ %g (rl.MaxAbsReward)", ep.ID, r, float64(MaxAbsReward))
	}
	if !values {
		return nil
	}
	for si := range ep.Segments {
		s := &ep.Segments[si]
		if !s.Trainable {
			continue
		}
		for i, m := range s.LossMask {
			if m != 0 && i < len(s.Values) && (math.IsNaN(s.Values[i]) || math.IsInf(s.Values[i], 0)) {
				return fmt.Errorf("episode %q: segments[%d].values[%d]: %v is not a finite critic value", ep.ID, si, i, s.Values[i])
			}
		}
	}
	return nil
}

// LambdaFor returns λ for an episode with l optimised tokens:
// max(0, 1 − 1/(α·l)) when Alpha > 0, else the fixed Lambda.
func (c AdvantageConfig) LambdaFor(l int) float64 {
	if c.Alpha == 0 {
		return c.Lambda
	}
	if l <= 0 {
		return 0
	}
	return math.Max(0, 1-1/(c.Alpha*float64(l)))
}

// Masked reports whether an episode contributes no gradient: an episode
// that was not scored (infra_error, verifier_error: episode.Status.Scored)
// always, overlong when maskOverlong. It is the one masking rule of the
// trainer, the advantage CLI and the plug-ins (integrations/: infra_error
// and verifier_error, overlong unless told otherwise).
func Masked(ep *episode.Episode, maskOverlong bool) bool {
	return !ep.Status.Scored() || (maskOverlong && ep.Status == episode.StatusOverlong)
}

// ComputeAdvantages fills Advantages and Returns of every segment of every
// episode, each aligned with ResponseIDs (existing capacity is reused).
// Positions that are not optimised — mask-0 tokens, every token of a
// non-trainable segment, every token of a masked episode — get advantage 0
// and return 0. The GAE estimators need Values on the trainable segments
// of unmasked episodes; the GRPO estimators group all of eps (masked
// episodes take no part in the group statistics) and set the return of an
// optimised token to the episode's reward R.
func ComputeAdvantages(eps []episode.Episode, cfg AdvantageConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	e, _ := lookupEstimator(string(cfg.Estimator))
	return e.fn.batch(eps, cfg)
}

// EpisodeAdvantages is ComputeAdvantages for one episode, for streaming;
// it accepts only the GAE estimators, which need no other episode.
func EpisodeAdvantages(ep *episode.Episode, cfg AdvantageConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	e, _ := lookupEstimator(string(cfg.Estimator))
	if e.fn.episode == nil {
		return fmt.Errorf("estimator %s needs the whole group of episodes", cfg.Estimator)
	}
	return e.fn.episode(ep, cfg)
}

// prepare sizes Advantages and Returns of every segment to its response
// length and checks the per-token arrays the estimator reads.
func prepare(ep *episode.Episode, needValues bool) (l int, err error) {
	for i := range ep.Segments {
		s := &ep.Segments[i]
		n := len(s.ResponseIDs)
		if len(s.LossMask) != n {
			return 0, fmt.Errorf("episode %q: segments[%d].loss_mask: length %d, want %d", ep.ID, i, len(s.LossMask), n)
		}
		s.Advantages = resize(s.Advantages, n)
		s.Returns = resize(s.Returns, n)
		if !s.Trainable {
			continue
		}
		ns := 0
		for _, m := range s.LossMask {
			if m != 0 {
				ns++
			}
		}
		if needValues && ns > 0 && len(s.Values) != n {
			return 0, fmt.Errorf("episode %q: segments[%d].values: length %d, want %d (estimator needs values)", ep.ID, i, len(s.Values), n)
		}
		l += ns
	}
	return l, nil
}

func resize(x []float64, n int) []float64 {
	if n == 0 {
		return nil
	}
	if cap(x) < n {
		return make([]float64, n)
	}
	return x[:n]
}

func zero(x []float64) {
	for i := range x {
		x[i] = 0
	}
}

// gaeState is the GAE recursion's carry, going backward over optimised
// tokens: the next optimised token's value, the running advantage, and the
// reward still to be paid at the next optimised token met.
type gaeState struct {
	nextV, gae, r float64
}

// gaeBackward runs δ_i = r_i + γ V_{i+1} − V_i, A_i = δ_i + γλ A_{i+1}
// backward over the optimised tokens of one segment, skipping mask-0
// tokens (advantage and return 0 there), writing adv_i = scale·A_i and
// ret_i = A_i + V_i (scale·A_i + V_i when scaledRet). It returns the carry
// and the number of optimised tokens.
func gaeBackward(adv, ret, v []float64, mask []int, gamma, gl, scale float64, scaledRet bool, st gaeState) (gaeState, int) {
	n := len(mask)
	adv, ret, v = adv[:n], ret[:n], v[:n]
	retScale := 1.0
	if scaledRet {
		retScale = scale
	}
	nextV, gae, r := st.nextV, st.gae, st.r
	count := 0
	for i := n - 1; i >= 0; i-- {
		if mask[i] == 0 {
			adv[i], ret[i] = 0, 0
			continue
		}
		vi := v[i]
		gae = r + gamma*nextV - vi + gl*gae
		adv[i] = scale * gae
		ret[i] = retScale*gae + vi
		nextV, r = vi, 0
		count++
	}
	return gaeState{nextV, gae, r}, count
}

// AdvantagesJSONL reads episodes from r, fills their advantages and returns
// (ComputeAdvantages) and writes them to w, unchanged otherwise and in the
// same order. The GAE estimators stream one episode at a time; the grouped
// ones (grpo, dr-grpo) hold every episode, since a group's members may be
// anywhere in the input. A bad line stops it with an error naming the line;
// the episodes before it have been written.
func AdvantagesJSONL(ctx context.Context, r *episode.Reader, w *episode.Writer, cfg AdvantageConfig) error {
	var held []episode.Episode
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		ep, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if !cfg.Estimator.UsesValues() {
			held = append(held, ep)
			continue
		}
		if err := EpisodeAdvantages(&ep, cfg); err != nil {
			return fmt.Errorf("line %d: %w", r.Line(), err)
		}
		if err := w.Write(&ep); err != nil {
			return err
		}
	}
	if len(held) == 0 {
		return nil
	}
	if err := ComputeAdvantages(held, cfg); err != nil {
		return err
	}
	for i := range held {
		if err := w.Write(&held[i]); err != nil {
			return err
		}
	}
	return nil
}

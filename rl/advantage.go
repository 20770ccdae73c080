package rl

import (
	"fmt"
	"math"
	"sort"

	"github.com/compactrl/compactrl/episode"
)

// Estimator names an advantage estimator.
type Estimator string

const (
	// CrossGAE is per-segment GAE scaled by (γλ)^{N_{>s}} (the default).
	CrossGAE Estimator = "cross-gae"
	// Independent is per-segment GAE without scaling.
	Independent Estimator = "independent"
	// Concat is one GAE over all trainable segments' optimised tokens.
	Concat Estimator = "concat"
	// GRPO is the group-normalised reward (R − mean)/(std + ε).
	GRPO Estimator = "grpo"
	// DrGRPO is the group-centred reward R − mean.
	DrGRPO Estimator = "dr-grpo"
)

// Estimators lists every estimator, the default first.
func Estimators() []Estimator { return []Estimator{CrossGAE, Independent, Concat, GRPO, DrGRPO} }

// ParseEstimator returns the estimator named s.
func ParseEstimator(s string) (Estimator, error) {
	for _, e := range Estimators() {
		if string(e) == s {
			return e, nil
		}
	}
	return "", fmt.Errorf("unknown estimator %q, want one of %v", s, Estimators())
}

// UsesValues reports whether the estimator needs critic values (the GAE
// family) rather than group statistics.
func (e Estimator) UsesValues() bool { return e == CrossGAE || e == Independent || e == Concat }

// AdvantageConfig configures ComputeAdvantages.
type AdvantageConfig struct {
	Estimator Estimator
	// Gamma is the discount γ ∈ [0, 1].
	Gamma float64
	// Alpha > 0 selects the length-adaptive λ = max(0, 1 − 1/(α·l)), l the
	// episode's optimised-token count; Alpha == 0 selects the fixed Lambda.
	Alpha float64
	// Lambda is the fixed λ ∈ [0, 1], used when Alpha == 0.
	Lambda float64
	// Eps is the ε of GRPO's (R − mean)/(std + ε).
	Eps float64
	// GroupByTask groups GRPO episodes by Task instead of Group.
	GroupByTask bool
	// MaskOverlong masks overlong episodes (infra_error ones always are).
	MaskOverlong bool
	// ScaledReturns makes the critic target Â + V instead of A^loc + V
	// (the two differ only under cross-gae).
	ScaledReturns bool
}

// DefaultAdvantageConfig is DESIGN.md §1's default: cross-gae, γ = 1,
// λ = 1 − 1/(1.5·l), GRPO ε = 1e-6, overlong episodes masked.
func DefaultAdvantageConfig() AdvantageConfig {
	return AdvantageConfig{Estimator: CrossGAE, Gamma: 1, Alpha: 1.5, Eps: 1e-6, MaskOverlong: true}
}

// Validate checks the configuration's ranges.
func (c AdvantageConfig) Validate() error {
	if _, err := ParseEstimator(string(c.Estimator)); err != nil {
		return err
	}
	if !(c.Gamma >= 0 && c.Gamma <= 1) {
		return fmt.Errorf("gamma %v not in [0, 1]", c.Gamma)
	}
	if !(c.Alpha >= 0) || math.IsInf(c.Alpha, 0) {
		return fmt.Errorf("alpha %v: want a finite value ≥ 0 (0 selects the fixed lambda)", c.Alpha)
	}
	if c.Alpha == 0 && !(c.Lambda >= 0 && c.Lambda <= 1) {
		return fmt.Errorf("lambda %v not in [0, 1]", c.Lambda)
	}
	if !(c.Eps >= 0) || math.IsInf(c.Eps, 0) {
		return fmt.Errorf("eps %v: want a finite value ≥ 0", c.Eps)
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

// Masked reports whether an episode contributes no gradient: infra_error
// always, overlong when maskOverlong.
func Masked(ep *episode.Episode, maskOverlong bool) bool {
	return ep.Status == episode.StatusInfraError || (maskOverlong && ep.Status == episode.StatusOverlong)
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
	if cfg.Estimator.UsesValues() {
		for i := range eps {
			if err := gaeEpisode(&eps[i], cfg); err != nil {
				return err
			}
		}
		return nil
	}
	return groupAdvantages(eps, cfg)
}

// EpisodeAdvantages is ComputeAdvantages for one episode, for streaming;
// it accepts only the GAE estimators, which need no other episode.
func EpisodeAdvantages(ep *episode.Episode, cfg AdvantageConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if !cfg.Estimator.UsesValues() {
		return fmt.Errorf("estimator %s needs the whole group of episodes", cfg.Estimator)
	}
	return gaeEpisode(ep, cfg)
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

func gaeEpisode(ep *episode.Episode, cfg AdvantageConfig) error {
	l, err := prepare(ep, !Masked(ep, cfg.MaskOverlong))
	if err != nil {
		return err
	}
	masked := Masked(ep, cfg.MaskOverlong)
	gl := cfg.Gamma * cfg.LambdaFor(l)
	carry := gaeState{r: ep.Reward}
	later := 0 // N_{>s}
	for si := len(ep.Segments) - 1; si >= 0; si-- {
		s := &ep.Segments[si]
		if masked || !s.Trainable || len(s.Values) < len(s.LossMask) {
			// (prepare allows missing values only on segments with no
			// optimised token.)
			zero(s.Advantages)
			zero(s.Returns)
			continue
		}
		scale := 1.0
		switch cfg.Estimator {
		case CrossGAE:
			scale = math.Pow(gl, float64(later))
			carry = gaeState{r: ep.Reward}
		case Independent:
			carry = gaeState{r: ep.Reward}
		}
		var n int
		carry, n = gaeBackward(s.Advantages, s.Returns, s.Values, s.LossMask, cfg.Gamma, gl, scale, cfg.ScaledReturns, carry)
		later += n
	}
	return nil
}

// groupAdvantages implements grpo and dr-grpo: per group G of unmasked
// episodes, A = (R − mean_G R)/(std_G R + ε) (grpo) or R − mean_G R
// (dr-grpo), std the sample (n−1) standard deviation; a group of one gets
// A = 0.
func groupAdvantages(eps []episode.Episode, cfg AdvantageConfig) error {
	groups := map[string][]int{}
	for i := range eps {
		ep := &eps[i]
		if _, err := prepare(ep, false); err != nil {
			return err
		}
		if Masked(ep, cfg.MaskOverlong) {
			continue
		}
		key := ep.Group
		if cfg.GroupByTask {
			key = ep.Task
		}
		if key == "" {
			if cfg.GroupByTask {
				return fmt.Errorf("episode %q: empty task, cannot group", ep.ID)
			}
			return fmt.Errorf("episode %q: empty group (set group, or group by task)", ep.ID)
		}
		groups[key] = append(groups[key], i)
	}
	adv := make([]float64, len(eps))
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic floating-point order
	for _, k := range keys {
		members := groups[k]
		if len(members) < 2 {
			continue
		}
		mean, std := meanStd(eps, members)
		for _, i := range members {
			a := eps[i].Reward - mean
			if cfg.Estimator == GRPO {
				a /= std + cfg.Eps
			}
			adv[i] = a
		}
	}
	for i := range eps {
		ep := &eps[i]
		masked := Masked(ep, cfg.MaskOverlong)
		for si := range ep.Segments {
			s := &ep.Segments[si]
			for t, m := range s.LossMask {
				if masked || !s.Trainable || m == 0 {
					s.Advantages[t], s.Returns[t] = 0, 0
				} else {
					s.Advantages[t], s.Returns[t] = adv[i], ep.Reward
				}
			}
		}
	}
	return nil
}

// meanStd returns the mean and the sample standard deviation
// sqrt(Σ(R − mean)²/(n − 1)) of the members' rewards (n ≥ 2).
func meanStd(eps []episode.Episode, members []int) (mean, std float64) {
	for _, i := range members {
		mean += eps[i].Reward
	}
	mean /= float64(len(members))
	var ss float64
	for _, i := range members {
		d := eps[i].Reward - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / float64(len(members)-1))
}

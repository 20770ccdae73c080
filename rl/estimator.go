package rl

import (
	"fmt"
	"math"
	"sort"
	"sync"

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

// EstimatorFunc fills the Advantages and Returns of every segment of every
// episode of eps as ComputeAdvantages describes; it reads every field of
// cfg but Estimator.
type EstimatorFunc func(eps []episode.Episode, cfg AdvantageConfig) error

// estimatorFuncs are one registered estimator: the batch function, and,
// for the GAE family, which reads critic values, the one-episode function
// (nil for the group estimators).
type estimatorFuncs struct {
	episode func(ep *episode.Episode, cfg AdvantageConfig) error
	batch   EstimatorFunc
}

// EpisodeEstimatorFunc fills one episode's Advantages and Returns from its
// rewards and critic values alone (the GAE family).
type EpisodeEstimatorFunc func(ep *episode.Episode, cfg AdvantageConfig) error

// registered are the estimators added with RegisterEstimator, after the
// built-ins; the mutex makes registration safe beside lookups (register
// from an init function, as verl's register_adv_est is used).
var registered struct {
	sync.RWMutex
	list []entry[Estimator, estimatorFuncs]
}

// RegisterEstimator adds an advantage estimator under name, for rl.estimator
// in configs and --estimator on the command line. A value-based estimator
// (it reads Values, like GAE; the trainer then trains a critic) gives
// perEpisode, which sees one episode at a time (and streams); a group
// estimator (like GRPO) gives batch, which sees every episode of the
// iteration. Exactly one of them is non-nil. A name already registered, or
// empty, is an error. The function must fill every segment's Advantages and
// Returns as ComputeAdvantages describes, and give
// masked episodes (Masked) zero; they arrive sized to the responses and
// checked (a value-based estimator's episodes have Values wherever tokens
// are optimised).
func RegisterEstimator(name string, perEpisode EpisodeEstimatorFunc, batch EstimatorFunc) error {
	switch {
	case name == "":
		return fmt.Errorf("register estimator: empty name")
	case (perEpisode == nil) == (batch == nil):
		return fmt.Errorf("register estimator %s: give exactly one of a per-episode (value-based) or a batch (group) function", name)
	}
	registered.Lock()
	defer registered.Unlock()
	for _, e := range estimators() {
		if string(e.name) == name {
			return fmt.Errorf("register estimator %s: already registered", name)
		}
	}
	var f estimatorFuncs
	if perEpisode != nil {
		// Sized and checked first (values where tokens are optimised), as
		// the built-ins are.
		one := func(ep *episode.Episode, cfg AdvantageConfig) error {
			if _, err := prepare(ep, !Masked(ep, cfg.MaskOverlong)); err != nil {
				return err
			}
			return perEpisode(ep, cfg)
		}
		f = estimatorFuncs{episode: one, batch: eachEpisode(one)}
	} else {
		f.batch = func(eps []episode.Episode, cfg AdvantageConfig) error {
			for i := range eps {
				if _, err := prepare(&eps[i], false); err != nil {
					return err
				}
			}
			return batch(eps, cfg)
		}
	}
	registered.list = append(registered.list, entry[Estimator, estimatorFuncs]{Estimator(name), f})
	return nil
}

// estimators is the registry of advantage estimators, the default first,
// then the built-ins, then those registered (RegisterEstimator). Callers
// other than RegisterEstimator take the read lock through it.
func estimators() []entry[Estimator, estimatorFuncs] {
	out := []entry[Estimator, estimatorFuncs]{
		{CrossGAE, estimatorFuncs{CrossGAEAdvantage, eachEpisode(CrossGAEAdvantage)}},
		{Independent, estimatorFuncs{IndependentGAEAdvantage, eachEpisode(IndependentGAEAdvantage)}},
		{Concat, estimatorFuncs{ConcatGAEAdvantage, eachEpisode(ConcatGAEAdvantage)}},
		{GRPO, estimatorFuncs{nil, GRPOAdvantage}},
		{DrGRPO, estimatorFuncs{nil, DrGRPOAdvantage}},
	}
	return append(out, registered.list...)
}

func lookupEstimator(name string) (entry[Estimator, estimatorFuncs], error) {
	registered.RLock()
	defer registered.RUnlock()
	return lookup(estimators(), "estimator", name)
}

// EstimatorNames lists the registered estimators' names, the default first.
func EstimatorNames() []string {
	registered.RLock()
	defer registered.RUnlock()
	return names(estimators())
}

// EstimatorByName returns the estimator registered under name; an unknown
// name is an error listing the valid ones.
func EstimatorByName(name string) (EstimatorFunc, error) {
	e, err := lookupEstimator(name)
	return e.fn.batch, err
}

// ParseEstimator returns the estimator named s.
func ParseEstimator(s string) (Estimator, error) {
	e, err := lookupEstimator(s)
	return e.name, err
}

// UsesValues reports whether the estimator needs critic values (the GAE
// family) rather than group statistics.
func (e Estimator) UsesValues() bool {
	x, err := lookupEstimator(string(e))
	return err == nil && x.fn.episode != nil
}

func eachEpisode(f func(*episode.Episode, AdvantageConfig) error) EstimatorFunc {
	return func(eps []episode.Episode, cfg AdvantageConfig) error {
		for i := range eps {
			if err := f(&eps[i], cfg); err != nil {
				return err
			}
		}
		return nil
	}
}

// CrossGAEAdvantage is the cross-gae estimator for one episode. Per
// trainable segment s, its optimised tokens i = 1 … n_s, reward R at n_s:
//
//	δ_i = r_i + γ V_{i+1} − V_i              (V_{n_s+1} = 0, r_{n_s} = R, else 0)
//	A^loc_i = δ_i + γλ A^loc_{i+1}
//	Â_{s,i} = (γλ)^{N_{>s}} A^loc_i,  G_{s,i} = A^loc_i + V_i  (Â_{s,i} + V_i with ScaledReturns)
//
// N_{>s} the optimised tokens of all later trainable segments.
func CrossGAEAdvantage(ep *episode.Episode, cfg AdvantageConfig) error {
	return segmentGAE(ep, cfg, true, func(gl float64, later int) float64 { return math.Pow(gl, float64(later)) })
}

// IndependentGAEAdvantage is the independent estimator for one episode:
// GAE within each trainable segment on its own,
//
//	δ_i = r_i + γ V_{i+1} − V_i,  Â_{s,i} = A^loc_i = δ_i + γλ A^loc_{i+1},  G_{s,i} = Â_{s,i} + V_i
//
// with V_{n_s+1} = 0 and r_{n_s} = R in every segment.
func IndependentGAEAdvantage(ep *episode.Episode, cfg AdvantageConfig) error {
	return segmentGAE(ep, cfg, true, unscaled)
}

// ConcatGAEAdvantage is the concat estimator for one episode: one GAE
// recursion over the optimised tokens of all trainable segments in order,
//
//	δ_i = r_i + γ V_{i+1} − V_i,  Â_i = δ_i + γλ Â_{i+1},  G_i = Â_i + V_i
//
// V_{i+1} the next optimised token's value in this or a later trainable
// segment (0 after the last), R paid at the episode's last optimised token.
func ConcatGAEAdvantage(ep *episode.Episode, cfg AdvantageConfig) error {
	return segmentGAE(ep, cfg, false, unscaled)
}

func unscaled(float64, int) float64 { return 1 }

// segmentGAE runs gaeBackward over ep's trainable segments, last first,
// with λ from the episode's optimised-token count. restart starts every
// segment's recursion afresh (V_{n_s+1} = 0, reward R); otherwise the
// carry runs on across segments. scale(γλ, N_{>s}) multiplies segment s's
// advantages.
func segmentGAE(ep *episode.Episode, cfg AdvantageConfig, restart bool, scale func(gl float64, later int) float64) error {
	if err := cfg.validateParams(); err != nil {
		return err
	}
	masked := Masked(ep, cfg.MaskOverlong)
	l, err := prepare(ep, !masked)
	if err != nil {
		return err
	}
	if !masked {
		if err := checkReward(ep, true); err != nil {
			return err
		}
	}
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
		if restart {
			carry = gaeState{r: ep.Reward}
		}
		var n int
		carry, n = gaeBackward(s.Advantages, s.Returns, s.Values, s.LossMask, cfg.Gamma, gl, scale(gl, later), cfg.ScaledReturns, carry)
		later += n
	}
	return nil
}

// GRPOAdvantage is the grpo estimator: per group G of unmasked episodes
// (by Group, or Task with GroupByTask),
//
//	Â = (R − mean_G R)/(std_G R + ε),  std_G R = sqrt(Σ_G (R − mean_G R)²/(|G| − 1))
//
// on every optimised token of the episode, return R; a group of one gets
// Â = 0.
func GRPOAdvantage(eps []episode.Episode, cfg AdvantageConfig) error {
	return groupAdvantages(eps, cfg, true)
}

// DrGRPOAdvantage is the dr-grpo estimator: per group G of unmasked
// episodes, Â = R − mean_G R on every optimised token of the episode,
// return R; a group of one gets Â = 0.
func DrGRPOAdvantage(eps []episode.Episode, cfg AdvantageConfig) error {
	return groupAdvantages(eps, cfg, false)
}

// groupAdvantages centres each group's rewards, and divides them by
// std + ε when normalise.
func groupAdvantages(eps []episode.Episode, cfg AdvantageConfig, normalise bool) error {
	if err := cfg.validateParams(); err != nil {
		return err
	}
	groups := map[string][]int{}
	for i := range eps {
		ep := &eps[i]
		if _, err := prepare(ep, false); err != nil {
			return err
		}
		if Masked(ep, cfg.MaskOverlong) {
			continue
		}
		if err := checkReward(ep, false); err != nil {
			return err
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
			if normalise {
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

package train

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/internal/progress"
	"github.com/compactrl/compactrl/rl"
)

// advantages runs the configured estimator over the iteration's episodes
// (values already scored) and attaches each item's optimised tokens.
func (t *Trainer) advantages(eps []episode.Episode, items []*item) error {
	if err := rl.ComputeAdvantages(eps, t.Cfg.RL.AdvantageConfig); err != nil {
		return fmt.Errorf("advantages: %w", err)
	}
	toks, err := rl.StepTokens(eps, rl.StepConfig{Agg: t.Cfg.RL.LossAggMode, MaskOverlong: t.Cfg.RL.MaskOverlong, Critic: t.Cfg.RL.Estimator.UsesValues()})
	if err != nil {
		return fmt.Errorf("step tokens: %w", err)
	}
	byKey := map[[2]int]*item{}
	for _, it := range items {
		it.toks = it.toks[:0]
		byKey[[2]int{it.ep, it.seg}] = it
	}
	for _, tk := range toks {
		it, ok := byKey[[2]int{tk.Ep, tk.Seg}]
		if !ok {
			return fmt.Errorf("step tokens: episode %d segment %d is not a prepared item", tk.Ep, tk.Seg)
		}
		it.toks = append(it.toks, tk)
	}
	for _, it := range items {
		it.vtoks = append(it.vtoks[:0], it.toks...)
	}
	return nil
}

// weigh fixes the loss weights of one optimiser step over all of mb's
// tokens (never one micro-batch), with the run's loss mode for the policy
// and token-mean for the value loss; it returns the token count |M|.
func weigh(mb []*item, agg rl.Aggregation, toks func(*item) []rl.Token) (int, error) {
	var flat []rl.Token
	for _, it := range mb {
		flat = append(flat, toks(it)...)
	}
	if err := rl.AssignWeights(flat, agg); err != nil {
		return 0, err
	}
	k := 0
	for _, it := range mb {
		tk := toks(it)
		for i := range tk {
			tk[i].Weight = flat[k].Weight
			k++
		}
	}
	return len(flat), nil
}

func policyToks(it *item) []rl.Token { return it.toks }
func valueToks(it *item) []rl.Token  { return it.vtoks }

// responseGrad places g, the loss gradient of each of the item's optimised
// tokens, at their positions in the response (0 elsewhere): dL/d(output).
func (it *item) responseGrad(toks []rl.Token, g []float64) []float64 {
	d := make([]float64, len(it.seq.Response))
	for k, tk := range toks {
		d[tk.Pos] = g[k]
	}
	return d
}

type policyStats struct {
	ppo      rl.PPOStats
	loss     float64
	entropy  float64
	maxDiff  float64
	gradNorm float64
	lr       float64
	tokens   int // tokens through forward/backward
}

// policyStep is one optimiser step of the policy on mini-batch mb:
//
//	L = Σ_{t∈M} w_t ℓ_t,  ℓ_t the PPO clipped surrogate (rl.PPOLoss)
//
// with w_t fixed over mb before it is split into micro-batches, so the
// accumulated gradient is the same for any micro-batch size.
func (t *Trainer) policyStep(ctx context.Context, mb []*item) (policyStats, error) {
	var st policyStats
	if _, err := weigh(mb, t.Cfg.RL.LossAggMode, policyToks); err != nil {
		return st, err
	}
	n, err := t.forEachMicro(ctx, t.Policy, mb, true, func(it *item, out Output) ([]float64, error) {
		if len(out.Logprobs) != len(it.seq.Response) || len(out.Entropy) != len(it.seq.Response) {
			return nil, fmt.Errorf("policy returned %d log-probs and %d entropies for %d response tokens", len(out.Logprobs), len(out.Entropy), len(it.seq.Response))
		}
		lp := make([]float64, len(it.toks))
		for k, tk := range it.toks {
			lp[k] = out.Logprobs[tk.Pos]
			st.entropy += out.Entropy[tk.Pos]
			st.maxDiff = math.Max(st.maxDiff, math.Abs(lp[k]-tk.OldLogp))
		}
		loss, g, ps, err := rl.PPOLoss(it.toks, lp, t.Cfg.RL.PPOConfig)
		if err != nil {
			return nil, err
		}
		st.loss += loss
		st.ppo.Add(ps)
		return it.responseGrad(it.toks, g), nil
	})
	st.tokens = n
	if err != nil {
		return st, fmt.Errorf("policy step: %w", err)
	}
	st.lr = lr(t.Cfg.RL.LR, t.Cfg.RL.WarmupSteps, t.state.PolicySteps)
	if st.gradNorm, err = t.Policy.Step(ctx, st.lr); err != nil {
		return st, fmt.Errorf("policy step: %w", err)
	}
	t.state.PolicySteps++
	if st.ppo.Tokens > 0 {
		st.entropy /= float64(st.ppo.Tokens)
	}
	return st, nil
}

type valueStats struct {
	loss, gradNorm float64
	tokens         int
}

// valueStep is one critic step on mb: the token-mean clipped value loss
// (rl.ValueLoss) with clip ε_v, or unclipped when clip is 0.
func (t *Trainer) valueStep(ctx context.Context, mb []*item, clip float64) (valueStats, error) {
	var st valueStats
	if _, err := weigh(mb, rl.TokenMean, valueToks); err != nil {
		return st, err
	}
	vc := rl.ValueConfig{ValueClip: clip}
	n, err := t.forEachMicro(ctx, t.critic, mb, true, func(it *item, out Output) ([]float64, error) {
		if len(out.Values) != len(it.seq.Response) {
			return nil, fmt.Errorf("critic returned %d values for %d response tokens", len(out.Values), len(it.seq.Response))
		}
		v := make([]float64, len(it.vtoks))
		for k, tk := range it.vtoks {
			v[k] = out.Values[tk.Pos]
		}
		loss, g, _, err := rl.ValueLoss(it.vtoks, v, vc)
		if err != nil {
			return nil, err
		}
		st.loss += loss
		return it.responseGrad(it.vtoks, g), nil
	})
	st.tokens = n
	if err != nil {
		return st, fmt.Errorf("value step: %w", err)
	}
	if st.gradNorm, err = t.critic.Step(ctx, t.Cfg.RL.CriticLR); err != nil {
		return st, fmt.Errorf("value step: %w", err)
	}
	t.state.CriticSteps++
	return st, nil
}

// iteration is one RL iteration: rollouts with the current policy, critic
// values, advantages, (critic warm-up before the run's first policy
// update), PPO epochs over mini-batches with value updates, publish.
func (t *Trainer) iteration(ctx context.Context, it int, m *Metrics, res *Result) error {
	t0 := t.now()
	eps, err := t.rollouts(ctx, it)
	if err != nil {
		return err
	}
	tRoll := t.now().Sub(t0)
	s := summarize(eps)
	m.setRollouts(s, tRoll)
	res.TimeRollout += tRoll
	res.RolloutTokens += s.sampledTokens

	t1 := t.now()
	tokens, err := t.optimise(ctx, it, eps, m)
	if err != nil {
		return fmt.Errorf("iteration %d: %w", it, err)
	}
	if err := t.Policy.Publish(ctx); err != nil {
		return fmt.Errorf("iteration %d publish: %w", it, err)
	}
	tTrain := t.now().Sub(t1)
	m.TimeTrainS = tTrain.Seconds()
	m.TrainTokensPerS = float64(tokens) / math.Max(tTrain.Seconds(), 1e-9)
	res.TimeTrain += tTrain
	res.TrainTokens += tokens
	return nil
}

// rollouts are iteration it's training episodes, sampled from the current
// policy, in seed order, each grouped with the other rollouts of its task.
func (t *Trainer) rollouts(ctx context.Context, it int) ([]episode.Episode, error) {
	cfg := t.Cfg
	tasks, samples := t.trainSeeds(it)
	bar := progress.New(t.Progress, fmt.Sprintf("iter %d rollouts", it), len(tasks))
	eps, err := t.Collector.Collect(ctx, Rollouts{
		Sampler: t.Policy.Sampler(), Seeds: tasks, SampleSeeds: samples,
		Temperature: cfg.Agent.Temperature, NoCompaction: cfg.Agent.NoCompaction, Progress: bar.Set,
	})
	bar.Done()
	if err != nil {
		return nil, fmt.Errorf("iteration %d rollouts: %w", it, err)
	}
	if len(eps) != len(tasks) {
		return nil, fmt.Errorf("iteration %d rollouts: %d episodes for %d tasks", it, len(eps), len(tasks))
	}
	for j := range eps {
		eps[j].Group = fmt.Sprintf("%d/%d", it, j/cfg.RL.GroupSize)
	}
	return eps, nil
}

// Update is the optimisation of RL iteration it on rollouts already
// collected (eps, in the order of the iteration's seeds): the masks, critic
// values and advantages, the critic warm-up if the run has not had it, and
// the PPO epochs with their value updates; the weights are not published.
// A trainer that has no critic yet gets NewCritic's. It returns the
// iteration's update metrics.
func (t *Trainer) Update(ctx context.Context, it int, eps []episode.Episode) (Metrics, error) {
	m := Metrics{Iteration: it}
	if t.critic == nil {
		var err error
		if t.critic, err = t.NewCritic(ctx, t.Policy); err != nil {
			return m, fmt.Errorf("new critic: %w", err)
		}
	}
	_, err := t.optimise(ctx, it, eps, &m)
	return m, err
}

// optimise prepares eps's trainable items and, if there are any, updates
// the models on them; it returns the tokens that went through the models.
func (t *Trainer) optimise(ctx context.Context, it int, eps []episode.Episode, m *Metrics) (int, error) {
	items, err := t.prepare(eps)
	if err != nil {
		return 0, err
	}
	m.Segments = len(items)
	if len(items) == 0 {
		return 0, nil
	}
	return t.update(ctx, it, eps, items, m)
}

// update is the optimisation part of an iteration: values and advantages
// (with the critic warm-up before the run's first policy update), then the
// PPO epochs. It returns the tokens that went through the models.
func (t *Trainer) update(ctx context.Context, it int, eps []episode.Episode, items []*item, m *Metrics) (int, error) {
	// Without a value-based estimator (grpo, dr-grpo: SUPO-style) the
	// critic is neither scored nor trained.
	usesValues := t.Cfg.RL.Estimator.UsesValues()
	tokens, err := t.score(ctx, it, eps, items, m, usesValues)
	if err != nil {
		return tokens, err
	}
	var sumAdv float64
	for _, itm := range items {
		for _, tk := range itm.toks {
			sumAdv += tk.Adv
			m.TokensOptimised++
		}
	}
	m.Advantage = sumAdv / float64(max(1, m.TokensOptimised))
	c := rl.CreditOf(eps, t.Cfg.RL.AdvantageConfig)
	m.CreditEpisodes = c.Episodes
	m.LambdaMean, m.FirstSegmentScale = fp(c.Lambda), fp(c.FirstScale)
	m.AdvAbsFirst, m.AdvAbsLast = fp(c.AdvFirst), fp(c.AdvLast)
	m.ValueErrFirst, m.ValueErrLast, m.ValueJump = fp(c.ValueErrFirst), fp(c.ValueErrLast), fp(c.ValueJump)
	n, err := t.ppoEpochs(ctx, it, items, m, usesValues)
	return tokens + n, err
}

// score fills the items' values (when the estimator uses them) and
// advantages. Before the run's first policy update, the critic is first
// regressed on these rollouts' returns for CriticWarmup steps, without
// value clipping (V_old is the untrained critic's), and they are scored
// again.
func (t *Trainer) score(ctx context.Context, it int, eps []episode.Episode, items []*item, m *Metrics, usesValues bool) (int, error) {
	cfg := t.Cfg
	tokens := 0
	score := func() error {
		if usesValues {
			n, err := t.scoreValues(ctx, eps, items)
			tokens += n
			if err != nil {
				return err
			}
		}
		return t.advantages(eps, items)
	}
	if err := score(); err != nil || t.state.CriticWarmed || !usesValues {
		return tokens, err
	}
	mbs := chunks(shuffled(items, cfg.Seed, it, -1), cfg.RL.MiniBatches)
	for k := 0; k < cfg.RL.CriticWarmup; k++ {
		vs, err := t.valueStep(ctx, mbs[k%len(mbs)], 0)
		tokens += vs.tokens
		if err != nil {
			return tokens, fmt.Errorf("critic warm-up: %w", err)
		}
		m.ValueWarmupLoss = vs.loss
	}
	t.state.CriticWarmed = true
	var err error
	if cfg.RL.CriticWarmup > 0 {
		err = score()
	}
	return tokens, err
}

// ppoEpochs runs PPOEpochs passes over the items in MiniBatches seeded
// mini-batches, each a policy step followed by ValueUpdates critic steps,
// and records the means of their statistics in m.
func (t *Trainer) ppoEpochs(ctx context.Context, it int, items []*item, m *Metrics, usesValues bool) (int, error) {
	cfg := t.Cfg
	var tot ppoTotals
	tokens := 0
	for epoch := 0; epoch < cfg.RL.PPOEpochs; epoch++ {
		for _, mb := range chunks(shuffled(items, cfg.Seed, it, epoch), cfg.RL.MiniBatches) {
			// The policy step and the value steps of a mini-batch read the
			// same advantages and returns and touch different models, so they
			// run at once (each model's result is the same bits as in turn).
			var ps policyStats
			var perr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				ps, perr = t.policyStep(ctx, mb)
			}()
			var vals []valueStats
			var verr error
			for v := 0; usesValues && v < cfg.RL.ValueUpdates; v++ {
				vs, err := t.valueStep(ctx, mb, cfg.RL.ValueClip)
				tokens += vs.tokens
				if err != nil {
					verr = err
					break
				}
				vals = append(vals, vs)
			}
			<-done
			tokens += ps.tokens
			if err := errors.Join(perr, verr); err != nil {
				return tokens, err
			}
			if tot.steps == 0 {
				m.LogprobMaxDiff = ps.maxDiff
			}
			tot.addPolicy(ps)
			m.LR = ps.lr
			for _, vs := range vals {
				tot.addValue(vs)
			}
		}
	}
	tot.record(m)
	return tokens, nil
}

// ppoTotals sums an iteration's optimiser steps for its metrics.
type ppoTotals struct {
	ppo           rl.PPOStats
	loss, ent, gn float64
	vloss, vgn    float64
	steps, vsteps int
}

func (a *ppoTotals) addPolicy(ps policyStats) {
	a.ppo.Add(ps.ppo)
	a.loss += ps.loss
	a.ent += ps.entropy * float64(ps.ppo.Tokens)
	a.gn += ps.gradNorm
	a.steps++
}

func (a *ppoTotals) addValue(vs valueStats) {
	a.vloss += vs.loss
	a.vgn += vs.gradNorm
	a.vsteps++
}

// record writes the means per step (entropy per token) into m; the value
// fields are NaN without critic steps.
func (a *ppoTotals) record(m *Metrics) {
	m.PolicyLoss = a.loss / float64(max(1, a.steps))
	m.GradNorm = a.gn / float64(max(1, a.steps))
	m.ClipFrac = a.ppo.ClipFrac()
	m.ApproxKL = a.ppo.ApproxKL()
	m.Entropy = a.ent / float64(max(1, a.ppo.Tokens))
	if a.vsteps > 0 {
		m.ValueLoss = a.vloss / float64(a.vsteps)
		m.CriticGradNorm = a.vgn / float64(a.vsteps)
	} else {
		m.ValueLoss, m.CriticGradNorm = math.NaN(), math.NaN()
	}
}

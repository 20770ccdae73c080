// Package builtin is the built-in engine behind train's boundary: a
// model.Model (a Llama-architecture decoder) with its Scorer for
// forward/backward over packed sequences, AdamW from optim, and for a
// policy an infer/local sampler serving the published weights. It also
// resolves a run's model section (ModelConfig) into a model.Config.
//
// Data flow: train.Trainer calls Forward/Backward/Step on a Builtin (policy
// or critic) with train.Sequences; Publish copies the policy's weights into
// its sampler, which the rollout workers sample from; Save/Load write the
// weights (config.json, model.safetensors) and the optimiser's moments
// (OptimizerFile) of a checkpoint.
package builtin

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/infer/local"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/optim"
	"github.com/compactrl/compactrl/train"
)

// OptimizerFile holds a Builtin's AdamW moments (NAME.exp_avg,
// NAME.exp_avg_sq) and its step count (metadata "step") in a checkpoint
// directory, beside the model's config.json and model.safetensors.
const OptimizerFile = "optimizer.safetensors"

// Options configure the optimiser of a Builtin.
type Options struct {
	GradClip    float64 // global gradient norm bound; 0 disables
	WeightDecay float64 // AdamW decoupled weight decay (norm weights exempt)
	MaxBatch    int     // the policy's sampler: most sequences decoded together
}

// Builtin is the built-in model behind the trainer boundary: a model.Model
// with its Scorer (forward/backward over packed sequences), AdamW, and for
// a policy an infer/local engine serving the published weights.
type Builtin struct {
	M       *model.Model
	sc      *model.Scorer
	opt     *optim.AdamW
	opts    Options
	sampler *local.Sampler // nil for a critic
}

var (
	_ train.Model         = (*Builtin)(nil)
	_ train.Policy        = (*Builtin)(nil)
	_ train.Reinitializer = (*Builtin)(nil)
)

func newBuiltin(m *model.Model, o Options) *Builtin {
	return &Builtin{M: m, sc: m.NewScorer(), opts: o,
		opt: optim.New(OptimParams(m), 0.9, 0.999, 1e-8, o.WeightDecay, model.IsNorm)}
}

// NewPolicy wraps a policy model and starts its sampler (Close stops it).
func NewPolicy(m *model.Model, o Options) (*Builtin, error) {
	if m.Value {
		return nil, errors.New("builtin policy: model is a critic")
	}
	b := newBuiltin(m, o)
	s, err := local.New(m, local.Options{MaxBatch: o.MaxBatch})
	if err != nil {
		return nil, err
	}
	b.sampler = s
	return b, nil
}

// NewCritic returns a critic initialised from the policy's trunk
// (model.NewCritic), with its own optimiser.
func NewCritic(policy *model.Model, o Options) *Builtin {
	return newBuiltin(model.NewCritic(policy), o)
}

// Forward scores prompt ⊕ response with the response as targets.
func (b *Builtin) Forward(ctx context.Context, seqs []train.Sequence, grad bool) ([]train.Output, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ms := make([]model.Seq, len(seqs))
	for i, s := range seqs {
		toks := make([]int, 0, len(s.Prompt)+len(s.Response))
		toks = append(append(toks, s.Prompt...), s.Response...)
		ms[i] = model.Seq{Tokens: toks, From: len(s.Prompt)}
	}
	out, err := b.sc.Forward(ms)
	if err != nil {
		return nil, err
	}
	res := make([]train.Output, len(seqs))
	for i := range res {
		if b.M.Value {
			res[i].Values = out.Values[i]
		} else {
			res[i].Logprobs, res[i].Entropy = out.LogProbs[i], out.Entropy[i]
		}
	}
	return res, nil
}

// Backward back-propagates dL/d(output) through the last Forward.
func (b *Builtin) Backward(ctx context.Context, dout [][]float64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.sc.Backward(dout)
}

// Step clips the accumulated gradient to GradClip, applies AdamW with lr
// and zeroes the gradient; it returns the norm before clipping.
func (b *Builtin) Step(ctx context.Context, lr float64) (float64, error) {
	ps := OptimParams(b.M)
	n := optim.ClipGradNorm(ps, b.opts.GradClip)
	if err := b.opt.Step(ps, lr); err != nil {
		return n, err
	}
	b.M.ZeroGrad()
	return n, nil
}

// Reinit draws fresh random weights from seed (model.New's initialisation
// of the same architecture) and starts AdamW afresh; a policy's sampler
// serves them once published. It is train.Reinitializer, for warm-start
// restarts.
func (b *Builtin) Reinit(seed int64) error {
	fresh, err := model.New(b.M.Cfg, seed, b.M.Value)
	if err != nil {
		return fmt.Errorf("reinitialise: %w", err)
	}
	b.M.CopyWeightsFrom(fresh)
	b.opt.Reset()
	return nil
}

// ResetOptimizer starts AdamW afresh (zero moments and step count).
func (b *Builtin) ResetOptimizer() { b.opt.Reset() }

// OptimizerSteps is the number of AdamW steps since the optimiser started
// (or was reset).
func (b *Builtin) OptimizerSteps() int { return b.opt.Steps() }

// Save writes the model (config.json, model.safetensors) and the optimiser
// state (OptimizerFile) to dir.
func (b *Builtin) Save(dir string) error {
	if err := b.M.Save(dir); err != nil {
		return err
	}
	st := b.opt.State()
	ts := make([]format.Tensor, 0, len(st.Tensors))
	for _, p := range b.M.Params() {
		for _, suf := range []string{".exp_avg", ".exp_avg_sq"} {
			d := st.Tensors[p.Name+suf]
			ts = append(ts, format.Tensor{Name: p.Name + suf, Shape: []int{len(d)}, Data: d})
		}
	}
	path := filepath.Join(dir, OptimizerFile)
	if err := format.WriteSafetensors(path, ts, map[string]string{"step": strconv.Itoa(st.Step)}); err != nil {
		return fmt.Errorf("save optimizer %s: %w", path, err)
	}
	return nil
}

// Load restores weights and optimiser state saved by Save; the
// architecture must match.
func (b *Builtin) Load(dir string) error {
	m, err := model.Load(dir)
	if err != nil {
		return err
	}
	if m.Cfg != b.M.Cfg || m.Value != b.M.Value {
		return fmt.Errorf("load %s: checkpoint architecture %+v (critic %v) differs from %+v (critic %v)", dir, m.Cfg, m.Value, b.M.Cfg, b.M.Value)
	}
	b.M.CopyWeightsFrom(m)
	path := filepath.Join(dir, OptimizerFile)
	ts, meta, err := format.ReadSafetensors(path)
	if err != nil {
		return fmt.Errorf("load optimizer %s: %w", path, err)
	}
	step, err := strconv.Atoi(meta["step"])
	if err != nil {
		return fmt.Errorf("load optimizer %s: step %q: %w", path, meta["step"], err)
	}
	st := optim.State{Step: step, Tensors: map[string][]float32{}}
	for _, t := range ts {
		st.Tensors[t.Name] = t.Data
	}
	if err := b.opt.SetState(st); err != nil {
		return fmt.Errorf("load optimizer %s: %w", path, err)
	}
	return nil
}

// Publish hands the current weights to the sampler.
func (b *Builtin) Publish(ctx context.Context) error {
	if b.sampler == nil {
		return errors.New("publish: critic has no sampler")
	}
	return b.sampler.Publish(b.M)
}

// Sampler is the engine serving the published weights (nil for a critic).
func (b *Builtin) Sampler() infer.Sampler {
	if b.sampler == nil {
		return nil
	}
	return b.sampler
}

// Close stops the sampler.
func (b *Builtin) Close() {
	if b.sampler != nil {
		b.sampler.Close()
	}
}

// OptimParams views m's parameters for package optim, sharing their memory
// (an optimiser step writes the model's weights), with gradients
// allocated where missing.
func OptimParams(m *model.Model) []optim.Param {
	m.EnsureGrads()
	ps := make([]optim.Param, len(m.Params()))
	for i, p := range m.Params() {
		ps[i] = optim.Param{Name: p.Name, Data: p.Data, Grad: p.Grad}
	}
	return ps
}

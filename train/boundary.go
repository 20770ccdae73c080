package train

import (
	"context"
	"math/rand/v2"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
)

// Sequence is one trainable segment as the model sees it: the prompt (never
// trained) followed by the response whose tokens are scored.
type Sequence struct {
	Prompt   []int
	Response []int
}

// Output is a model's per-response-token output for one Sequence, aligned
// with Response: log π(token | prefix) and the entropy of π at that position
// for a policy, V(prefix) for a critic (the other fields nil).
type Output struct {
	Logprobs []float64
	Entropy  []float64
	Values   []float64
}

// Model is the trainer boundary (docs/design.md §2): score, forward-backward with
// per-token weights (as dL/d(output) per token), optimiser step. It is
// two-phase so that a remote trainer can stand behind it: Forward returns
// the outputs, the caller computes the loss gradient with respect to them
// locally, Backward sends it back.
type Model interface {
	// Forward scores seqs. With grad true the activations are kept for one
	// Backward call.
	Forward(ctx context.Context, seqs []Sequence, grad bool) ([]Output, error)
	// Backward accumulates the parameter gradient of L, given dL/d(output)
	// for the last Forward: dLogprobs for a policy, dValues for a critic,
	// each aligned with its Sequence's Response.
	Backward(ctx context.Context, dout [][]float64) error
	// Step applies one optimiser step with learning rate lr to the
	// accumulated gradient (clipped to the configured global norm), zeroes
	// it, and returns the gradient's global norm before clipping.
	Step(ctx context.Context, lr float64) (gradNorm float64, err error)
	// Save writes weights and optimiser state to dir; Load restores them.
	Save(dir string) error
	Load(dir string) error
}

// Policy is a Model whose weights a sampler serves.
type Policy interface {
	Model
	// Publish makes the current weights the ones Sampler samples from.
	Publish(ctx context.Context) error
	// Sampler returns the engine serving the last published weights.
	Sampler() infer.Sampler
}

// Rollouts is what a Collector is asked for: one episode per Seeds entry
// (a task seed of the suite), sampled with Sampler.
type Rollouts struct {
	Sampler      infer.Sampler
	Seeds        []int64 // task seeds, one episode each (repeat a seed for a group)
	SampleSeeds  []int64 // per-episode sampling seed, aligned with Seeds
	Temperature  float64
	NoCompaction bool
	// Progress, if set, is called after each finished episode.
	Progress func(done, total int)
}

// Collector runs the agent loop (with compaction unless NoCompaction) on
// the suite: concurrent workers, episodes returned in the order of Seeds
// whatever order they finish in.
type Collector interface {
	Collect(ctx context.Context, r Rollouts) ([]episode.Episode, error)
}

// ExpertCollector produces the scripted expert's demonstrations (its
// summaries keep each fact with probability p) for the warm start: one
// episode per task seed, with the aligned sampling seed, in seed order.
type ExpertCollector interface {
	Demonstrations(ctx context.Context, seeds, sampleSeeds []int64, p float64) ([]episode.Episode, error)
}

// Example is one sequence of supervised pretraining: the loss is the
// negative log-likelihood of the response tokens at Targets.
type Example struct {
	Sequence
	Targets []int // positions into Response
}

// ExampleDraw is what an ExampleSource is asked for: N sequences, for
// step Step of a phase of Steps optimiser steps of their own (a source may
// grow its sequences over the phase), or, Mixed, to join an imitation
// batch (Step and Steps 0).
type ExampleDraw struct {
	N, Step, Steps int
	Mixed          bool
}

// ExampleSource makes extra supervised sequences for the warm start from
// the text of the demonstrations (corpus: each demonstration segment's
// prompt ⊕ response): a suite's own pretraining task, such as the vault
// recipe's lookup of facts in the context (package recipe). Its draws
// come from r only.
type ExampleSource interface {
	Examples(corpus [][]int, d ExampleDraw, r *rand.Rand) []Example
}

// ExtraExamples schedules an ExampleSource in the warm start: Steps
// optimiser steps of Batch of its sequences, after copy pretraining and
// before imitation, then Mix of them joined to every imitation batch
// (which keeps what they teach while the policy imitates). Phase names the
// phase in RUN_DIR/sft.jsonl, Title in the progress bar.
//
// With Restarts > 0, a phase that ends above Target (the mean loss of its
// last 100 steps) starts over: the policy is reinitialised (it must be a
// Reinitializer) and copy pretraining and the phase run again on draws of
// their own, up to Restarts times; imitation then continues from the first
// attempt that reached Target, else from the last one. Whether such a
// phase forms (a lookup, an induction) can depend on the initialisation
// alone; a restart makes the recipe not hang on one draw.
type ExtraExamples struct {
	Source       ExampleSource
	Phase, Title string
	Steps, Batch int
	Mix          int
	Target       float64
	Restarts     int
}

// Reinitializer is a policy that can start again from fresh random weights
// drawn from seed, with a fresh optimiser.
type Reinitializer interface {
	Reinit(seed int64) error
}

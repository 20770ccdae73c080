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

// RecallDraw is what a RecallSource is asked for: N sequences of at most
// Length tokens over windows of Reach (a fraction) of the longest, each with
// 1 … Extra synthetic facts spliced in; with Unknown, facts absent from the
// context are queried too; with Goal, the query is the found line of a
// summary of the window's demonstration: its goal's keys in task order,
// answered with their values in the context or "?".
type RecallDraw struct {
	N, Length, Extra int
	Reach            float64
	Unknown, Goal    bool
}

// RecallSource makes the sequences of recall pretraining in a suite's fact
// language: windows of corpus (demonstration token sequences) with
// synthetic facts spliced in, then a query of the context's facts whose
// values are the targets. Its draws come from r only.
type RecallSource interface {
	RecallBatch(corpus [][]int, d RecallDraw, r *rand.Rand) []Example
}

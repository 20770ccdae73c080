// Package train runs CompactionRL against its boundary only: a supervised
// warm start on an expert's demonstrations, then PPO with a critic over
// compacted rollouts. It knows no suite and no engine: the policy and
// critic are Models (score, forward-backward with per-token weights,
// optimiser step, publish weights; docs/design.md §2), rollouts come from a
// Collector, demonstrations from an ExpertCollector, a suite's own extra
// supervised sequences (ExtraExamples) from an ExampleSource. The built-in engine behind Model and
// Policy is package train/builtin; the built-in vault suite's recipe (the
// whole run config, Build, the suite, base policies) is package recipe.
//
// Data flow of one iteration: the Collector runs the agent loop with the
// current policy's sampler (an infer.Sampler) and returns episode.Episodes,
// in seed order, whose segments carry the sampled tokens, loss masks and
// the sampler's log-probabilities (π_old); the critic scores every
// trainable segment (values); rl turns rewards and values into per-token
// advantages and returns; the loss weights of the whole optimiser step are
// fixed before it is split into micro-batches; the Trainer runs
// forward/backward on each micro-batch with those weights and takes one
// optimiser step; the new weights are published to the sampler. Every seed
// of a run derives from (Config.Seed, purpose, indices) through splitmix.Chain.
// Metrics go to RUN_DIR/metrics.jsonl, one JSON object per iteration;
// checkpoints to RUN_DIR/checkpoints/.
package train

// Package train runs CompactionRL: a supervised warm start on the scripted
// expert's demonstrations, then PPO with a critic over compacted rollouts.
//
// Data flow of one iteration: the rollout workers run the agent loop with
// the current policy (an infer.Sampler) and return episode.Episodes whose
// segments carry the sampled tokens, loss masks and the sampler's
// log-probabilities (π_old); the critic scores every trainable segment
// (values); rl turns rewards and values into per-token advantages and
// returns; the loss weights of the whole optimiser step are fixed before it
// is split into micro-batches; the Trainer runs forward/backward on each
// micro-batch with those weights and takes one optimiser step; the new
// weights are published to the sampler. Metrics go to RUN_DIR/metrics.jsonl,
// one JSON object per iteration; checkpoints to RUN_DIR/checkpoints/.
//
// The Trainer interface is the boundary of §7 of DESIGN.md: score,
// forward-backward with per-token weights, optimiser step, publish weights.
// The built-in model is one implementation; a remote trainer can be another.
package train

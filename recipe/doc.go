// Package recipe is the built-in recipe: CompactionRL on the vault suite
// (env/vault) with the built-in engine (train/builtin). It owns the whole
// run config — seed, model, suite, agent, sft, rl, run, the YAML shape of
// configs/*.yaml, with the trainer's sections embedded from package train
// and the suite's own warm-start knobs (the sft section's recall_*:
// RecallConfig) beside them — and assembles a run from it (Build: tokenizer, Suite, policy, Trainer).
//
// Data flow: a Config (DemoConfig, PretrainConfig, or a YAML file) is
// validated and Built into a Setup; its Suite is the trainer's Collector
// and ExpertCollector (the agent loop over vault tasks through the rollout
// pool; the scripted expert's demonstrations), and recall pretraining in
// the suite's fact language (FactTokens, scheduled by RecallConfig) its
// train.ExtraExamples; train.Trainer runs it. A finished pretraining run is written out as a
// base policy directory (WriteBase: weights, tokenizer, compactrl.yaml,
// curves, eval.json, model card) that LoadBase and FromBase start RL from;
// EvaluateCheckpoint and EvaluateExpert evaluate on the held-out seeds.
package recipe

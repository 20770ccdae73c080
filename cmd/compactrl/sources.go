package main

// The task sources `eval` and `serve` read --tasks with, and the generated
// suites `serve` takes as --tasks NAME[:KNOBS] and `rollout` as --env
// NAME[:KNOBS]: each registers itself with env/tasks when linked in.
// Adding one is its package and a line here.
import (
	_ "github.com/compactrl/compactrl/env/harbor"   // task directories
	_ "github.com/compactrl/compactrl/env/swebench" // instances JSONL
	_ "github.com/compactrl/compactrl/env/vault"    // the built-in suite: vault[:knobs], ids are seeds
)

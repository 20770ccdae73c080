package main

import (
	"fmt"

	"github.com/compactrl/compactrl/episode"
)

// Exit codes of `eval` and `rollout` (documented in docs/reliability.md):
// 0 every episode was scored; 1 an error stopped the run; exitSomeInfra
// the run finished and its results are written, but some episodes were
// infra_error (masked: the statistics cover the others); exitNothingScored
// every episode was infra_error, so there is no result at all;
// exitSomeSkipped (eval) every episode played was scored, but some tasks
// were skipped: they did not load (a bad task.toml) or cannot run here
// (need a container, multi-step); results.json's "skipped" says why. The
// infra codes take precedence over it.
const (
	exitSomeInfra     = 3
	exitNothingScored = 4
	exitSomeSkipped   = 5
)

// exitError is an error that asks for a particular exit status; main's run
// returns ExitCode() for it instead of 1.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// ExitCode is the process exit status the error asks for.
func (e *exitError) ExitCode() int { return e.code }

// infraOutcome turns a finished run's counts into its exit error: nil when
// every episode was scored.
func infraOutcome(episodes, infra int) error {
	switch {
	case episodes > 0 && infra == episodes:
		return &exitError{exitNothingScored, fmt.Sprintf("nothing could be scored: all %d episodes were %s or %s (engine, harness or verifier failures; see each episode's meta.error)", episodes, episode.StatusInfraError, episode.StatusVerifierError)}
	case infra > 0:
		return &exitError{exitSomeInfra, fmt.Sprintf("%d of %d episodes were %s or %s (masked; the statistics cover the other %d)", infra, episodes, episode.StatusInfraError, episode.StatusVerifierError, episodes-infra)}
	}
	return nil
}

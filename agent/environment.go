package agent

import "context"

// MaxTaskBytes bounds the task text an environment's Reset may return (an
// instruction.md, a problem statement). A longer one ends the episode as
// infra_error (the task is broken) before it is tokenized or copied into
// the episode: a 200 MB instruction cost 1.8 GB of memory to encode and a
// 200 MB episode line. Task loaders should refuse such files with this
// same bound when they read them.
const MaxTaskBytes = 1 << 20

// Environment is one episode's world. The agent loop calls Reset once, then
// Step with each policy reply (decoded text) until Step.Done. An error from
// either ends the episode as infra_error (masked, never scored).
type Environment interface {
	// Reset starts the episode and returns the task u shown to the policy.
	Reset(ctx context.Context) (task string, err error)
	// Step applies one policy reply. A reply the environment cannot parse as
	// an action returns Step{Invalid: true, Observation: <what is wrong>}.
	Step(ctx context.Context, reply string) (Step, error)
}

// Step is the environment's answer to one reply.
type Step struct {
	Observation string  // shown to the policy next (capped by the loop)
	Reward      float64 // the episode's reward R; meaningful when Done
	Done        bool
	Invalid     bool // the reply was not a valid action (a format error)
}

// SummaryScorer is implemented by environments that can grade a summary:
// the fraction of the decisive facts seen so far that the summary kept.
type SummaryScorer interface {
	SummaryQuality(summary string) float64
}

// SummaryAuditor is implemented by environments that can say which of the
// decisive facts seen so far a summary kept and which it lost; the loop
// records them in the episode's Meta (summary_N_kept, summary_N_lost) for
// transcripts.
type SummaryAuditor interface {
	SummaryAudit(summary string) (kept, lost []string)
}

// MetricsReporter is implemented by environments with per-episode metrics
// beyond the reward; they are copied into episode.Episode.Metrics.
type MetricsReporter interface {
	Metrics() map[string]float64
}

package eval

import (
	"context"
	"fmt"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/rollout"
)

// Jobs are the episodes of attempts attempts at every task, task-major:
// episode i plays task i / attempts with seed seed+i and ID "TASK#k" (k its
// attempt), grouped by task; envs makes the environment a job's seed
// stands for (with the task's solution available when oracle is set).
func Jobs(runnable []tasks.Task, attempts int, seed int64, oracle bool) ([]rollout.Job, rollout.EnvFactory) {
	n := len(runnable) * attempts
	jobs := make([]rollout.Job, n)
	for i := range jobs {
		t := runnable[i/attempts]
		jobs[i] = rollout.Job{Seed: seed + int64(i), ID: fmt.Sprintf("%s#%d", t.Name, i%attempts), Group: t.Name}
	}
	envs := func(s int64) (agent.Environment, error) {
		i := s - seed
		if i < 0 || i >= int64(n) {
			return nil, fmt.Errorf("seed %d outside this run's %d episodes", s, n)
		}
		return runnable[i/int64(attempts)].New(oracle), nil
	}
	return jobs, envs
}

// ScriptedRunner plays the oracle (the task's own solution, tasks.Oracle)
// or the empty policy (submit at once) without any engine: Reset, one
// reply, done. Its episodes have no segments (no tokens were sampled).
type ScriptedRunner struct{ Oracle bool }

// Run plays one scripted episode; an environment failure is the episode's
// status (agent.FailureStatus), not an error.
func (s ScriptedRunner) Run(ctx context.Context, env agent.Environment, seed int64) (episode.Episode, error) {
	ep := episode.Episode{Status: episode.StatusOK, Meta: map[string]string{}, Metrics: map[string]float64{}}
	task, err := env.Reset(ctx)
	if err != nil {
		ep.Status, ep.Meta[agent.MetaError] = agent.FailureStatus(err), err.Error()
		return ep, nil
	}
	ep.Task = task
	var st agent.Step
	switch o, isOracle := env.(tasks.Oracle); {
	case s.Oracle && isOracle:
		st, err = o.Oracle(ctx)
	case s.Oracle:
		return ep, fmt.Errorf("the oracle policy cannot play %T", env)
	default:
		st, err = env.Step(ctx, shelltask.SubmitReply)
	}
	if err == nil && !st.Done {
		st, err = env.Step(ctx, shelltask.SubmitReply)
	}
	switch {
	case err != nil:
		ep.Status, ep.Meta[agent.MetaError] = agent.FailureStatus(err), err.Error()
	case !st.Done:
		ep.Status, ep.Meta[agent.MetaError] = episode.StatusInfraError, "scripted policy: episode did not end at submit"
	default:
		ep.Reward = st.Reward
		ep.Meta[agent.MetaFinalObservation] = st.Observation
	}
	ep.Metrics[agent.MetricTurns] = 1
	if mr, ok := env.(agent.MetricsReporter); ok {
		for k, v := range mr.Metrics() {
			ep.Metrics[k] = v
		}
	}
	return ep, ctx.Err()
}

// ClosingRunner closes the environment after its episode: an episode the
// agent loop ends early (overlong, format errors, infra errors) never
// submits, and its sandbox and workspace must not outlive it.
type ClosingRunner struct{ Runner rollout.Runner }

// Run plays the episode with the wrapped runner, then closes env. A Close
// error (a sandbox whose processes could not be confirmed dead, a
// workspace that could not be removed) is kept in the episode's meta
// MetaCloseError; a note on a zero reward (tasks.RewardNoter) in
// MetaRewardNote.
func (c ClosingRunner) Run(ctx context.Context, env agent.Environment, seed int64) (episode.Episode, error) {
	ep, err := c.Runner.Run(ctx, env, seed)
	if ep.Meta == nil {
		ep.Meta = map[string]string{}
	}
	if n, ok := env.(tasks.RewardNoter); ok && n.RewardNote() != "" {
		ep.Meta[MetaRewardNote] = n.RewardNote()
	}
	if cl, ok := env.(tasks.Closer); ok {
		if cerr := cl.Close(); cerr != nil {
			ep.Meta[MetaCloseError] = cerr.Error()
		}
	}
	return ep, err
}

package recipe

import (
	"context"
	"fmt"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/vault"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/rollout"
	"github.com/compactrl/compactrl/train"
)

// Suite runs the agent loop on the built-in vault suite: it is the
// Collector (policy rollouts) and the ExpertCollector (the scripted
// expert's demonstrations) of a run.
type Suite struct {
	Tok     agent.LocalTokenizer
	Lay     Layout
	Env     vault.Config
	Agent   agent.Config // Temperature and NoCompaction are set per Collect call
	Workers int          // concurrent episodes (the engine batches their calls)
	Seed    int64        // mixed into the expert's summaries
	// EpisodeTimeout bounds one episode (0: none); past it the episode is
	// infra_error (masked).
	EpisodeTimeout time.Duration
	// NewEnv makes the environment of a task seed; nil means the vault
	// suite with Env.
	NewEnv func(seed int64) (agent.Environment, error)
}

var (
	_ train.Collector       = (*Suite)(nil)
	_ train.ExpertCollector = (*Suite)(nil)
)

// NewSuite builds the suite of a run's config with the vault's default
// tokenizer and checks the agent's token budget.
func NewSuite(cfg Config, tok agent.LocalTokenizer, lay Layout) (*Suite, error) {
	s := &Suite{Tok: tok, Lay: lay, Env: cfg.Suite.Config, Agent: cfg.Agent.Config, Workers: cfg.Run.Workers, Seed: cfg.Seed,
		EpisodeTimeout: time.Duration(cfg.Run.EpisodeTimeoutS * float64(time.Second))}
	// Construct once to surface budget and suite errors before any work.
	if _, err := s.newAgent(context.Background(), s.Agent, nopSampler{}); err != nil {
		return nil, err
	}
	if _, err := vault.New(s.Env, cfg.Suite.TrainSeedStart); err != nil {
		return nil, fmt.Errorf("suite: %w", err)
	}
	return s, nil
}

type nopSampler struct{}

func (nopSampler) Sample(context.Context, infer.Request) (infer.Completion, error) {
	return infer.Completion{}, fmt.Errorf("no sampler")
}

// Collect runs one episode per seed on Workers goroutines and returns them
// in seed order. Episode failures are infra_error episodes (masked), not
// errors; an error means ctx ended or the configuration is unusable.
func (s *Suite) Collect(ctx context.Context, r train.Rollouts) ([]episode.Episode, error) {
	cfg := s.Agent
	cfg.Temperature, cfg.NoCompaction = r.Temperature, r.NoCompaction
	a, err := s.newAgent(ctx, cfg, r.Sampler)
	if err != nil {
		return nil, err
	}
	return s.run(ctx, a, r.Seeds, r.SampleSeeds, r.Progress)
}

// newAgent is the agent loop with cfg over sampler in the suite's layout.
func (s *Suite) newAgent(ctx context.Context, cfg agent.Config, sampler infer.Sampler) (*agent.Agent, error) {
	if s.Lay.Chat != nil {
		return agent.NewWithFormat(ctx, cfg, agent.Local(s.Tok), s.Lay.Chat, sampler)
	}
	return agent.New(ctx, cfg, agent.Local(s.Tok), s.Lay.Tmpl, sampler)
}

// expert is the scripted expert (summaries keep each fact with probability
// p) reading the suite's layout.
func (s *Suite) expert(p float64) (*vault.Expert, error) {
	if s.Lay.Chat != nil {
		return vault.NewChatExpert(s.Tok, s.Lay.Chat, s.Agent.ResumeText, s.Agent.SummaryInstruction, p, s.Seed)
	}
	return vault.NewExpert(s.Tok, s.Lay.Tmpl, p, s.Seed)
}

// Demonstrations runs the scripted expert (summaries keep each fact with
// probability p) with compaction, greedy, one episode per task seed with
// the aligned sampling seed.
func (s *Suite) Demonstrations(ctx context.Context, seeds, samples []int64, p float64) ([]episode.Episode, error) {
	ex, err := s.expert(p)
	if err != nil {
		return nil, err
	}
	cfg := s.Agent
	cfg.Temperature, cfg.NoCompaction = 0, false
	a, err := s.newAgent(ctx, cfg, ex)
	if err != nil {
		return nil, err
	}
	return s.run(ctx, a, seeds, samples, nil)
}

func (s *Suite) newEnv(seed int64) (agent.Environment, error) {
	if s.NewEnv != nil {
		return s.NewEnv(seed)
	}
	return vault.New(s.Env, seed)
}

// run plays one episode per task seed through the rollout pool (panic
// recovery, the per-episode deadline, infra_error marking: a failing
// episode is masked, never the iteration's end) and returns them in seed
// order. Job j's seed is its index, mapped here to its task seed (the
// environment) and its sampling seed (the agent); each episode's "seed" is
// its task seed.
func (s *Suite) run(ctx context.Context, a *agent.Agent, seeds, samples []int64, progress func(done, total int)) ([]episode.Episode, error) {
	if len(samples) != len(seeds) {
		return nil, fmt.Errorf("collect: %d sampling seeds for %d task seeds", len(samples), len(seeds))
	}
	jobs := make([]rollout.Job, len(seeds))
	for j := range seeds {
		jobs[j] = rollout.Job{Seed: int64(j), ID: fmt.Sprintf("task-%d-%d", seeds[j], j), Group: fmt.Sprintf("task-%d", seeds[j])}
	}
	envs := func(j int64) (agent.Environment, error) { return s.newEnv(seeds[j]) }
	runner := rollout.RunnerFunc(func(ctx context.Context, env agent.Environment, j int64) (episode.Episode, error) {
		return a.Run(ctx, env, samples[j])
	})
	cfg := rollout.Config{Workers: max(1, s.Workers), EpisodeTimeout: s.EpisodeTimeout}
	eps, _, err := rollout.Collect(ctx, cfg, jobs, runner, envs, progress)
	if err != nil {
		return nil, err
	}
	for j := range eps {
		eps[j].Meta["seed"] = fmt.Sprint(seeds[j])
	}
	return eps, nil
}

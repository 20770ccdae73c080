package train

import (
	"context"
	"fmt"
	"sync"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/vault"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
)

// Suite runs the agent loop on the built-in vault suite: it is the
// Collector (policy rollouts) and the ExpertCollector (the scripted
// expert's demonstrations) of a run.
type Suite struct {
	Tok     agent.Tokenizer
	Tmpl    agent.Template
	Env     vault.Config
	Agent   agent.Config // Temperature and NoCompaction are set per Collect call
	Workers int          // concurrent episodes (the engine batches their calls)
	Seed    int64        // mixed into the expert's summaries
	// NewEnv makes the environment of a task seed; nil means the vault
	// suite with Env.
	NewEnv func(seed int64) (agent.Environment, error)
}

var (
	_ Collector       = (*Suite)(nil)
	_ ExpertCollector = (*Suite)(nil)
)

// LoopConfig maps the run's agent knobs onto the loop's configuration
// (the system prompt is the suite's).
func LoopConfig(c AgentConfig) agent.Config {
	a := agent.DefaultConfig()
	a.Window, a.Reserve, a.KeepLast = c.Context, c.Reserve, c.KeepLast
	a.MaxCompactions, a.MaxTurns = c.MaxCompactions, c.MaxTurns
	a.MaxActionTokens, a.MaxSummaryTokens, a.MaxObservationTokens = c.MaxActionTokens, c.MaxSummaryTokens, c.ObservationCap
	a.Temperature, a.NoCompaction = c.Temperature, c.NoCompaction
	a.SystemPrompt = vault.SystemPrompt
	return a
}

// VaultConfig maps the run's suite knobs onto the suite's configuration.
func VaultConfig(c SuiteConfig) vault.Config {
	return vault.Config{Files: c.Files, Pages: c.Pages, Facts: c.Facts, Keys: c.Keys, Distractors: c.Distractors, NoiseLines: c.NoiseLines, PartialCredit: c.PartialCredit}
}

// NewSuite builds the suite of a run's config with the vault's default
// tokenizer and checks the agent's token budget.
func NewSuite(cfg Config, tok agent.Tokenizer, tmpl agent.Template) (*Suite, error) {
	s := &Suite{Tok: tok, Tmpl: tmpl, Env: VaultConfig(cfg.Suite), Agent: LoopConfig(cfg.Agent), Workers: cfg.Run.Workers, Seed: cfg.Seed}
	// Construct once to surface budget and suite errors before any work.
	if _, err := agent.New(s.Agent, tok, tmpl, nopSampler{}); err != nil {
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
func (s *Suite) Collect(ctx context.Context, r Rollouts) ([]episode.Episode, error) {
	cfg := s.Agent
	cfg.Temperature, cfg.NoCompaction = r.Temperature, r.NoCompaction
	a, err := agent.New(cfg, s.Tok, s.Tmpl, r.Sampler)
	if err != nil {
		return nil, err
	}
	return s.run(ctx, a, r.Seeds, r.SampleSeeds, r.Progress)
}

// Demonstrations runs the scripted expert (summaries keep each fact with
// probability p) with compaction, greedy.
func (s *Suite) Demonstrations(ctx context.Context, seeds []int64, p float64) ([]episode.Episode, error) {
	ex, err := vault.NewExpert(s.Tok, s.Tmpl, p, s.Seed)
	if err != nil {
		return nil, err
	}
	cfg := s.Agent
	cfg.Temperature, cfg.NoCompaction = 0, false
	a, err := agent.New(cfg, s.Tok, s.Tmpl, ex)
	if err != nil {
		return nil, err
	}
	samples := make([]int64, len(seeds))
	for i := range samples {
		samples[i] = mix(s.Seed, purposeSFT, int64(i), 1)
	}
	return s.run(ctx, a, seeds, samples, nil)
}

func (s *Suite) newEnv(seed int64) (agent.Environment, error) {
	if s.NewEnv != nil {
		return s.NewEnv(seed)
	}
	return vault.New(s.Env, seed)
}

func (s *Suite) run(ctx context.Context, a *agent.Agent, seeds, samples []int64, progress func(done, total int)) ([]episode.Episode, error) {
	if len(samples) != len(seeds) {
		return nil, fmt.Errorf("collect: %d sampling seeds for %d task seeds", len(samples), len(seeds))
	}
	out := make([]episode.Episode, len(seeds))
	errs := make([]error, len(seeds))
	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for w := 0; w < max(1, s.Workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				env, err := s.newEnv(seeds[j])
				if err != nil {
					errs[j] = fmt.Errorf("task seed %d: %w", seeds[j], err)
					continue
				}
				ep, err := a.Run(ctx, env, samples[j])
				ep.ID = fmt.Sprintf("task-%d-%d", seeds[j], j)
				out[j], errs[j] = ep, err
				mu.Lock()
				done++
				if progress != nil {
					progress(done, len(seeds))
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for j := range seeds {
		select {
		case jobs <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

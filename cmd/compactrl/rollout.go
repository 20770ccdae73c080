package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/internal/progress"
	"github.com/compactrl/compactrl/policy"
	"github.com/compactrl/compactrl/recipe"
	"github.com/compactrl/compactrl/rollout"
)

// runRollout plays --episodes episodes of an environment with a policy and
// writes them as episode JSONL to --out, one line per finished episode
// (flushed at once), with a progress bar on a terminal and a final line of
// statistics on stdout. The exit status says whether every episode was
// scored (see exitcode.go).
func runRollout(ctx context.Context, e env, args []string) error {
	fs, o := newRolloutCmd()
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	if err := o.applyConfig(fs); err != nil {
		return err
	}
	jobs, envs, err := o.jobs()
	if err != nil {
		return err
	}
	if err := o.prompt.apply(&o.agent); err != nil {
		return err
	}
	pol, err := policy.Open(o.policy, o.tokPath, o.workers, o.agent.Context, o.suite)
	if err != nil {
		return err
	}
	defer pol.Close()
	a, err := pol.Agent(ctx, o.agent)
	if err != nil {
		return err
	}
	if a, err = a.WithSummaryOverride(o.override); err != nil {
		return fmt.Errorf("--summary-override: %w", err)
	}
	meta := map[string]string{
		"env": o.env, "split": o.split, "policy": o.policy, "tokenizer": pol.TokName,
		"context": strconv.Itoa(o.agent.Context), "reserve": strconv.Itoa(o.agent.Reserve),
		"keep_last": strconv.Itoa(o.agent.KeepLast), "no_compaction": strconv.FormatBool(o.agent.NoCompaction),
	}
	if pol.Chat != "" {
		meta["chat_template"] = pol.Chat
	}
	f, err := os.Create(o.out)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	defer f.Close()
	st, err := playEpisodes(ctx, e, "rollout", f, rollout.Config{Workers: o.workers, EpisodeTimeout: o.timeout, Meta: meta},
		jobs, a, envs, nil)
	fmt.Fprintln(e.stdout, st)
	if err == nil {
		err = infraOutcome(st.Episodes, st.InfraErrors())
	}
	return err
}

// rolloutOptions are the flags of `compactrl rollout`.
type rolloutOptions struct {
	env, split, policy string
	episodes, workers  int
	seed               int64
	out, tokPath       string
	prompt             promptFlags // --system-prompt
	timeout            time.Duration
	agent              agent.Config
	override           agent.SummaryOverride
	config             string       // --config: a run config's suite and agent
	suite              policy.Suite // --env or --config's suite, opened
}

func newRolloutCmd() (*cmdLine, *rolloutOptions) {
	fs := newCmdLine("rollout", "rollout --out FILE [flags]")
	fs.examples = []string{"compactrl rollout --policy scripted:p=0.7 --episodes 200 --out runs/lossy.jsonl",
		"compactrl rollout --policy checkpoint:models/vault-base --episodes 64 --no-compaction --out runs/base-single.jsonl",
		"compactrl rollout --config configs/demo.yaml --policy checkpoint:models/vault-base --episodes 512 --summary-override expert --out runs/base-expert.jsonl"}
	o := &rolloutOptions{agent: agent.DefaultConfig()} // the system prompt: --config's, else the suite's (tasks.SystemPrompter)
	fs.StringVar(&o.config, "config", "", "take the suite and the agent loop's settings (eval_temperature as the temperature) from a run config `FILE.yaml` (configs/demo.yaml, configs/vault-long.yaml) instead of --env and the agent flags")
	fs.StringVar(&o.env, "env", defaultEnv, "environment: a generated suite NAME[:KNOBS] (registered: "+strings.Join(tasks.SuiteNames(), ", ")+"); KNOBS are name=value,… (a bad one lists the suite's)")
	fs.StringVar(&o.split, "split", "test", "seed range of the suite (vault: train, or test: its first 1,000,000 seeds from suite.test_seed_start, which lie in the development range of run.eval_range, not the sealed test range)")
	fs.StringVar(&o.policy, "policy", "scripted", "policy: scripted[:OPTS] (the suite's scripted policy; vault's expert takes p=P,seed=S, each fact kept in a summary with probability P) or checkpoint:DIR")
	fs.IntVar(&o.episodes, "episodes", 100, "episodes to play")
	fs.Int64Var(&o.seed, "seed", 0, "first episode's offset in the split's seed range; episode i uses seed start+S+i")
	fs.IntVar(&o.workers, "workers", runtime.GOMAXPROCS(0), "episodes played concurrently")
	fs.StringVar(&o.out, "out", "", "episode JSONL file to write (required)")
	fs.StringVar(&o.tokPath, "tokenizer", "", "tokenizer.json or a GGUF file (default: the checkpoint's, a GGUF checkpoint's own, else the suite's own: vault's built-in BPE)")
	fs.StringVar(&o.prompt.systemPath, "system-prompt", "", "file holding the system prompt (default: --config's, else the suite's; configs/prompts/vault-fewshot.txt is one a base instruct model follows)")
	bindAgentFlags(fs.FlagSet, &o.agent)
	fs.Func("summary-override", "evaluation only: replace every summary by `MODE`: expert (the p = 1 expert's summary of everything seen so far), drop-one (the same with one asked fact already seen written ?), empty, or none; the episodes record it and are not trainable", func(v string) error {
		var err error
		o.override, err = agent.ParseSummaryOverride(v)
		return err
	})
	fs.DurationVar(&o.timeout, "episode-timeout", 0, "wall-clock limit per episode (0: none); past it the episode is infra_error")
	return fs, o
}

// agentFlagNames are the flags bindAgentFlags binds.
func agentFlagNames() map[string]bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c := agent.DefaultConfig()
	bindAgentFlags(fs, &c)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}

// applyConfig reads --config: the run config's suite (opened) and agent
// settings, with its eval_temperature as the temperature and its test
// seeds as the test split's start. --env and the agent flags cannot be
// given with it.
func (o *rolloutOptions) applyConfig(fs *cmdLine) error {
	if o.config == "" {
		return nil
	}
	agentFlags := agentFlagNames()
	var clash []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "env" || agentFlags[f.Name] {
			clash = append(clash, "--"+f.Name)
		}
	})
	if len(clash) > 0 {
		return fs.usageErr("--config sets the suite and the agent loop: drop %s", strings.Join(clash, ", "))
	}
	cfg, err := recipe.LoadConfig(o.config)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	name, s, err := cfg.Suite.Open()
	if err != nil {
		return fmt.Errorf("--config %s: suite: %w", o.config, err)
	}
	sp, ok := s.(tasks.SeedSplitter)
	if !ok {
		return fmt.Errorf("--config %s: the %s suite's task ids are not seeds in splits (tasks.SeedSplitter)", o.config, name)
	}
	train, _, err := sp.Split("train")
	if err != nil {
		return fmt.Errorf("--config %s: %w", o.config, err)
	}
	test, _, err := sp.Split("test")
	if err != nil {
		return fmt.Errorf("--config %s: %w", o.config, err)
	}
	if cfg.Suite.TestSeedStart != test || cfg.Suite.TrainSeedStart != train {
		return fmt.Errorf("--config %s: seeds train %d / test %d differ from the %s splits' %d / %d, which rollout plays", o.config,
			cfg.Suite.TrainSeedStart, cfg.Suite.TestSeedStart, name, train, test)
	}
	o.agent = cfg.Agent.Config
	o.agent.Temperature = cfg.Agent.EvalTemperature
	o.suite = policy.Suite{Suite: s, Name: name}
	o.env = name + ":config=" + o.config
	return nil
}

// defaultEnv is rollout's --env by default, and the suite whose tokenizer
// show decodes an episode with when the episode names no suite.
const defaultEnv = "vault"

// openEnv opens --env, a registered generated suite NAME[:KNOBS], with its
// system prompt (tasks.SystemPrompter) as the agent's.
func (o *rolloutOptions) openEnv() error {
	name, s, ok, err := tasks.OpenSuite(o.env)
	switch {
	case err != nil:
		return fmt.Errorf("--env: %w", err)
	case !ok:
		return fmt.Errorf("--env %q: unknown environment (available: %s)", name, strings.Join(tasks.SuiteNames(), ", "))
	}
	if p, ok := s.(tasks.SystemPrompter); ok {
		o.agent.SystemPrompt = p.SystemPrompt()
	}
	o.suite = policy.Suite{Suite: s, Name: name}
	return nil
}

// episodeSuite is the suite of an episode's meta "env" (rollout's --env),
// else defaultEnv: show decodes with its tokenizer.
func episodeSuite(meta map[string]string) policy.Suite {
	if name, s, ok, err := tasks.OpenSuite(meta["env"]); ok && err == nil {
		return policy.Suite{Suite: s, Name: name}
	}
	name, s, _, _ := tasks.OpenSuite(defaultEnv)
	return policy.Suite{Suite: s, Name: name}
}

// jobs checks the flags, opens --env unless --config opened a suite, and
// returns the jobs (--episodes seeds from the split's start + --seed) and
// the environment of each seed (the suite's task ids are seeds,
// tasks.SeedSplitter).
func (o *rolloutOptions) jobs() ([]rollout.Job, rollout.EnvFactory, error) {
	switch {
	case o.out == "":
		return nil, nil, errors.New("--out FILE is required")
	case o.episodes < 0:
		return nil, nil, fmt.Errorf("--episodes %d must be ≥ 0", o.episodes)
	case o.seed < 0:
		return nil, nil, fmt.Errorf("--seed %d must be ≥ 0", o.seed)
	}
	if o.suite.Suite == nil {
		if err := o.openEnv(); err != nil {
			return nil, nil, err
		}
	}
	s := o.suite
	sp, ok := s.Suite.(tasks.SeedSplitter)
	if !ok {
		return nil, nil, fmt.Errorf("--env %s: the suite's task ids are not seeds in splits (tasks.SeedSplitter)", s.Name)
	}
	start, end, err := sp.Split(o.split)
	if err != nil {
		return nil, nil, fmt.Errorf("--split: %w", err)
	}
	first := start + o.seed
	if last := first + int64(o.episodes); last > end {
		return nil, nil, fmt.Errorf("--seed %d + --episodes %d runs past the %s split's %d seeds", o.seed, o.episodes, o.split, end-start)
	}
	envs := func(seed int64) (agent.Environment, error) { return s.Env(strconv.FormatInt(seed, 10)) }
	return rollout.Jobs(s.Name, first, o.episodes), envs, nil
}

// playEpisodes plays jobs into the episode JSONL file f (through wrap's
// sink when wrap is not nil) with a progress bar named label, and closes
// f: its close error is the run's when the run had none.
func playEpisodes(ctx context.Context, e env, label string, f io.WriteCloser, cfg rollout.Config, jobs []rollout.Job, r rollout.Runner, envs rollout.EnvFactory, wrap func(rollout.Sink) rollout.Sink) (rollout.Stats, error) {
	var sink rollout.Sink = rollout.NewJSONLSink(f)
	if wrap != nil {
		sink = wrap(sink)
	}
	bar := progress.New(e.stderr, label, len(jobs))
	st, err := rollout.Run(ctx, cfg, jobs, r, envs, sink, rolloutProgress(bar, len(jobs)))
	bar.Done()
	if cerr := f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("--out: %w", cerr)
	}
	return st, err
}

// rolloutProgress shows a rollout's running statistics on its bar.
func rolloutProgress(bar *progress.Bar, total int) func(rollout.Stats) {
	return func(s rollout.Stats) {
		bar.Update(s.Episodes, total, fmt.Sprintf("success %.3f  compactions %.2f  %.1f ep/s", s.SuccessRate(), s.MeanCompactions(), s.EpisodesPerSecond()))
	}
}

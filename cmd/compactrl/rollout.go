package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/infer/local"
	"github.com/compactrl/compactrl/internal/progress"
	"github.com/compactrl/compactrl/model"
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
	pol, err := openPolicy(o.policy, o.tokPath, o.workers, o.agent.Context, o.suite)
	if err != nil {
		return err
	}
	defer pol.close()
	var a *agent.Agent
	if pol.format != nil {
		a, err = agent.NewWithFormat(ctx, o.agent, agent.Local(pol.tok), pol.format, pol.sampler)
	} else {
		a, err = agent.New(ctx, o.agent, agent.Local(pol.tok), pol.tmpl, pol.sampler)
	}
	if err != nil {
		return err
	}
	if a, err = a.WithSummaryOverride(o.override); err != nil {
		return fmt.Errorf("--summary-override: %w", err)
	}
	meta := map[string]string{
		"env": o.env, "split": o.split, "policy": o.policy, "tokenizer": pol.tokName,
		"context": strconv.Itoa(o.agent.Context), "reserve": strconv.Itoa(o.agent.Reserve),
		"keep_last": strconv.Itoa(o.agent.KeepLast), "no_compaction": strconv.FormatBool(o.agent.NoCompaction),
	}
	if pol.chat != "" {
		meta["chat_template"] = pol.chat
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
	suite              rolloutSuite // --env or --config's suite, opened
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
	o.suite = rolloutSuite{s, name}
	o.env = name + ":config=" + o.config
	return nil
}

// defaultEnv is rollout's --env by default, and the suite whose tokenizer
// show decodes an episode with when the episode names no suite.
const defaultEnv = "vault"

// rolloutSuite is a generated suite opened, with its name.
type rolloutSuite struct {
	tasks.Suite
	name string
}

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
	o.suite = rolloutSuite{s, name}
	return nil
}

// episodeSuite is the suite of an episode's meta "env" (rollout's --env),
// else defaultEnv: show decodes with its tokenizer.
func episodeSuite(meta map[string]string) rolloutSuite {
	if name, s, ok, err := tasks.OpenSuite(meta["env"]); ok && err == nil {
		return rolloutSuite{s, name}
	}
	name, s, _, _ := tasks.OpenSuite(defaultEnv)
	return rolloutSuite{s, name}
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
		return nil, nil, fmt.Errorf("--env %s: the suite's task ids are not seeds in splits (tasks.SeedSplitter)", s.name)
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
	return rollout.Jobs(s.name, first, o.episodes), envs, nil
}

// policy is a sampler with the tokenizer it speaks.
type policy struct {
	sampler infer.Sampler
	tok     agent.LocalTokenizer
	tmpl    agent.Template
	format  agent.Format // a real model's chat format (a tokenizer without compactrl's six ids); nil: tmpl
	chat    string       // which template lays out the turns, for the episodes' meta
	tokName string
	vocab   int
	close   func()
}

// openPolicy parses --policy: "scripted[:OPTS]" (the suite's
// tasks.Scripter) or "checkpoint:DIR".
func openPolicy(spec, tokPath string, workers, contextTokens int, s rolloutSuite) (*policy, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "scripted":
		return scriptedPolicy(spec, arg, tokPath, s)
	case "checkpoint":
		return checkpointPolicy(spec, arg, tokPath, workers, contextTokens, s)
	}
	return nil, fmt.Errorf("--policy %q: want scripted[:OPTS] or checkpoint:DIR", spec)
}

// scriptedPolicy is the suite's scripted policy with options opts.
func scriptedPolicy(spec, opts, tokPath string, s rolloutSuite) (*policy, error) {
	sc, ok := s.Suite.(tasks.Scripter)
	if !ok {
		return nil, fmt.Errorf("--policy %s: the %s suite has no scripted policy (tasks.Scripter)", spec, s.name)
	}
	pol, err := loadTokenizer(tokPath, "", s)
	if err != nil {
		return nil, err
	}
	if pol.format != nil {
		return nil, fmt.Errorf("--policy %s: the scripted policy reads compactrl's six-token layout; %s lays turns out with a chat template (%s)", spec, tokPath, pol.chat)
	}
	if pol.sampler, err = sc.Scripted(opts, pol.tok, pol.tmpl); err != nil {
		return nil, fmt.Errorf("--policy %s: %w", spec, err)
	}
	return pol, nil
}

// checkpointPolicy samples the built-in model saved in dir, batching up to
// workers sequences; its tokenizer must fit the model's vocabulary and the
// model the context of contextTokens.
func checkpointPolicy(spec, dir, tokPath string, workers, contextTokens int, suite rolloutSuite) (*policy, error) {
	if dir == "" {
		return nil, errors.New("--policy checkpoint:DIR needs a directory")
	}
	m, err := model.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	pol, err := loadTokenizer(tokPath, dir, suite)
	if err != nil {
		return nil, err
	}
	if v := pol.vocab; v > m.Cfg.Vocab {
		return nil, fmt.Errorf("--policy %s: tokenizer %s has %d ids, the model only %d", spec, pol.tokName, v, m.Cfg.Vocab)
	}
	if m.Cfg.MaxSeq < contextTokens {
		return nil, fmt.Errorf("--policy %s: model accepts %d tokens, below --context %d", spec, m.Cfg.MaxSeq, contextTokens)
	}
	s, err := local.New(m, local.Options{MaxBatch: max(workers, 1)})
	if err != nil {
		return nil, fmt.Errorf("--policy %s: %w", spec, err)
	}
	pol.sampler, pol.close = s, s.Close
	return pol, nil
}

// loadTokenizer returns --tokenizer, else DIR/tokenizer.json or its
// parent's (a checkpoint inside a run directory), else the suite's own
// (tasks.DefaultTokenizer), named NAME-default.
func loadTokenizer(path, ckpt string, s rolloutSuite) (*policy, error) {
	if path == "" && ckpt != "" && format.IsGGUF(ckpt) {
		path = ckpt // a GGUF model carries its vocabulary and chat template
	}
	if path == "" && ckpt != "" {
		for _, p := range checkpointTokenizers(ckpt) {
			if _, err := os.Stat(p); err == nil {
				path = p
				break
			}
		}
	}
	pol := &policy{close: func() {}}
	if path == "" {
		dt, ok := s.Suite.(tasks.DefaultTokenizer)
		if !ok {
			return nil, fmt.Errorf("--tokenizer is required: the %s suite has no tokenizer of its own (tasks.DefaultTokenizer)", s.name)
		}
		tok, tmpl, err := dt.DefaultTokenizer()
		if err != nil {
			return nil, fmt.Errorf("%s suite's tokenizer: %w", s.name, err)
		}
		pol.tok, pol.tmpl, pol.tokName, pol.vocab = tok, tmpl, s.name+"-default", tok.VocabSize()
		return pol, nil
	}
	tok, err := format.ReadTokenizer(path)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %w", err)
	}
	pol.tok, pol.tokName, pol.vocab = tok, path, tok.VocabSize()
	if pol.tmpl, err = agent.TemplateFrom(tok.SpecialID); err == nil {
		return pol, nil
	}
	// A real model's tokenizer: its own chat template lays the turns out.
	if pol.format, pol.chat, err = agent.ChooseFormat(tok, path, ""); err != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", path, err)
	}
	return pol, nil
}

// checkpointTokenizers are the places a checkpoint's tokenizer.json may be, nearest first: the
// checkpoint directory, its parent (a base policy directory or a run's policy), and the run
// directory of a training checkpoint RUN/checkpoints/iter-N/policy.
func checkpointTokenizers(ckpt string) []string {
	ckpt = filepath.Clean(ckpt)
	out := []string{filepath.Join(ckpt, "tokenizer.json"), filepath.Join(filepath.Dir(ckpt), "tokenizer.json")}
	iter := filepath.Dir(ckpt)
	if filepath.Base(ckpt) == "policy" && strings.HasPrefix(filepath.Base(iter), "iter-") && filepath.Base(filepath.Dir(iter)) == "checkpoints" {
		out = append(out, filepath.Join(filepath.Dir(filepath.Dir(iter)), "tokenizer.json"))
	}
	return out
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

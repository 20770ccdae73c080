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
	"github.com/compactrl/compactrl/env/vault"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/infer/local"
	"github.com/compactrl/compactrl/internal/progress"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/recipe"
	"github.com/compactrl/compactrl/rollout"
	"github.com/compactrl/compactrl/tokenizer"
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
	pol, err := openPolicy(o.policy, o.tokPath, o.workers, o.agent.Window)
	if err != nil {
		return err
	}
	defer pol.close()
	a, err := agent.New(o.agent, pol.tok, pol.tmpl, pol.sampler)
	if err != nil {
		return err
	}
	if a, err = a.WithSummaryOverride(o.override); err != nil {
		return fmt.Errorf("--summary-override: %w", err)
	}
	meta := map[string]string{
		"env": o.env, "split": o.split, "policy": o.policy, "tokenizer": pol.tokName,
		"context": strconv.Itoa(o.agent.Window), "reserve": strconv.Itoa(o.agent.Reserve),
		"keep_last": strconv.Itoa(o.agent.KeepLast), "no_compaction": strconv.FormatBool(o.agent.NoCompaction),
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
	timeout            time.Duration
	agent              agent.Config
	override           agent.SummaryOverride
	config             string        // --config: a run config's suite and agent
	suite              *vault.Config // from --config, in place of --env's knobs
}

func newRolloutCmd() (*cmdLine, *rolloutOptions) {
	fs := newCmdLine("rollout", "rollout --out FILE [flags]")
	fs.examples = []string{"compactrl rollout --policy scripted:p=0.7 --episodes 200 --out runs/lossy.jsonl",
		"compactrl rollout --policy checkpoint:models/vault-base --episodes 64 --no-compaction --out runs/base-single.jsonl",
		"compactrl rollout --config configs/demo.yaml --policy checkpoint:models/vault-base --episodes 512 --summary-override expert --out runs/base-expert.jsonl"}
	o := &rolloutOptions{agent: agent.DefaultConfig()}
	o.agent.SystemPrompt = vault.SystemPrompt
	fs.StringVar(&o.config, "config", "", "take the suite and the agent loop's settings (eval_temperature as the temperature) from a run config `FILE.yaml` (configs/demo.yaml, configs/vault-long.yaml) instead of --env and the agent flags")
	fs.StringVar(&o.env, "env", "vault", "environment: vault[:files=5,pages=3,facts=4,distractors=6,noise=5,partial=false]")
	fs.StringVar(&o.split, "split", "test", "seed range of the environment: train or test")
	fs.StringVar(&o.policy, "policy", "scripted", "policy: scripted[:p=P,seed=S] (the expert, each fact kept in a summary with probability P) or checkpoint:DIR")
	fs.IntVar(&o.episodes, "episodes", 100, "episodes to play")
	fs.Int64Var(&o.seed, "seed", 0, "first episode's offset in the split's seed range; episode i uses seed start+S+i")
	fs.IntVar(&o.workers, "workers", runtime.GOMAXPROCS(0), "episodes played concurrently")
	fs.StringVar(&o.out, "out", "", "episode JSONL file to write (required)")
	fs.StringVar(&o.tokPath, "tokenizer", "", "tokenizer.json (default: the checkpoint's, else the vault suite's built-in BPE)")
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

// applyConfig reads --config: the run config's suite and agent settings,
// with its eval_temperature as the temperature and its test seeds as the
// test split's start. --env and the agent flags cannot be given with it.
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
	if err := cfg.Suite.Config.Validate(); err != nil {
		return fmt.Errorf("--config %s: suite: %w", o.config, err)
	}
	if cfg.Suite.TestSeedStart != vault.TestSeeds().Start || cfg.Suite.TrainSeedStart != vault.TrainSeeds().Start {
		return fmt.Errorf("--config %s: seeds train %d / test %d differ from the vault splits' %d / %d, which rollout plays", o.config,
			cfg.Suite.TrainSeedStart, cfg.Suite.TestSeedStart, vault.TrainSeeds().Start, vault.TestSeeds().Start)
	}
	o.agent = cfg.Agent.Config
	o.agent.Temperature = cfg.Agent.EvalTemperature
	o.suite = &cfg.Suite.Config
	o.env = "vault:config=" + o.config
	return nil
}

// jobs checks the flags and returns the jobs (--episodes seeds from
// the split's start + --seed) and the environment of each seed.
func (o *rolloutOptions) jobs() ([]rollout.Job, rollout.EnvFactory, error) {
	switch {
	case o.out == "":
		return nil, nil, errors.New("--out FILE is required")
	case o.episodes < 0:
		return nil, nil, fmt.Errorf("--episodes %d must be ≥ 0", o.episodes)
	case o.seed < 0:
		return nil, nil, fmt.Errorf("--seed %d must be ≥ 0", o.seed)
	}
	name, knobs, _ := strings.Cut(o.env, ":")
	if name != "vault" {
		return nil, nil, fmt.Errorf("--env %q: unknown environment (available: vault)", name)
	}
	var vc vault.Config
	if o.suite != nil {
		vc = *o.suite
	} else {
		var err error
		if vc, err = vault.ParseConfig(knobs); err != nil {
			return nil, nil, fmt.Errorf("--env: %w", err)
		}
	}
	rng, err := vault.Split(o.split)
	if err != nil {
		return nil, nil, fmt.Errorf("--split: %w", err)
	}
	first := rng.Start + o.seed
	if last := first + int64(o.episodes); last > rng.End {
		return nil, nil, fmt.Errorf("--seed %d + --episodes %d runs past the %s split's %d seeds", o.seed, o.episodes, o.split, rng.End-rng.Start)
	}
	envs := func(s int64) (agent.Environment, error) { return vault.New(vc, s) }
	return rollout.Jobs(name, first, o.episodes), envs, nil
}

// policy is a sampler with the tokenizer it speaks.
type policy struct {
	sampler infer.Sampler
	tok     agent.Tokenizer
	tmpl    agent.Template
	tokName string
	vocab   int
	close   func()
}

// openPolicy parses --policy: "scripted[:p=P,seed=S]" or "checkpoint:DIR".
func openPolicy(spec, tokPath string, workers, window int) (*policy, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "scripted":
		return scriptedPolicy(spec, arg, tokPath)
	case "checkpoint":
		return checkpointPolicy(spec, arg, tokPath, workers, window)
	}
	return nil, fmt.Errorf("--policy %q: want scripted[:p=P] or checkpoint:DIR", spec)
}

// scriptedPolicy is the vault suite's scripted expert; arg is its options
// "p=P,seed=S" (defaults p = 1, seed 0).
func scriptedPolicy(spec, arg, tokPath string) (*policy, error) {
	p, seed := 1.0, int64(0)
	if arg != "" {
		for _, kv := range strings.Split(arg, ",") {
			k, v, ok := strings.Cut(kv, "=")
			var err error
			switch {
			case !ok:
				err = fmt.Errorf("%q: want name=value", kv)
			case k == "p":
				p, err = strconv.ParseFloat(v, 64)
			case k == "seed":
				seed, err = strconv.ParseInt(v, 10, 64)
			default:
				err = fmt.Errorf("unknown option %q (p, seed)", k)
			}
			if err != nil {
				return nil, fmt.Errorf("--policy %s: %w", spec, err)
			}
		}
	}
	pol, err := loadTokenizer(tokPath, "")
	if err != nil {
		return nil, err
	}
	ex, err := vault.NewExpert(pol.tok, pol.tmpl, p, seed)
	if err != nil {
		return nil, fmt.Errorf("--policy %s: %w", spec, err)
	}
	pol.sampler = ex
	return pol, nil
}

// checkpointPolicy samples the built-in model saved in dir, batching up to
// workers sequences; its tokenizer must fit the model's vocabulary and the
// model the context window.
func checkpointPolicy(spec, dir, tokPath string, workers, window int) (*policy, error) {
	if dir == "" {
		return nil, errors.New("--policy checkpoint:DIR needs a directory")
	}
	m, err := model.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	pol, err := loadTokenizer(tokPath, dir)
	if err != nil {
		return nil, err
	}
	if v := pol.vocab; v > m.Cfg.Vocab {
		return nil, fmt.Errorf("--policy %s: tokenizer %s has %d ids, the model only %d", spec, pol.tokName, v, m.Cfg.Vocab)
	}
	if m.Cfg.MaxSeq < window {
		return nil, fmt.Errorf("--policy %s: model accepts %d tokens, below --context %d", spec, m.Cfg.MaxSeq, window)
	}
	s, err := local.New(m, local.Options{MaxBatch: max(workers, 1)})
	if err != nil {
		return nil, fmt.Errorf("--policy %s: %w", spec, err)
	}
	pol.sampler, pol.close = s, s.Close
	return pol, nil
}

// loadTokenizer returns --tokenizer, else DIR/tokenizer.json or its
// parent's (a checkpoint inside a run directory), else the vault default.
func loadTokenizer(path, ckpt string) (*policy, error) {
	if path == "" && ckpt != "" {
		for _, p := range []string{filepath.Join(ckpt, "tokenizer.json"), filepath.Join(filepath.Dir(ckpt), "tokenizer.json")} {
			if _, err := os.Stat(p); err == nil {
				path = p
				break
			}
		}
	}
	pol := &policy{close: func() {}}
	if path == "" {
		tok, tmpl, err := vault.DefaultTokenizer()
		if err != nil {
			return nil, err
		}
		pol.tok, pol.tmpl, pol.tokName, pol.vocab = tok, tmpl, "vault-default", tok.VocabSize()
		return pol, nil
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %w", err)
	}
	tmpl, err := agent.TemplateFrom(tok.SpecialID)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", path, err)
	}
	pol.tok, pol.tmpl, pol.tokName, pol.vocab = tok, tmpl, path, tok.VocabSize()
	return pol, nil
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

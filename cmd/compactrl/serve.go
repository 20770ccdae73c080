package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/vault"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/rollout"
	"github.com/compactrl/compactrl/sandbox"
	"github.com/compactrl/compactrl/serve"
)

// samplerWrap decorates the sampler engineAgent builds (serve times every
// engine call with it).
type samplerWrap = func(infer.Sampler) infer.Sampler

func wrapSampler(s infer.Sampler, wraps []samplerWrap) infer.Sampler {
	for _, w := range wraps {
		s = w(s)
	}
	return s
}

// runServe is `compactrl serve`: the agent loop with compaction as an HTTP
// rollout service for an external trainer (package serve; docs/scale.md).
// Each POST /v1/rollouts names the engine to sample from (slime: its
// SGLang router); tasks, tokenizer, template, sandbox and the defaults of
// the agent budget come from the same flags as `compactrl eval`.
func runServe(ctx context.Context, e env, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	def := agent.DefaultConfig()
	listen := fs.String("listen", "127.0.0.1:8090", "address to listen on (host:port)")
	tasksPath := fs.String("tasks", "", "Harbor task directory or a directory of them, a SWE-bench instances .jsonl, or vault[:knobs] (the built-in suite; task_id = the seed) (required)")
	repos := fs.String("repos", "", "SWE-bench: directory of local git repositories (<owner>__<name>, <owner>/<name> or <name>)")
	maxEpisodes := fs.Int("max-episodes", 64, "episodes played at once")
	queue := fs.Int("queue", -1, "requests waiting for a slot beyond --max-episodes (past it: 429); -1: 4 × --max-episodes")
	retryAfter := fs.Duration("retry-after", 5*time.Second, "Retry-After of a 429")
	drainTimeout := fs.Duration("drain-timeout", 0, "on SIGTERM, how long to let in-flight episodes finish before cancelling them (0: no limit)")
	maxConc := fs.Int("engine-concurrency", 0, "in-flight requests per engine (0: the pool's default)")
	tokPath := fs.String("tokenizer", "", "tokenizer.json of the policy (default: the engine's /tokenize; required for sglang)")
	tmplSpec := fs.String("template", "", "template token ids system,user,assistant,observation,summary,end (default: looked up by name in --tokenizer)")
	chatTmpl := fs.String("chat-template", "", chatTemplateUsage)
	engTimeout := fs.Duration("engine-timeout", defaultEngineTimeout, "one engine request's time limit")
	engRetries := fs.Int("engine-retries", defaultEngineRetries, "attempts per engine request (across endpoints)")
	seed := fs.Int64("seed", 0, "seed of the engine pool's retry jitter")
	window := fs.Int("context", 32768, "default context window C in tokens (request: agent.context)")
	reserve := fs.Int("reserve", 8192, "default compaction reserve T_comp (request: agent.reserve)")
	keep := fs.Int("keep-last", def.KeepLast, "default steps k re-included after a compaction (request: agent.keep_last)")
	maxComp := fs.Int("max-compactions", def.MaxCompactions, "default compactions per episode (request: agent.max_compactions)")
	maxTurns := fs.Int("max-turns", def.MaxTurns, "default policy actions per episode (request: agent.max_turns)")
	maxAction := fs.Int("max-action-tokens", 1024, "default tokens per action (request: sampling.max_new_tokens)")
	maxSummary := fs.Int("max-summary-tokens", 2048, "default tokens per summary (request: agent.max_summary_tokens)")
	maxObs := fs.Int("max-observation-tokens", 0, "default observation cap (0: the most the reserve allows)")
	maxFormat := fs.Int("max-format-errors", def.MaxFormatErrors, "default invalid actions in a row that end an episode")
	noComp := fs.Bool("no-compaction", false, "default: never compact (single-window baseline)")
	temp := fs.Float64("temperature", 1, "default sampling temperature (request: sampling.temperature)")
	topP := fs.Float64("top-p", 1, "default nucleus top-p (request: sampling.top_p)")
	sysPath := fs.String("system-prompt", "", "file holding the system prompt (default: eval's, or the vault suite's)")
	sumInstr := fs.String("summary-instruction", def.SummaryInstruction, "the summary instruction q_sum")
	resumeText := fs.String("resume-text", def.ResumeText, "the text that introduces the summary after a compaction")
	noHint := fs.Bool("no-format-hint", false, "do not append the action-format hint to each task")
	runnerName := fs.String("runner", "bwrap", "sandbox: bwrap, docker or podman")
	image := fs.String("image", "", "docker/podman: image for tasks without [environment] docker_image")
	cmdTimeout := fs.Duration("command-timeout", 120*time.Second, "limit of one command")
	agentTimeout := fs.Duration("agent-timeout", 0, "agent phase limit (0: the task's [agent] timeout_sec; SWE-bench 30m)")
	episodeTimeout := fs.Duration("episode-timeout", 0, "wall-clock limit of a whole episode, past it infra_error (0: none)")
	memMB := fs.Int64("memory-mb", 0, "address-space limit per sandboxed process in MiB (0: the task's, else 4096)")
	procs := fs.Int("max-procs", 0, "processes+threads per sandbox (0: 1024)")
	network := fs.Bool("network", false, "give sandboxes the host's network (Harbor: only tasks with allow_internet)")
	var binds stringList
	fs.Var(&binds, "bind", "host path to expose read-only at the same place in bwrap sandboxes (repeatable)")
	cacheDir := fs.String("cache", "", "host directory shared by all sandboxes as a build cache")
	keepWS := fs.Bool("keep-workspaces", false, "leave episode workspaces on disk")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: compactrl serve --tasks DIR|FILE.jsonl|vault[:knobs] (--template IDS | --tokenizer FILE) [--listen ADDR] [--max-episodes N] [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case *tasksPath == "":
		return errors.New("--tasks DIR|FILE.jsonl|vault[:knobs] is required")
	case *tokPath == "" && *tmplSpec == "":
		return errors.New("--template system,user,assistant,observation,summary,end (token ids) or --tokenizer FILE is required")
	case *maxEpisodes < 1:
		return fmt.Errorf("--max-episodes %d must be ≥ 1", *maxEpisodes)
	case *queue < -1:
		return fmt.Errorf("--queue %d must be ≥ 0 (or -1)", *queue)
	case *episodeTimeout < 0 || *drainTimeout < 0 || *retryAfter < 0:
		return errors.New("--episode-timeout, --drain-timeout and --retry-after must be ≥ 0")
	}
	if *queue == -1 {
		*queue = 4 * *maxEpisodes
	}

	cfg := def
	cfg.Window, cfg.Reserve, cfg.KeepLast = *window, *reserve, *keep
	cfg.MaxCompactions, cfg.MaxTurns, cfg.MaxFormatErrors = *maxComp, *maxTurns, *maxFormat
	cfg.MaxActionTokens, cfg.MaxSummaryTokens, cfg.MaxObservationTokens = *maxAction, *maxSummary, *maxObs
	cfg.NoCompaction = *noComp
	cfg.Temperature, cfg.TopP = *temp, *topP
	cfg.SystemPrompt = evalSystemPrompt
	cfg.SummaryInstruction, cfg.ResumeText = *sumInstr, *resumeText

	f := &serveFactory{tokPath: *tokPath, tmplSpec: *tmplSpec, chatTmpl: *chatTmpl, maxConc: *maxConc, seed: *seed,
		flags: engineFlags{timeout: *engTimeout, retries: *engRetries}, agents: map[serveKey]*agent.Agent{}}
	if err := f.flags.validate(); err != nil {
		return err
	}
	if *chatTmpl != "" && (*tokPath == "" || *tmplSpec != "") {
		return errors.New("--chat-template needs --tokenizer and excludes --template")
	}
	if name, knobs, _ := strings.Cut(*tasksPath, ":"); name == "vault" {
		vc, err := vault.ParseConfig(knobs)
		if err != nil {
			return fmt.Errorf("--tasks vault: %w", err)
		}
		f.vault = &vc
		cfg.SystemPrompt = vault.SystemPrompt
	} else {
		var runner sandbox.Runner
		switch *runnerName {
		case "bwrap":
			b := sandbox.Bubblewrap{ROBinds: binds}
			if err := b.Available(); err != nil {
				return fmt.Errorf("--runner bwrap: %w", err)
			}
			runner = b
		case "docker", "podman":
			runner = sandbox.Container{Engine: *runnerName, DefaultImage: *image}
		default:
			return fmt.Errorf("--runner %q: want bwrap, docker or podman", *runnerName)
		}
		if *cacheDir != "" {
			if err := os.MkdirAll(*cacheDir, 0o755); err != nil {
				return fmt.Errorf("--cache: %w", err)
			}
		}
		src := taskSource{
			limits: sandbox.Limits{MemoryBytes: *memMB << 20, Processes: *procs},
			runner: runner, image: *image, repos: *repos, cmdTimeout: *cmdTimeout, agentTimeout: *agentTimeout,
			cache: *cacheDir, keep: *keepWS, noHint: *noHint, network: *network,
		}
		tasks, skipped, err := src.load(*tasksPath)
		if err != nil {
			return err
		}
		for _, s := range skipped {
			fmt.Fprintf(e.stderr, "serve: skipping %s: %s\n", s.Task, s.Reason)
		}
		if len(tasks) == 0 {
			return fmt.Errorf("--tasks %s: no task can run here (%d skipped)", *tasksPath, len(skipped))
		}
		f.tasks = map[string]evalTask{}
		for _, t := range tasks {
			f.tasks[t.name] = t
		}
	}
	if *sysPath != "" {
		b, err := os.ReadFile(*sysPath)
		if err != nil {
			return fmt.Errorf("--system-prompt: %w", err)
		}
		cfg.SystemPrompt = strings.TrimSpace(string(b))
	}

	srv, err := serve.New(serve.Config{MaxInFlight: *maxEpisodes, MaxQueue: *queue, EpisodeTimeout: *episodeTimeout,
		RetryAfter: *retryAfter, Agent: cfg}, f)
	if err != nil {
		return err
	}
	f.metrics = srv.Metrics()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	n := len(f.tasks)
	if f.vault != nil {
		n = -1
	}
	fmt.Fprintf(e.stdout, "serving on http://%s (tasks %s: %s; %d episodes at once, queue %d)\n", ln.Addr(), *tasksPath,
		map[bool]string{true: "vault seeds", false: strconv.Itoa(n) + " tasks"}[n < 0], *maxEpisodes, *queue)
	err = srv.Serve(ctx, ln, *drainTimeout)
	fmt.Fprintln(e.stdout, "drained")
	return err
}

// serveFactory implements serve.Factory with eval's task loading and
// engineAgent; agents are cached by engine and configuration (a training
// run sends one of each).
type serveFactory struct {
	tokPath, tmplSpec string
	chatTmpl          string // --chat-template: a real model's chat format with --tokenizer
	flags             engineFlags
	maxConc           int
	seed              int64
	vault             *vault.Config
	tasks             map[string]evalTask
	metrics           *serve.Metrics

	mu     sync.Mutex
	agents map[serveKey]*agent.Agent
}

type serveKey struct {
	e   serve.Engine
	cfg agent.Config
}

// maxCachedAgents bounds the agent cache; past it the cache starts over.
const maxCachedAgents = 64

func (f *serveFactory) Runner(ctx context.Context, e serve.Engine, cfg agent.Config) (rollout.Runner, string, error) {
	key := serveKey{e, cfg}
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.agents[key]; ok {
		return a, "", nil
	}
	a, _, err := buildEngineAgent(context.Background(), cfg, engineSpec{urls: e.URL, kind: e.Kind, model: e.Model, maxConc: f.maxConc,
		tokPath: f.tokPath, tmplSpec: f.tmplSpec, chatTmpl: f.chatTmpl, seed: f.seed, flags: f.flags}, f.metrics.WrapSampler)
	if err != nil {
		field := "engine"
		if strings.HasPrefix(err.Error(), "agent config") {
			field = "agent"
		}
		return nil, field, err
	}
	if len(f.agents) >= maxCachedAgents {
		clear(f.agents)
	}
	f.agents[key] = a
	return a, "", nil
}

func (f *serveFactory) vaultSeed(id string) (int64, bool) {
	s, err := strconv.ParseInt(id, 10, 64)
	return s, err == nil && s >= 0
}

func (f *serveFactory) HasTask(id string) bool {
	if f.vault != nil {
		_, ok := f.vaultSeed(id)
		return ok
	}
	_, ok := f.tasks[id]
	return ok
}

func (f *serveFactory) Env(id string, _ int64) (agent.Environment, error) {
	if f.vault != nil {
		s, ok := f.vaultSeed(id)
		if !ok {
			return nil, fmt.Errorf("vault task_id %q is not a seed", id)
		}
		return vault.New(*f.vault, s)
	}
	t, ok := f.tasks[id]
	if !ok {
		return nil, fmt.Errorf("unknown task %q", id)
	}
	return t.newEnv(false), nil
}

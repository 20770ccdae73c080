package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/infer/remote"
	"github.com/compactrl/compactrl/netallow"
	"github.com/compactrl/compactrl/remoteagent"
	"github.com/compactrl/compactrl/rollout"
	"github.com/compactrl/compactrl/serve"
)

// runServe is `compactrl serve`: the agent loop with compaction as an HTTP
// rollout service for an external trainer (package serve; docs/scale.md).
// Each POST /v1/rollouts names the engine to sample from (slime: its
// SGLang router); tasks, tokenizer, template, sandbox and the defaults of
// the agent budget come from the same flags as `compactrl eval`.
func runServe(ctx context.Context, e env, args []string) error {
	fs, o := newServeCmd()
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	key, err := o.apiKey(e)
	if err != nil {
		return err
	}
	allow, err := netallow.Parse(o.engineAllow)
	if err != nil {
		return fmt.Errorf("--engine-allow: %w", err)
	}
	f := &serveFactory{tok: o.tok, maxConc: o.maxConc, seed: o.seed, flags: o.engine, agents: map[serveKey]*agent.Agent{}, client: allow.Client()}
	cfg := o.agent
	what, err := o.loadTasks(ctx, e, f, &cfg)
	if err != nil {
		return err
	}
	if err := o.prompts.apply(&cfg); err != nil {
		return err
	}
	srv, err := serve.New(serve.Config{MaxInFlight: o.maxEpisodes, MaxQueue: o.queue, EpisodeTimeout: o.tasks.episodeTimeout,
		RetryAfter: o.retryAfter, Agent: cfg, ReadHeaderTimeout: o.headerTimeout, BodyTimeout: o.bodyTimeout,
		IdleTimeout: o.idleTimeout, MaxBodyBytes: o.maxBody, MaxConns: o.maxConns,
		APIKey: key, EngineAllow: allow, TLSCertFile: o.tlsCert, TLSKeyFile: o.tlsKey}, f)
	if err != nil {
		return err
	}
	if _, err := serve.RaiseOpenFiles(srv.OpenFilesNeeded()); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	f.metrics = srv.Metrics()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	scheme, auth := "http", "no API key (loopback only)"
	if o.tlsCert != "" {
		scheme = "https"
	}
	if key != "" {
		auth = "API key required"
	}
	fmt.Fprintf(e.stdout, "serving on %s://%s (tasks %s: %s; %d episodes at once, queue %d; %s; engines allowed: %s)\n",
		scheme, ln.Addr(), o.tasks.tasks, what, o.maxEpisodes, o.queue, auth, allow)
	err = srv.Serve(ctx, ln, o.drainTimeout)
	fmt.Fprintln(e.stdout, "drained")
	return err
}

// serveOptions are the flags of `compactrl serve`.
type serveOptions struct {
	tasks        taskFlags
	tok          tokenFlags
	engine       engineFlags
	agent        agent.Config
	prompts      *promptFlags
	listen       string
	maxEpisodes  int
	queue        int
	retryAfter   time.Duration
	drainTimeout time.Duration
	maxConc      int
	seed         int64

	apiKeyFile, engineAllow, tlsCert, tlsKey string

	headerTimeout, bodyTimeout, idleTimeout time.Duration
	maxBody                                 int64
	maxConns                                int
}

func newServeCmd() (*cmdLine, *serveOptions) {
	fs := newCmdLine("serve", "serve --tasks DIR|FILE.jsonl|vault[:knobs] (--template IDS | --tokenizer FILE) [--listen ADDR] [--max-episodes N] [flags]")
	fs.about = "The agent flags are the defaults of each request's agent settings (request: agent.context, agent.reserve, …, sampling.temperature)."
	fs.examples = []string{"compactrl serve --tasks vault --template 1,2,3,4,5,6 --listen 127.0.0.1:8090",
		"compactrl serve --tasks tasks/ --tokenizer ~/qwen3 --max-episodes 32",
		"compactrl serve --tasks tasks/ --tokenizer ~/qwen3 --listen 0.0.0.0:8090 --api-key-file ~/.compactrl-key --engine-allow 10.0.0.0/16:30000"}
	o := &serveOptions{agent: engineAgentConfig(1)}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8090", "address to listen on (host:port); beyond loopback an API key is required")
	fs.StringVar(&o.apiKeyFile, "api-key-file", "", "file holding the API key (bearer token, ≥ 16 bytes) every request must carry; default: $"+apiKeyEnv)
	fs.StringVar(&o.engineAllow, "engine-allow", netallow.LoopbackSpec, "engine addresses a request may name, comma-separated: HOST, HOST:PORT, IP, CIDR or * (link-local and metadata addresses only when named)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate: serve HTTPS (with --tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	o.tasks.register(fs.FlagSet, "Harbor task directory or a directory of them, a SWE-bench instances .jsonl, or vault[:knobs] (the built-in suite; task_id = the seed) (required)")
	fs.IntVar(&o.maxEpisodes, "max-episodes", 64, "episodes played at once")
	fs.IntVar(&o.queue, "queue", -1, "requests waiting for a slot beyond --max-episodes (past it: 429); -1: 4 × --max-episodes")
	fs.DurationVar(&o.retryAfter, "retry-after", 5*time.Second, "Retry-After of a 429")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 0, "on SIGTERM, how long to let in-flight episodes finish before cancelling them (0: no limit)")
	fs.DurationVar(&o.headerTimeout, "header-timeout", serve.DefaultReadHeaderTimeout, "a request's headers must arrive within this")
	fs.DurationVar(&o.bodyTimeout, "body-timeout", serve.DefaultBodyTimeout, "a request's body must arrive within this once its headers are in (past it: 408)")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", serve.DefaultIdleTimeout, "an idle keep-alive connection is closed after this")
	fs.Int64Var(&o.maxBody, "max-body", serve.DefaultMaxBodyBytes, "largest request body in bytes (past it: 413)")
	fs.IntVar(&o.maxConns, "max-conns", 0, "connections open at once; more wait until one closes (0: --max-episodes + --queue + 64); the open-file limit is raised to what this and --max-episodes need, or serve refuses to start")
	fs.IntVar(&o.maxConc, "engine-concurrency", 0, "in-flight requests per engine (0: the pool's default)")
	o.tok.register(fs.FlagSet)
	o.engine.register(fs.FlagSet)
	fs.Int64Var(&o.seed, "seed", 0, "seed of the engine pool's retry jitter")
	bindAgentFlags(fs.FlagSet, &o.agent)
	o.prompts = bindPromptFlags(fs.FlagSet, &o.agent, "file holding the system prompt (default: eval's, or the vault suite's)")
	return fs, o
}

// apiKeyEnv holds the API key when --api-key-file is not given.
const apiKeyEnv = "COMPACTRL_SERVE_API_KEY"

// apiKey is the key of --api-key-file (its content without the final
// newline), else $COMPACTRL_SERVE_API_KEY; serving beyond loopback without
// one is refused.
func (o *serveOptions) apiKey(e env) (string, error) {
	key := e.getenv(apiKeyEnv)
	from := "$" + apiKeyEnv
	if o.apiKeyFile != "" {
		b, err := os.ReadFile(o.apiKeyFile)
		if err != nil {
			return "", fmt.Errorf("--api-key-file: %w", err)
		}
		key, from = strings.TrimRight(string(b), "\r\n"), "--api-key-file "+o.apiKeyFile
	}
	if key != "" && len(key) < serve.MinAPIKeyLen {
		return "", fmt.Errorf("%s: the key has %d bytes, want at least %d (e.g. openssl rand -hex 32)", from, len(key), serve.MinAPIKeyLen)
	}
	if key == "" {
		loop, err := netallow.LoopbackOnly(context.Background(), o.listen)
		if err != nil {
			return "", err
		}
		if !loop {
			return "", fmt.Errorf("--listen %s reaches beyond this machine: give an API key (--api-key-file FILE or $%s) so that only your trainer can start episodes", o.listen, apiKeyEnv)
		}
	}
	return key, nil
}

func (o *serveOptions) validate() error {
	switch {
	case o.tasks.tasks == "":
		return errors.New("--tasks DIR|FILE.jsonl|vault[:knobs] is required")
	case o.tok.path == "" && o.tok.template == "":
		return errors.New("--template system,user,assistant,observation,summary,end (token ids) or --tokenizer FILE is required")
	case o.maxEpisodes < 1:
		return fmt.Errorf("--max-episodes %d must be ≥ 1", o.maxEpisodes)
	case o.queue < -1:
		return fmt.Errorf("--queue %d must be ≥ 0 (or -1)", o.queue)
	case o.drainTimeout < 0 || o.retryAfter < 0:
		return errors.New("--drain-timeout and --retry-after must be ≥ 0")
	case o.headerTimeout <= 0 || o.bodyTimeout <= 0 || o.idleTimeout <= 0:
		return fmt.Errorf("--header-timeout %v, --body-timeout %v and --idle-timeout %v must be positive", o.headerTimeout, o.bodyTimeout, o.idleTimeout)
	case o.maxBody <= 0:
		return fmt.Errorf("--max-body %d must be positive", o.maxBody)
	case o.maxConns < 0:
		return fmt.Errorf("--max-conns %d must be ≥ 0 (0: --max-episodes + --queue + 64)", o.maxConns)
	}
	if o.queue == -1 {
		o.queue = 4 * o.maxEpisodes
	}
	for _, check := range []func() error{o.tasks.validate, o.engine.validate, o.tok.check} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// loadTasks gives f its tasks.Suite — a registered generated suite
// (--tasks NAME[:KNOBS], with cfg its system prompt if it has one), else
// the --tasks directory or JSONL in a checked sandbox — and says what it
// serves.
func (o *serveOptions) loadTasks(ctx context.Context, e env, f *serveFactory, cfg *agent.Config) (string, error) {
	name, s, ok, err := tasks.OpenSuite(o.tasks.tasks)
	if err != nil {
		return "", fmt.Errorf("--tasks: %w", err)
	}
	if ok {
		f.suite = s
		if p, ok := s.(tasks.SystemPrompter); ok {
			cfg.SystemPrompt = p.SystemPrompt()
		}
		return "the " + name + " suite", nil
	}
	sb, err := o.tasks.sandbox(false)
	if err != nil {
		return "", err
	}
	if b := sb.host; b != nil {
		if err := b.Available(); err != nil {
			return "", fmt.Errorf("--runner bwrap: %w", err)
		}
	}
	runnable, _, err := o.tasks.load(ctx, e, "serve", sb, o.tasks.limits(), nil)
	if err != nil {
		return "", err
	}
	f.suite = tasks.Named(runnable)
	return strconv.Itoa(len(runnable)) + " tasks", nil
}

// serveFactory implements serve.Factory with eval's task loading and
// engineAgent; agents are cached by engine and configuration (a training
// run sends one of each).
type serveFactory struct {
	tok     tokenFlags
	flags   engineFlags
	maxConc int
	seed    int64
	suite   tasks.Suite
	metrics *serve.Metrics
	client  *http.Client // dials only the --engine-allow addresses

	mu     sync.Mutex
	agents map[serveKey]*agent.Agent
}

type serveKey struct {
	engine remote.EndpointKey // the request's engine, its settings over the server's flags
	cfg    agent.Config
}

// maxCachedAgents bounds the agent cache; past it the cache starts over.
const maxCachedAgents = 64

func (f *serveFactory) Runner(ctx context.Context, e serve.Engine, cfg agent.Config) (rollout.Runner, string, error) {
	flags := f.flags.forRequest(e)
	eps, err := flags.endpoints(e.URL, e.Kind, e.Model, f.maxConc)
	if err != nil {
		return nil, "engine", err
	}
	if len(eps) != 1 {
		return nil, "engine", fmt.Errorf("engine.url %q: one engine URL a request", e.URL)
	}
	key := serveKey{eps[0].Key(), cfg}
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.agents[key]; ok {
		return a, "", nil
	}
	spec := flags.spec(eps, f.tok, f.seed)
	spec.Client, spec.Wrap = f.client, []func(infer.Sampler) infer.Sampler{f.metrics.WrapSampler}
	a, err := remoteagent.Build(ctx, cfg, spec)
	if err != nil {
		field := "engine"
		switch {
		case errors.Is(err, remoteagent.ErrSampling):
			field = "sampling"
		case errors.Is(err, agent.ErrConfig):
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

// forRequest is the server's engine flags with a request's engine
// settings (seed mode, its kind's options) over them; f is not changed.
func (f engineFlags) forRequest(e serve.Engine) engineFlags {
	out := f
	out.options = map[string]string{}
	maps.Copy(out.options, f.options)
	maps.Copy(out.options, e.Options)
	if e.SeedMode != "" {
		out.seed = e.SeedMode
	}
	return out
}

func (f *serveFactory) HasTask(id string) bool { return f.suite.Has(id) }

// maxListedSeeds bounds /v1/tasks' count for a generated suite.
const maxListedSeeds = 1_000_000

// TaskIDs lists the loaded tasks, or count seeds from the start of a
// generated suite's split (serve.TaskLister).
func (f *serveFactory) TaskIDs(split string, count int) ([]string, error) {
	if l, ok := f.suite.(tasks.Lister); ok {
		if split != "" || count != 0 {
			return nil, errors.New("split and count are for a generated suite; this service plays a fixed task set (list it without them)")
		}
		return l.IDs(), nil
	}
	if _, ok := f.suite.(tasks.SeedSplitter); !ok {
		return nil, errors.New("this suite cannot list its tasks")
	}
	if split == "" || count == 0 {
		return nil, errors.New("a generated suite's task ids are seeds: give split (e.g. train) and count")
	}
	if count > maxListedSeeds {
		return nil, fmt.Errorf("count %d: at most %d", count, maxListedSeeds)
	}
	return tasks.SeedIDs(f.suite, split, count)
}

func (f *serveFactory) Env(id string, _ int64) (agent.Environment, error) { return f.suite.Env(id) }

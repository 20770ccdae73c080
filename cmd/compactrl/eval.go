package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/eval"
	"github.com/compactrl/compactrl/infer/remote"
	"github.com/compactrl/compactrl/remoteagent"
	"github.com/compactrl/compactrl/rollout"
	"github.com/compactrl/compactrl/sandbox"
)

// runEval is `compactrl eval`: pass@1 of a policy on real tasks (Harbor /
// Terminal-Bench task directories or a SWE-bench JSONL) played through the
// agent loop with compaction against HTTP engines, or by the scripted
// oracle/empty policies to validate tasks. `eval checkpoint DIR` is the
// built-in model on the built-in suite (runEvalCheckpoint); `eval
// --checkpoint DIR` first on the line is its deprecated spelling.
func runEval(ctx context.Context, e env, args []string) error {
	if len(args) > 0 && isCheckpointFlag(args[0]) {
		fmt.Fprintln(e.stderr, "compactrl eval: --checkpoint DIR is deprecated; use `compactrl eval checkpoint DIR`")
		return runEvalCheckpoint(ctx, e, args)
	}
	return dispatch(ctx, e, nil, []subcommand{{"checkpoint", runEvalCheckpoint}, {"compare", runEvalCompare}}, runEvalTasks, args)
}

func isCheckpointFlag(arg string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return strings.HasPrefix(arg, "-") && name == "checkpoint"
}

// evalOptions are the flags of `compactrl eval` on real tasks.
type evalOptions struct {
	tasks    taskFlags
	tok      tokenFlags
	engine   engineFlags
	agent    agent.Config
	prompts  *promptFlags
	policy   string
	engines  string
	kind     string
	model    string
	maxConc  int
	attempts int
	workers  int
	seed     int64
	out      string
	workRoot string
	diskMB   int64
	// suiteTasks is how many task seeds of a generated suite (--tasks
	// vault[:knobs]) are played, from its development split.
	suiteTasks int
}

func newEvalCmd() (*cmdLine, *evalOptions) {
	fs := newCmdLine("eval", "eval --tasks DIR|FILE.jsonl (--engine URL[,URL…] | --policy oracle|empty) --out RUN_DIR [flags]",
		"eval checkpoint DIR [flags]   (the built-in model on the built-in suite: compactrl eval checkpoint -h)",
		"eval compare ARM ARM …   (paired comparison of runs' per-task outcomes: compactrl eval compare -h)")
	fs.about = "Exit status: 0 every episode was scored; 1 an error stopped the run; 3 some episodes were infra_error or verifier_error;\n" +
		"4 nothing was scored (every episode infra_error or verifier_error, or no task could run); 5 every episode played was scored but some tasks were skipped (a task.toml\n" +
		"that does not load, a task that cannot run here: results.json's \"skipped\" and stderr say why)."
	fs.examples = []string{"compactrl eval --tasks tasks/ --policy oracle --out runs/validate",
		"compactrl eval --tasks tasks/ --engine http://127.0.0.1:8080 --tokenizer ~/qwen3 --attempts 4 --out runs/qwen3"}
	o := &evalOptions{agent: engineAgentConfig(0.7)}
	o.tasks.register(fs.FlagSet, "Harbor task directory, a directory of them, a SWE-bench instances .jsonl, or a generated suite vault[:knobs] (--suite-tasks seeds of its development split) (required)")
	fs.IntVar(&o.suiteTasks, "suite-tasks", 16, "with --tasks vault[:knobs]: task seeds played, the first of the suite's development split")
	fs.StringVar(&o.policy, "policy", "engine", "engine (sample from --engine), oracle (run solution/solve.sh or the gold patch) or empty (submit at once)")
	fs.StringVar(&o.engines, "engine", "", "engine base URL(s), comma-separated, e.g. http://127.0.0.1:8080,http://10.0.0.2:8080")
	fs.StringVar(&o.kind, "engine-kind", remote.KindLlamaCpp, "engine kind: "+remote.KindList())
	fs.StringVar(&o.model, "model", "", "model name sent to vLLM")
	fs.IntVar(&o.maxConc, "engine-concurrency", 0, "in-flight requests per engine (0: the pool's default)")
	o.tok.register(fs.FlagSet)
	o.engine.register(fs.FlagSet)
	fs.IntVar(&o.attempts, "attempts", 1, "attempts per task")
	fs.IntVar(&o.workers, "workers", 2, "episodes played concurrently")
	fs.Int64Var(&o.seed, "seed", 0, "first episode's seed; episode i (task-major) uses seed+i")
	fs.StringVar(&o.out, "out", "", "run directory for episodes.jsonl and results.json (required)")
	bindAgentFlags(fs.FlagSet, &o.agent)
	o.prompts = bindPromptFlags(fs.FlagSet, &o.agent, "file holding the system prompt (default: a short built-in one)")
	fs.StringVar(&o.workRoot, "work-root", filepath.Join(os.TempDir(), "compactrl-eval"), "parent of the run directories holding episode workspaces; those of runs that died (kill -9) are removed at start")
	fs.Int64Var(&o.diskMB, "disk-mb", 0, "workspace size limit per episode in MiB, all processes together (0: the task's [environment] storage, else 4096); enforced as root")
	return fs, o
}

func (o *evalOptions) validate() error {
	switch {
	case o.tasks.tasks == "":
		return errors.New("--tasks DIR|FILE.jsonl is required")
	case o.out == "":
		return errors.New("--out RUN_DIR is required")
	case o.attempts < 1:
		return fmt.Errorf("--attempts %d must be ≥ 1", o.attempts)
	case o.workers < 1:
		return fmt.Errorf("--workers %d must be ≥ 1", o.workers)
	case o.diskMB < 0:
		return errors.New("--disk-mb must be ≥ 0")
	case o.policy != "engine" && o.policy != "oracle" && o.policy != "empty":
		return fmt.Errorf("--policy %q: want engine, oracle or empty", o.policy)
	}
	if err := o.tasks.validate(); err != nil {
		return err
	}
	return o.engine.validate()
}

// runEvalTasks is `compactrl eval --tasks …`: load the tasks, build the
// policy, prepare the sandbox, play every attempt, write results.json.
func runEvalTasks(ctx context.Context, e env, args []string) error {
	fs, o := newEvalCmd()
	if _, err := fs.parse(e, args); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	if name, s, ok, err := tasks.OpenSuite(o.tasks.tasks); err != nil {
		return fmt.Errorf("--tasks: %w", err)
	} else if ok {
		return o.playSuite(ctx, e, name, s)
	}
	sb, err := o.tasks.sandbox(true)
	if err != nil {
		return err
	}
	limits := o.tasks.limits()
	limits.DiskBytes = o.diskMB << 20
	workRoot := new(string)
	runnable, skipped, err := o.tasks.load(ctx, e, "eval", sb, limits, workRoot)
	var none *noRunnableTask
	if errors.As(err, &none) {
		// Still a results.json: which tasks were skipped, and why.
		res := eval.Summarize(nil, nil, o.attempts, skipped, map[string]string{"policy": o.policy, "tasks": o.tasks.tasks})
		if werr := os.MkdirAll(o.out, 0o755); werr != nil {
			return fmt.Errorf("--out: %w", werr)
		}
		if werr := res.WriteFile(filepath.Join(o.out, "results.json")); werr != nil {
			return werr
		}
		res.WriteTable(e.stdout)
		return &exitError{exitNothingScored, err.Error() + "; results.json lists why"}
	}
	if err != nil {
		return err
	}
	r, meta, err := o.policyRunner(ctx)
	if err != nil {
		return err
	}
	cleanup, err := prepareSandbox(e, sb, o.tasks.keep, o.workRoot, workRoot)
	if err != nil {
		return err
	}
	defer cleanup()
	return o.play(ctx, e, runnable, skipped, r, meta)
}

// playSuite is eval on a generated suite (vault[:knobs]): --suite-tasks
// seeds from the start of its development split, each a task, played by
// the engine policy without a sandbox (the suite's environments are in
// memory), the suite's system prompt unless --system-prompt gives one.
func (o *evalOptions) playSuite(ctx context.Context, e env, name string, s tasks.Suite) error {
	if o.policy != "engine" {
		return fmt.Errorf("--policy %s: the %s suite has no task solutions; play it with --engine", o.policy, name)
	}
	ids, err := tasks.SeedIDs(s, "test", o.suiteTasks)
	if err != nil {
		return fmt.Errorf("--tasks %s with --suite-tasks %d (the first seeds of its development split): %w", o.tasks.tasks, o.suiteTasks, err)
	}
	if p, ok := s.(tasks.SystemPrompter); ok && o.prompts.systemPath == "" {
		o.agent.SystemPrompt = p.SystemPrompt()
	}
	runnable := tasks.SuiteTasks(s, ids)
	r, meta, err := o.policyRunner(ctx)
	if err != nil {
		return err
	}
	return o.play(ctx, e, runnable, nil, r, meta)
}

// policyRunner is --policy: the scripted oracle/empty runner, or the agent
// loop over the --engine pool; meta describes it for results.json.
func (o *evalOptions) policyRunner(ctx context.Context) (rollout.Runner, map[string]string, error) {
	meta := map[string]string{"policy": o.policy, "tasks": o.tasks.tasks}
	if o.policy != "engine" {
		return eval.ScriptedRunner{Oracle: o.policy == "oracle"}, meta, nil
	}
	cfg := o.agent
	if err := o.prompts.apply(&cfg); err != nil {
		return nil, nil, err
	}
	eps, err := o.engine.endpoints(o.engines, o.kind, o.model, o.maxConc)
	if err != nil {
		return nil, nil, err
	}
	spec := o.engine.spec(eps, o.tok, o.seed)
	spec.Chat = func(tmpl string) { meta["chat_template"] = tmpl }
	a, err := remoteagent.Build(ctx, cfg, spec)
	if err != nil {
		return nil, nil, err
	}
	meta["engine"], meta["engine_kind"], meta["model"] = o.engines, o.kind, o.model
	meta["engine_seed"] = o.engine.seed
	for _, opt := range remote.KindOptions() {
		if opt.Kind == o.kind { // only the run's engine kind's own settings
			meta["engine_"+opt.Field] = o.engine.options[opt.Name]
		}
	}
	meta["context"], meta["reserve"] = strconv.Itoa(cfg.Context), strconv.Itoa(cfg.Reserve)
	meta["no_compaction"] = strconv.FormatBool(cfg.NoCompaction)
	return a, meta, nil
}

// prepareSandbox checks bwrap, says which limits it enforces and reaps the
// cgroups of runs that died; unless workspaces are kept, it makes this
// run's directory under root (removing those of dead runs) and sets
// *workRoot to it. cleanup removes that directory.
func prepareSandbox(e env, sb backend, keep bool, root string, workRoot *string) (cleanup func(), err error) {
	if b := sb.host; b != nil {
		if err := b.Available(); err != nil {
			return nil, fmt.Errorf("--runner bwrap: %w", err)
		}
		fmt.Fprintln(e.stderr, "eval: "+b.Confine.Describe())
		for _, g := range b.Confine.Reap() {
			fmt.Fprintf(e.stderr, "eval: removed the cgroup %s of a run that died\n", g)
		}
	}
	if keep {
		return func() {}, nil
	}
	// Workspaces live in a directory this run owns: a run killed with -9
	// leaves it behind, and the next eval removes it.
	rd, reaped, err := sandbox.NewRunDir(root)
	for _, d := range reaped {
		fmt.Fprintf(e.stderr, "eval: removed %s, left by a run that died\n", d)
	}
	if err != nil {
		return nil, fmt.Errorf("--work-root: %w", err)
	}
	if c := sb.engine; c != nil && len(reaped) > 0 {
		// Containers of those runs (labelled with their run directory).
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		ids, err := c.ReapContainers(ctx, reaped)
		cancel()
		for _, id := range ids {
			fmt.Fprintf(e.stderr, "eval: removed container %.12s, left by a run that died\n", id)
		}
		if err != nil {
			return nil, err
		}
	}
	*workRoot = rd.Path
	return func() {
		if err := rd.Close(); err != nil {
			fmt.Fprintf(e.stderr, "eval: %v\n", err)
		}
	}, nil
}

// play runs attempts × tasks episodes (episode i, task-major, has seed
// --seed+i) into --out/episodes.jsonl and writes and prints results.json.
func (o *evalOptions) play(ctx context.Context, e env, runnable []tasks.Task, skipped []tasks.Skipped, r rollout.Runner, meta map[string]string) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	f, err := os.Create(filepath.Join(o.out, "episodes.jsonl"))
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	defer f.Close()
	jobs, envs := eval.Jobs(runnable, o.attempts, o.seed, o.policy == "oracle")
	sink := &eval.Collector{}
	_, rerr := playEpisodes(ctx, e, "eval", f, rollout.Config{Workers: o.workers, EpisodeTimeout: o.tasks.episodeTimeout, Meta: meta},
		jobs, eval.ClosingRunner{Runner: r}, envs, func(s rollout.Sink) rollout.Sink { sink.Next = s; return sink })
	names := make([]string, len(runnable))
	for i, t := range runnable {
		names[i] = t.Name
	}
	res := eval.Summarize(sink.Verdicts(), names, o.attempts, skipped, meta)
	if err := res.WriteFile(filepath.Join(o.out, "results.json")); err != nil {
		return err
	}
	res.WriteTable(e.stdout)
	if o.policy == "oracle" {
		res.WriteOracleFailures(e.stdout)
	}
	if rerr == nil {
		rerr = infraOutcome(res.Episodes, res.InfraError+res.VerifierError)
	}
	if rerr == nil && len(skipped) > 0 {
		rerr = &exitError{exitSomeSkipped, fmt.Sprintf("%d tasks were skipped (not loadable or not runnable here; see results.json's skipped)", len(skipped))}
	}
	return rerr
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	if !filepath.IsAbs(v) {
		return fmt.Errorf("%q is not an absolute path", v)
	}
	*l = append(*l, v)
	return nil
}

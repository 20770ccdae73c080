package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer/remote"
	"github.com/compactrl/compactrl/rollout"
	"github.com/compactrl/compactrl/sandbox"
	"github.com/compactrl/compactrl/stats"
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
	o.tasks.register(fs.FlagSet, "Harbor task directory, a directory of them, or a SWE-bench instances .jsonl (required)")
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
	sb, err := o.tasks.sandbox(true)
	if err != nil {
		return err
	}
	limits := o.tasks.limits()
	limits.DiskBytes = o.diskMB << 20
	workRoot := new(string)
	runnable, skipped, err := o.tasks.load(e, "eval", sb, limits, workRoot)
	var none *noRunnableTask
	if errors.As(err, &none) {
		// Still a results.json: which tasks were skipped, and why.
		res := summarize(nil, nil, o.attempts, skipped, map[string]string{"policy": o.policy, "tasks": o.tasks.tasks})
		if werr := os.MkdirAll(o.out, 0o755); werr != nil {
			return fmt.Errorf("--out: %w", werr)
		}
		if werr := writeJSON(filepath.Join(o.out, "results.json"), res); werr != nil {
			return werr
		}
		printResults(e.stdout, res)
		return &exitError{exitNothingScored, err.Error() + "; results.json lists why"}
	}
	if err != nil {
		return err
	}
	r, taint, meta, err := o.policyRunner(ctx)
	if err != nil {
		return err
	}
	cleanup, err := prepareSandbox(e, sb, o.tasks.keep, o.workRoot, workRoot)
	if err != nil {
		return err
	}
	defer cleanup()
	return o.play(ctx, e, runnable, skipped, r, taint, meta)
}

// policyRunner is --policy: the scripted oracle/empty runner, or the agent
// loop over the --engine pool (with the remote tokenizer whose failures
// taint episodes, nil with --tokenizer); meta describes it for results.json.
func (o *evalOptions) policyRunner(ctx context.Context) (rollout.Runner, rollout.FailureCounter, map[string]string, error) {
	meta := map[string]string{"policy": o.policy, "tasks": o.tasks.tasks}
	if o.policy != "engine" {
		return scriptedRunner{oracle: o.policy == "oracle"}, nil, meta, nil
	}
	cfg := o.agent
	if err := o.prompts.apply(&cfg); err != nil {
		return nil, nil, nil, err
	}
	a, rt, err := buildEngineAgent(ctx, cfg, engineSpec{urls: o.engines, kind: o.kind, model: o.model, maxConc: o.maxConc,
		tok: o.tok, seed: o.seed, flags: o.engine})
	if err != nil {
		return nil, nil, nil, err
	}
	meta["engine"], meta["engine_kind"], meta["model"] = o.engines, o.kind, o.model
	meta["engine_seed"], meta["engine_logprobs_mode"] = o.engine.seed, o.engine.logprobs
	meta["context"], meta["reserve"] = strconv.Itoa(cfg.Context), strconv.Itoa(cfg.Reserve)
	meta["no_compaction"] = strconv.FormatBool(cfg.NoCompaction)
	if rt == nil {
		return a, nil, meta, nil
	}
	return a, rt, meta, nil
}

// prepareSandbox checks bwrap, says which limits it enforces and reaps the
// cgroups of runs that died; unless workspaces are kept, it makes this
// run's directory under root (removing those of dead runs) and sets
// *workRoot to it. cleanup removes that directory.
func prepareSandbox(e env, sb sandbox.Runner, keep bool, root string, workRoot *string) (cleanup func(), err error) {
	if b, ok := sb.(sandbox.Bubblewrap); ok {
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
	if c, ok := sb.(sandbox.Container); ok && len(reaped) > 0 {
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
func (o *evalOptions) play(ctx context.Context, e env, runnable []tasks.Task, skipped []tasks.Skipped, r rollout.Runner, taint rollout.FailureCounter, meta map[string]string) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	f, err := os.Create(filepath.Join(o.out, "episodes.jsonl"))
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	defer f.Close()
	jobs, envs := o.jobs(runnable)
	sink := &verdictSink{}
	_, rerr := playEpisodes(ctx, e, "eval", f, rollout.Config{Workers: o.workers, EpisodeTimeout: o.tasks.episodeTimeout, Meta: meta, Taint: taint},
		jobs, closingRunner{r}, envs, func(s rollout.Sink) rollout.Sink { sink.inner = s; return sink })
	res := summarize(sink.verdicts, runnable, o.attempts, skipped, meta)
	if err := writeJSON(filepath.Join(o.out, "results.json"), res); err != nil {
		return err
	}
	printResults(e.stdout, res)
	if o.policy == "oracle" {
		printOracleFailures(e.stdout, res)
	}
	if rerr == nil {
		rerr = infraOutcome(res.Episodes, res.InfraError+res.VerifierError)
	}
	if rerr == nil && len(skipped) > 0 {
		rerr = &exitError{exitSomeSkipped, fmt.Sprintf("%d tasks were skipped (not loadable or not runnable here; see results.json's skipped)", len(skipped))}
	}
	return rerr
}

// printOracleFailures lists the tasks whose own solution (the gold patch of
// a SWE-bench instance) did not succeed on every attempt, and those
// skipped, so an environment can be validated before training.
func printOracleFailures(w io.Writer, res results) {
	var bad []string
	for _, t := range res.Tasks {
		if t.Successes == t.Attempts {
			continue
		}
		why := ""
		for _, v := range t.Episodes {
			if !v.Success {
				why = cmp.Or(v.Error, v.RewardNote, v.Detail)
				break
			}
		}
		bad = append(bad, fmt.Sprintf("  %s (%d/%d; %s): %s", t.Task, t.Successes, t.Attempts, statusList(t.Statuses), oneLine(why, 300)))
	}
	for _, s := range res.Skipped {
		bad = append(bad, fmt.Sprintf("  %s (skipped): %s", s.Task, oneLine(s.Reason, 300)))
	}
	if len(bad) == 0 {
		fmt.Fprintf(w, "oracle: the solution resolves all %d tasks\n", len(res.Tasks))
		return
	}
	fmt.Fprintf(w, "oracle: %d of %d tasks are not resolved by their own solution (gold patch), or could not run:\n%s\n", len(bad), len(res.Tasks)+len(res.Skipped), strings.Join(bad, "\n"))
}

func statusList(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(keys, " ")
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// jobs are the episodes of every attempt at every task, and the
// environments their seeds stand for.
func (o *evalOptions) jobs(runnable []tasks.Task) ([]rollout.Job, rollout.EnvFactory) {
	n := len(runnable) * o.attempts
	jobs := make([]rollout.Job, n)
	for i := range jobs {
		t := runnable[i/o.attempts]
		jobs[i] = rollout.Job{Seed: o.seed + int64(i), ID: fmt.Sprintf("%s#%d", t.Name, i%o.attempts), Group: t.Name}
	}
	envs := func(s int64) (agent.Environment, error) {
		i := s - o.seed
		if i < 0 || i >= int64(n) {
			return nil, fmt.Errorf("seed %d outside this run's %d episodes", s, n)
		}
		return runnable[i/int64(o.attempts)].New(o.policy == "oracle"), nil
	}
	return jobs, envs
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

// scriptedRunner plays the oracle (the task's own solution) or the empty
// policy (submit at once) without any engine: Reset, one reply, done.
// Its episodes have no segments (no tokens were sampled).
type scriptedRunner struct{ oracle bool }

func (s scriptedRunner) Run(ctx context.Context, env agent.Environment, seed int64) (episode.Episode, error) {
	ep := episode.Episode{Status: episode.StatusOK, Meta: map[string]string{}, Metrics: map[string]float64{}}
	task, err := env.Reset(ctx)
	if err != nil {
		ep.Status, ep.Meta[agent.MetaError] = agent.FailureStatus(err), err.Error()
		return ep, nil
	}
	ep.Task = task
	var st agent.Step
	switch o, isOracle := env.(tasks.Oracle); {
	case s.oracle && isOracle:
		st, err = o.Oracle(ctx)
	case s.oracle:
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

// closingRunner closes the environment after its episode: an episode the
// agent loop ends early (overlong, format errors, infra errors) never
// submits, and its sandbox and workspace must not outlive it.
type closingRunner struct{ r rollout.Runner }

// A Close error (a sandbox whose processes could not be confirmed dead, a
// workspace that could not be removed) is kept in the episode's meta
// "close_error"; a note on a zero reward (tasks.RewardNoter) in
// "reward_note".
func (c closingRunner) Run(ctx context.Context, env agent.Environment, seed int64) (episode.Episode, error) {
	ep, err := c.r.Run(ctx, env, seed)
	if ep.Meta == nil {
		ep.Meta = map[string]string{}
	}
	if n, ok := env.(tasks.RewardNoter); ok && n.RewardNote() != "" {
		ep.Meta["reward_note"] = n.RewardNote()
	}
	if cl, ok := env.(tasks.Closer); ok {
		if cerr := cl.Close(); cerr != nil {
			ep.Meta["close_error"] = cerr.Error()
		}
	}
	return ep, err
}

// parseTemplate reads "system,user,assistant,observation,summary,end" ids.
func parseTemplate(spec string) (agent.Template, error) {
	parts := strings.Split(spec, ",")
	if len(parts) != 6 {
		return agent.Template{}, fmt.Errorf("--template %q: want 6 ids system,user,assistant,observation,summary,end", spec)
	}
	ids := make([]int, 6)
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 0 {
			return agent.Template{}, fmt.Errorf("--template %q: %q is not a token id", spec, p)
		}
		ids[i] = v
	}
	t := agent.Template{System: ids[0], User: ids[1], Assistant: ids[2], Observation: ids[3], Summary: ids[4], EndOfTurn: ids[5]}
	seen := map[int]bool{}
	for _, id := range ids {
		if seen[id] {
			return agent.Template{}, fmt.Errorf("--template %q: id %d used twice", spec, id)
		}
		seen[id] = true
	}
	return t, nil
}

// verdict is what results.json keeps of one episode.
type verdict struct {
	ID          string  `json:"id"`
	Task        string  `json:"task"`
	Status      string  `json:"status"`
	Reward      float64 `json:"reward"`
	Success     bool    `json:"success"`
	Compactions float64 `json:"compactions"`
	Turns       float64 `json:"turns"`
	Error       string  `json:"error,omitempty"`
	// RewardNote says why a verifier that ran gave no valid reward (the
	// attempt scored 0); CloseError reports a sandbox or workspace that
	// could not be cleaned up after the episode.
	RewardNote string `json:"reward_note,omitempty"`
	CloseError string `json:"close_error,omitempty"`
	// Detail is the tail of the final observation (the verifier's output)
	// of an episode that did not succeed.
	Detail string `json:"detail,omitempty"`
}

// verdictSink forwards episodes and keeps their verdicts.
type verdictSink struct {
	inner    rollout.Sink
	verdicts []verdict
}

func (s *verdictSink) Write(ep *episode.Episode) error {
	if err := s.inner.Write(ep); err != nil {
		return err
	}
	s.verdicts = append(s.verdicts, verdict{
		ID: ep.ID, Task: ep.Group, Status: string(ep.Status), Reward: ep.Reward,
		Success:     ep.Succeeded(),
		Compactions: ep.Metrics[agent.MetricCompactions], Turns: ep.Metrics[agent.MetricTurns],
		Error: ep.Meta[agent.MetaError], RewardNote: ep.Meta["reward_note"], CloseError: ep.Meta["close_error"],
	})
	if v := &s.verdicts[len(s.verdicts)-1]; !v.Success {
		v.Detail = tailString(ep.Meta[agent.MetaFinalObservation], 600)
	}
	return nil
}

// taskResult aggregates one task's attempts.
type taskResult struct {
	Task        string         `json:"task"`
	Attempts    int            `json:"attempts"`
	Scored      int            `json:"scored"` // attempts that were not infra_error
	Successes   int            `json:"successes"`
	Pass1       *float64       `json:"pass1"`
	MeanReward  *float64       `json:"mean_reward"`
	Compactions float64        `json:"mean_compactions"`
	Statuses    map[string]int `json:"statuses"`
	Episodes    []verdict      `json:"episodes"`
}

// results is results.json.
type results struct {
	Meta     map[string]string `json:"meta"`
	Attempts int               `json:"attempts_per_task"`
	Episodes int               `json:"episodes"`
	// Scored excludes infra_error episodes (masked, never scored 0).
	Scored     int `json:"scored"`
	InfraError int `json:"infra_errors"`
	// VerifierError counts verifier_error episodes: the task's verifier
	// could not run or finish (masked like infra_error).
	VerifierError int `json:"verifier_errors"`
	Successes     int `json:"successes"`
	// Pass1 is successes / scored, a success being status ok and a full
	// reward (episode.Success);
	// Pass1CI its 95% interval: Wilson's with one attempt a task, else
	// Wilson's on the effective number of attempts (stats.ClusterRate;
	// Pass1CIMethod says which). Absent when nothing
	// was scored.
	Pass1           *float64        `json:"pass1"`
	Pass1CI         []float64       `json:"pass1_ci95,omitempty"`
	Pass1CIMethod   string          `json:"pass1_ci95_method,omitempty"`
	MeanReward      *float64        `json:"mean_reward"`
	MeanCompactions float64         `json:"mean_compactions"`
	Compacted       int             `json:"compacted_episodes"` // scored episodes with ≥ 1 compaction
	Pass1Compacted  *float64        `json:"pass1_compacted"`    // pass@1 among them
	Statuses        map[string]int  `json:"statuses"`
	Tasks           []taskResult    `json:"tasks"`
	Skipped         []tasks.Skipped `json:"skipped,omitempty"`
}

func ptr(v float64) *float64 { return &v }

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// summarize computes pass@1 = (1/n) Σ 1[ok ∧ Success(R)] over the n scored
// episodes, its Wilson interval, and per-task verdicts.
func summarize(vs []verdict, runnable []tasks.Task, attempts int, skipped []tasks.Skipped, meta map[string]string) results {
	res := results{Meta: meta, Attempts: attempts, Statuses: map[string]int{}, Skipped: skipped}
	byTask := map[string]*taskResult{}
	for _, t := range runnable {
		byTask[t.Name] = &taskResult{Task: t.Name, Statuses: map[string]int{}}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].ID < vs[j].ID })
	var sums scoredSums
	for _, v := range vs {
		tr := byTask[v.Task]
		if tr == nil {
			tr = &taskResult{Task: v.Task, Statuses: map[string]int{}}
			byTask[v.Task] = tr
		}
		sums.count(&res, tr, v)
	}
	sums.rates(&res)
	res.Tasks = taskRates(byTask)
	clusterCI(&res)
	return res
}

// clusterCI replaces pass@1's Wilson interval over episodes by one over
// the effective number of independent attempts when some task was
// attempted more than once: the attempts of one task are not independent
// evidence (stats.ClusterRate).
func clusterCI(res *results) {
	k, n := make([]int, len(res.Tasks)), make([]int, len(res.Tasks))
	repeated := false
	for i, t := range res.Tasks {
		k[i], n[i] = t.Successes, t.Scored
		repeated = repeated || t.Scored > 1
	}
	if !repeated || res.Scored == 0 {
		return
	}
	if b, err := stats.ClusterRate(k, n); err == nil {
		res.Pass1CI, res.Pass1CIMethod = []float64{b.Lo, b.Hi}, "Wilson on the effective attempts (task design effect)"
	}
}

// scoredSums are the sums over scored episodes that the overall means
// divide.
type scoredSums struct {
	reward, compactions float64
	compactedSuccesses  int
}

// count adds verdict v to the overall counts and to its task's; an
// infra_error episode is counted but not scored.
func (s *scoredSums) count(res *results, tr *taskResult, v verdict) {
	res.Episodes++
	res.Statuses[v.Status]++
	tr.Attempts++
	tr.Statuses[v.Status]++
	tr.Episodes = append(tr.Episodes, v)
	if v.Status == string(episode.StatusInfraError) {
		res.InfraError++
		return
	}
	if v.Status == string(episode.StatusVerifierError) {
		res.VerifierError++
		return
	}
	res.Scored++
	tr.Scored++
	s.reward += v.Reward
	s.compactions += v.Compactions
	tr.Compactions += v.Compactions
	if v.Success {
		res.Successes++
		tr.Successes++
	}
	if v.Compactions > 0 {
		res.Compacted++
		if v.Success {
			s.compactedSuccesses++
		}
	}
}

// rates sets pass@1 and its 95% Wilson interval, the mean reward and
// compactions over the scored episodes, and pass@1 among the compacted ones.
func (s *scoredSums) rates(res *results) {
	if res.Scored > 0 {
		res.Pass1 = ptr(float64(res.Successes) / float64(res.Scored))
		lo, hi := stats.Wilson(res.Successes, res.Scored)
		res.Pass1CI, res.Pass1CIMethod = []float64{lo, hi}, "Wilson"
		res.MeanReward = ptr(s.reward / float64(res.Scored))
		res.MeanCompactions = s.compactions / float64(res.Scored)
	}
	if res.Compacted > 0 {
		res.Pass1Compacted = ptr(float64(s.compactedSuccesses) / float64(res.Compacted))
	}
}

// taskRates turns each task's counts into its pass@1 and means over its
// scored episodes, in the order of the task names.
func taskRates(byTask map[string]*taskResult) []taskResult {
	names := make([]string, 0, len(byTask))
	for n := range byTask {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []taskResult
	for _, n := range names {
		tr := byTask[n]
		if tr.Scored > 0 {
			tr.Pass1 = ptr(float64(tr.Successes) / float64(tr.Scored))
			sum := 0.0
			for _, v := range tr.Episodes {
				if episode.Status(v.Status).Scored() {
					sum += v.Reward
				}
			}
			tr.MeanReward = ptr(sum / float64(tr.Scored))
			tr.Compactions /= float64(tr.Scored)
		}
		out = append(out, *tr)
	}
	return out
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func fmtPtr(p *float64, format string) string {
	if p == nil || math.IsNaN(*p) {
		return "n/a"
	}
	return fmt.Sprintf(format, *p)
}

// printResults writes the per-task table and the totals.
func printResults(w io.Writer, res results) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "task\tattempts\tpass@1\tmean reward\tcompactions\tstatuses")
	for _, t := range res.Tasks {
		keys := make([]string, 0, len(t.Statuses))
		for k := range t.Statuses {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s=%d", k, t.Statuses[k])
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.2f\t%s\n", t.Task, t.Attempts, fmtPtr(t.Pass1, "%.3f"), fmtPtr(t.MeanReward, "%.3f"), t.Compactions, strings.Join(parts, " "))
	}
	tw.Flush()
	ci := ""
	if len(res.Pass1CI) == 2 {
		ci = fmt.Sprintf(" [%.3f, %.3f]", res.Pass1CI[0], res.Pass1CI[1])
	}
	fmt.Fprintf(w, "pass@1 %s%s over %d scored episodes (%d infra_error, %d verifier_error, masked); mean compactions %.2f; pass@1 of compacted %s (%d episodes)\n",
		fmtPtr(res.Pass1, "%.3f"), ci, res.Scored, res.InfraError, res.VerifierError, res.MeanCompactions, fmtPtr(res.Pass1Compacted, "%.3f"), res.Compacted)
	for _, s := range res.Skipped {
		fmt.Fprintf(w, "skipped %s: %s\n", s.Task, s.Reason)
	}
	if res.Episodes > 0 && res.Scored == 0 {
		fmt.Fprintf(w, "NOTHING COULD BE SCORED: all %d episodes were infra_error or verifier_error (see the errors in results.json)\n", res.Episodes)
	}
}

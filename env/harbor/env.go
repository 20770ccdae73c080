package harbor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/compactrl/compactrl/env/tasks"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/sandbox"
)

// OracleReply, the reply of the oracle policy, runs the task's solution
// (mounted at /solution when Options.ExposeSolution) and submits; the empty
// policy's is shelltask.SubmitReply.
const OracleReply = "```bash\nbash /solution/solve.sh\n```\n<submit/>"

// Options configure an Env. Zero values take the documented defaults.
type Options struct {
	// Sandboxing: Runner (default sandbox.Bubblewrap{}: environment/app/
	// copied to /app), or Engine, which runs each episode the way Harbor
	// does: in one container of the task's image ([environment]
	// docker_image, else environment/Dockerfile built, else Engine's
	// DefaultImage), with the verifier run in that container after the
	// agent. Limits hold for the agent's and the verifier's sandboxes; a
	// zero MemoryBytes takes [environment] memory_mb (see limits for what
	// it bounds where). CommandTimeout defaults to
	// shelltask.DefaultCommandTimeout; AgentTimeout overrides task.toml
	// when > 0. Network needs the task to allow it ([environment]
	// allow_internet not false); Terminal-Bench verifiers that install
	// their test tools at run time need it.
	tasks.Sandboxing
	// VerifierTimeout overrides task.toml when > 0.
	VerifierTimeout time.Duration
	WorkRoot        string // parent of the per-episode workspaces; default os.TempDir()
	ExposeSolution  bool   // mount solution/ read-only at /solution (for the oracle)
	// FormatHint, if set, replaces shelltask.FormatHint() as the text
	// appended to the task.
	FormatHint string
	// Reward chooses the scalar reward from the verifier's rewards (zero:
	// Harbor's "reward" key, else the only key); LoadTasks refuses the
	// tasks that cannot produce it (Task.CheckRewardChoice).
	Reward RewardChoice
	// RequireGuard refuses to run a container episode whose verdict cannot
	// be guarded (sandbox.GuardAvailable: Linux, root). Off: such an
	// episode runs with the metric verifier_guarded 0.
	RequireGuard bool
}

// Env is one Harbor task as an agent.Environment. It is not safe for
// concurrent use; make one Env per episode (they share nothing).
type Env struct {
	task *Task
	opts Options
	sh   *shelltask.Shell // workspace (app/, tests/, logs/verifier/), agent shell, metrics

	reward  float64
	rewards map[string]float64
	verOut  string
	note    string // why the reward is 0 although the verifier ran (see RewardNote)

	envs  resolvedEnvs
	back  backend  // where the episodes run, chosen by New
	notes []string // what the episode could not apply (e.g. storage_mb), shown after the verdict
}

var (
	_ agent.Environment     = (*Env)(nil)
	_ agent.MetricsReporter = (*Env)(nil)
)

// New returns an Env for task.
func New(task *Task, opts Options) *Env {
	e := &Env{task: task, opts: opts}
	e.sh = shelltask.NewShell(shelltask.Config{
		Name: "task " + task.Name, Runner: opts.Runner, CommandTimeout: opts.CommandTimeout,
		KeepWorkspace: opts.KeepWorkspace, CountRestarts: true,
		TimeUpNote: "The agent's time limit (" + e.agentTimeout().String() + ") was reached.",
	})
	e.back = newBackend(e)
	return e
}

func (e *Env) agentTimeout() time.Duration {
	if e.opts.AgentTimeout > 0 {
		return e.opts.AgentTimeout
	}
	return e.task.AgentTimeout()
}

func (e *Env) verifierTimeout() time.Duration {
	if e.opts.VerifierTimeout > 0 {
		return e.opts.VerifierTimeout
	}
	return e.task.VerifierTimeout()
}

// limits are the sandboxes' limits: Options.Limits, with the task's
// [environment] memory_mb, cpus and storage_mb where those are zero.
//
// Harbor's memory_mb bounds the whole environment. In a container
// (Options.Engine) it is exactly that: the container's memory limit. On
// the host it is two limits: the session's memory cgroup, the same bound
// on all the sandbox's processes together, where sandbox.Confinement
// enforces memory (Confinement.Enforced); and always RLIMIT_AS on each
// process, which bounds a process's address space, not its memory. So on
// the host a runtime that reserves more address space than it uses (Go,
// the JVM, V8) can fail where Harbor's container would run it, and without
// the cgroup processes together can use more than memory_mb. The
// per-process limit stays: verdicts do not change with the host's cgroup
// setup.
func (e *Env) limits() sandbox.Limits {
	l := e.opts.Limits
	if l.MemoryBytes == 0 {
		l.MemoryBytes = e.task.Config.Environment.MemoryBytes()
	}
	if l.CPUs == 0 {
		l.CPUs = float64(e.task.Config.Environment.CPUs)
	}
	if l.DiskBytes == 0 {
		l.DiskBytes = e.task.Config.Environment.StorageBytes()
	}
	if l.DiskBytes == 0 {
		// A task without storage_mb gets the documented default, not an
		// unbounded workspace on the host's disk.
		l.DiskBytes = sandbox.DefaultLimits().DiskBytes
	}
	return l
}

// Reset implements agent.Environment: the task's env tables resolved, a
// fresh workspace and the agent's shell started by the backend (host: a
// sandbox over environment/app/ at /app; container: one container of the
// task's image), and the task text.
func (e *Env) Reset(ctx context.Context) (string, error) {
	if err := e.Close(); err != nil {
		return "", fmt.Errorf("task %s: previous episode: %w", e.task.Name, err)
	}
	e.reward, e.rewards, e.verOut, e.note, e.notes = 0, nil, "", "", nil
	if err := e.resolveEnvs(); err != nil {
		return "", err
	}
	if err := e.back.start(ctx); err != nil {
		return "", err
	}
	return e.taskText(), nil
}

// taskText is the instruction with the format hint (unless disabled).
func (e *Env) taskText() string {
	task := e.task.Instruction
	if !e.opts.NoFormatHint {
		task += "\n\n" + cmp.Or(e.opts.FormatHint, shelltask.FormatHint())
	}
	return task
}

// Step implements agent.Environment: shelltask.Shell.Step, with the
// verifier run on submit. See shelltask.ParseAction for the format.
func (e *Env) Step(ctx context.Context, reply string) (agent.Step, error) {
	return e.sh.Step(ctx, reply, e.finish)
}

// finish runs the verifier once the agent phase has ended (the agent's
// sandbox closed: nothing of the agent runs beside the verifier).
func (e *Env) finish(ctx context.Context, _ shelltask.Action, obs string) (agent.Step, error) {
	reward, err := e.verify(ctx)
	for _, n := range e.notes {
		obs += "\n[" + n + "]"
	}
	if cerr := e.back.close(); err == nil && cerr != nil {
		err = fmt.Errorf("task %s: %w", e.task.Name, cerr)
	}
	if cerr := e.sh.Cleanup(); err == nil && cerr != nil {
		err = fmt.Errorf("task %s: %w", e.task.Name, cerr)
	}
	if err != nil {
		return agent.Step{}, err
	}
	e.reward = reward
	if obs != "" {
		obs += "\n"
	}
	obs += fmt.Sprintf("[submitted; verifier reward %g]", reward)
	if e.note != "" {
		obs += "\n[reward 0: " + e.note + "]"
	}
	if e.verOut != "" {
		obs += "\nverifier output (tail):\n" + tail(e.verOut, 2000)
	}
	return agent.Step{Done: true, Reward: reward, Observation: obs}, nil
}

// verify runs the verifier (backend.runVerifier) and turns what it found
// into the reward.
//
// The verifier runs the agent's code (test.sh tests what the agent left),
// so what the verifier leaves behind is the attempt's doing, not the
// harness's: a verifier that could not start or was killed from inside, a
// process outside its run that reached its files, test.sh killed by a
// signal, processes that outlived test.sh (which could have written the
// reward file while it ran), or a missing or unreadable reward score 0
// with the reason in RewardNote and the final observation. Only when the
// agent ran no command at all (and the verifier ran in a sandbox of its
// own) is a missing reward the task's own fault, an error; so is a reward
// beyond ±MaxAbsReward (with commands run, 0 with a note). A verifier that
// could not run or finish is ErrVerifier (status verifier_error).
func (e *Env) verify(ctx context.Context) (float64, error) {
	run, err := e.back.runVerifier(ctx)
	if err != nil {
		return 0, err
	}
	e.verOut = run.output
	switch {
	case run.tampered != "":
		e.sh.SetMetric(metricVerifierTampered, 1)
		return e.zero("%s", run.tampered), nil
	case run.refused != "":
		return e.zero("%s", run.refused), nil
	case run.timedOut:
		return e.verifierTimedOut()
	case run.unfinished:
		return e.zero("the verifier was killed before it finished (test.sh exit %d)", run.exit), nil
	case run.violated != "":
		e.sh.SetMetric(metricVerifierTampered, 1)
		return e.zero("%s", run.violated), nil
	case run.exit > 128 && run.exit < 128+65:
		// Before holders and stragglers: what killed test.sh is the
		// clearer note.
		return e.zero("test.sh was killed by signal %d (exit status %d)", run.exit-128, run.exit), nil
	case run.held != "":
		e.sh.SetMetric(metricVerifierTampered, 1)
		return e.zero("%s", run.held), nil
	case run.stragglers > 0:
		e.sh.SetMetric(metricVerifierStragglers, float64(run.stragglers))
		return e.zero("%d processes of the verifier's run outlived test.sh; any of them could have written the reward file", run.stragglers), nil
	}
	return e.readVerdict(run)
}

// readVerdict reads the reward test.sh left in dir the way Harbor does
// (ReadRewards: reward.json, else reward.txt; every key kept in Rewards
// and the metrics reward/KEY) and takes the scalar Options.Reward chooses
// (by default Primary: the "reward" key, else the only key). Both files,
// neither, or an unreadable one score 0 with a note once the agent ran a
// command; with no command run, a missing reward is the task's own fault
// (an error). A reward without the chosen scalar (the key missing; several
// keys and none named "reward") is the agent's once it ran a command (0
// with a note), else the task's: ErrVerifier.
func (e *Env) readVerdict(run verifierRun) (float64, error) {
	all, err := ReadRewards(run.logs)
	switch {
	case errors.Is(err, ErrTwoRewardFiles):
		return e.zero("%v (compactrl does not guess which one counts)", err), nil
	case err != nil && (e.sh.Commands() > 0 || run.agentSandbox):
		return e.zero("%v (test.sh exit %d)", err, run.exit), nil
	case err != nil:
		return 0, fmt.Errorf("task %s: %w (test.sh exit %d; output:\n%s)", e.task.Name, err, run.exit, tail(e.verOut, 2000))
	}
	for k, v := range all {
		e.sh.SetMetric(metricRewardPrefix+shelltask.Metric(k), v) // every value the verifier reported
	}
	e.rewards = all
	reward, err := e.opts.Reward.Scalar(all)
	if err != nil {
		if e.sh.Commands() > 0 {
			// The agent's code can write the file (a daemon renaming a
			// reward.json of its own into place): its failure, never a
			// masked episode.
			return e.zero("%v", err), nil
		}
		return 0, fmt.Errorf("task %s: %w: %s: %v", e.task.Name, ErrVerifier, run.logs, err)
	}
	if math.Abs(reward) > MaxAbsReward {
		if e.sh.Commands() > 0 || run.agentSandbox {
			// The agent's code could have written it: its failure.
			return e.zero("verifier reward %g is beyond ±%g", reward, MaxAbsReward), nil
		}
		return 0, fmt.Errorf("task %s: verifier reward %g is beyond ±%g", e.task.Name, reward, MaxAbsReward)
	}
	return reward, nil
}

// verifierTimedOut attributes a verifier timeout: with no command of the
// agent run, the verifier's own (ErrVerifier, status verifier_error);
// otherwise the attempt's, 0 with a note, since what the agent did (code
// under test that loops, processes left behind that stop or trace the
// verifier) can make test.sh hang, and a policy must not learn to turn its
// failures into masked episodes.
func (e *Env) verifierTimedOut() (float64, error) {
	e.sh.SetMetric(metricVerifierTimeout, 1)
	if e.sh.Commands() > 0 {
		return e.zero("test.sh timed out after %v (the agent's work can make the tests hang)", e.verifierTimeout()), nil
	}
	return 0, fmt.Errorf("task %s: %w: test.sh timed out after %v", e.task.Name, ErrVerifier, e.verifierTimeout())
}

// MaxAbsReward bounds a verifier's reward: Harbor accepts any finite
// number, compactrl's estimators (package rl) no more than this.
const MaxAbsReward = 1e6

// zero records why the attempt scores 0 although the verifier ran.
func (e *Env) zero(format string, args ...any) float64 {
	e.note = fmt.Sprintf(format, args...)
	e.sh.SetMetric(metricRewardInvalid, 1)
	return 0
}

// RewardNote says why the last verification scored 0 without a valid
// reward from the verifier ("" when the reward is the verifier's).
func (e *Env) RewardNote() string { return e.note }

func (e *Env) network() bool {
	return e.opts.Network && e.task.Config.Environment.AllowInternet
}

// env is [environment] env, then extra, then the cache variables.
func (e *Env) env(extra map[string]string) map[string]string {
	return shelltask.CacheEnv(e.opts.CacheDir, e.taskEnv(extra))
}

// taskEnv is [environment] env, then extra, as resolved at Reset.
func (e *Env) taskEnv(extra map[string]string) map[string]string {
	env := map[string]string{}
	for _, m := range []map[string]string{e.envs.environment, extra} {
		for k, v := range m {
			env[k] = v
		}
	}
	return env
}

// resolvedEnvs are the task's env tables with Harbor's ${VAR} and
// ${VAR:-default} templates resolved from this process's environment.
type resolvedEnvs struct{ environment, verifier, solution map[string]string }

// resolveEnvs resolves the task's env tables (ResolveEnv); a template
// naming an unset variable without a default is an error, as in Harbor.
func (e *Env) resolveEnvs() error {
	c := e.task.Config
	for _, x := range []struct {
		name string
		in   map[string]string
		out  *map[string]string
	}{{"environment.env", c.Environment.Env, &e.envs.environment}, {"verifier.env", c.Verifier.Env, &e.envs.verifier}, {"solution.env", c.Solution.Env, &e.envs.solution}} {
		m, err := ResolveEnv(x.in, os.LookupEnv)
		if err != nil {
			return fmt.Errorf("task %s: task.toml [%s]: %w", e.task.Name, x.name, err)
		}
		*x.out = m
	}
	return nil
}

// Close ends the episode early (if running), removes its container (if
// any) and the workspace unless KeepWorkspace; see shelltask.Shell.Close.
func (e *Env) Close() error {
	berr := e.back.close()
	return errors.Join(e.sh.Close(), berr)
}

// Workspace is the host directory of the current episode ("" after cleanup).
func (e *Env) Workspace() string { return e.sh.Workspace() }

// VerifierOutput is test.sh's output from the last verification.
func (e *Env) VerifierOutput() string { return e.verOut }

// Rewards are all values the verifier reported (reward.json may hold several).
func (e *Env) Rewards() map[string]float64 { return e.rewards }

// Metrics implements agent.MetricsReporter.
func (e *Env) Metrics() map[string]float64 { return e.sh.Metrics() }

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// copyDir copies the tree src to dst (which must not exist): regular
// files with their permission bits, directories, symlinks as symlinks.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(target, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case info.Mode().IsRegular():
			return copyFile(p, target, info.Mode().Perm())
		default:
			return fmt.Errorf("copy %s: unsupported file type %v", p, info.Mode().Type())
		}
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// CopyDir is copyDir for other environments (env/swebench).
func CopyDir(src, dst string) error {
	if _, err := os.Stat(dst); err == nil {
		return errors.New("copy " + src + ": destination " + dst + " exists")
	}
	return copyDir(src, dst)
}

// Oracle plays the task's own solution the way Harbor's oracle agent
// does, as the episode's only action, then submits: solution/ is copied to
// /solution, solve.sh is made executable and run directly (its #! line)
// with [solution.env] and DEBIAN_FRONTEND=noninteractive, under the agent's
// whole timeout rather than the per-command one.
func (e *Env) Oracle(ctx context.Context) (agent.Step, error) {
	if e.sh.Workspace() == "" {
		return agent.Step{}, fmt.Errorf("task %s: Oracle before Reset", e.task.Name)
	}
	if err := e.back.stageSolution(ctx); err != nil {
		return agent.Step{}, fmt.Errorf("task %s: solution: %w", e.task.Name, err)
	}
	env := maps.Clone(e.envs.solution)
	env["DEBIAN_FRONTEND"] = "noninteractive"
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	cmd := "env"
	for _, k := range keys {
		cmd += " " + sandbox.ShellQuote(k+"="+env[k])
	}
	cmd += " " + solutionDir + "/solve.sh"
	e.sh.SetCommandTimeout(e.agentTimeout())
	return e.Step(ctx, "```bash\n"+cmd+"\n```\n<submit/>")
}

// shadowNames are modules the test tooling imports by name: a file or
// package of one of these names in the directory test.sh runs in would be
// imported instead of the real one by `python3 -m unittest|pytest` (the
// working directory comes first on sys.path). Setting PYTHONSAFEPATH
// would stop that, but it also breaks honest tests that import their
// module from the working directory (as `python3 -m unittest test_x`
// does), which Harbor allows.
var shadowNames = []string{"unittest", "pytest", "_pytest", "doctest", "pluggy", "sitecustomize", "usercustomize"}

// shadowing names the first module of shadowNames that dir holds (as NAME.py
// or a NAME/ package), "" for none.
func shadowing(dir string) string {
	for _, n := range shadowNames {
		for _, p := range []string{n + ".py", n} {
			if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
				return p
			}
		}
	}
	return ""
}

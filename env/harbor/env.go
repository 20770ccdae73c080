package harbor

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
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
	Runner sandbox.Runner // default sandbox.Bubblewrap{}
	// Limits for the agent's and the verifier's sandboxes; a zero
	// MemoryBytes takes [environment] memory (else sandbox.DefaultLimits).
	Limits sandbox.Limits
	// CommandTimeout bounds one action (default
	// shelltask.DefaultCommandTimeout), never past the agent's deadline
	// ([agent] timeout_sec from Reset).
	CommandTimeout time.Duration
	// AgentTimeout / VerifierTimeout override task.toml when > 0.
	AgentTimeout, VerifierTimeout time.Duration
	WorkRoot                      string // parent of the per-episode workspaces; default os.TempDir()
	KeepWorkspace                 bool   // leave the workspace on disk after the episode
	ExposeSolution                bool   // mount solution/ read-only at /solution (for the oracle)
	NoFormatHint                  bool   // do not append the format hint to the task
	// FormatHint, if set, replaces shelltask.FormatHint() as the text
	// appended to the task.
	FormatHint string
	// CacheDir, if set, is a host directory shared by every sandbox of
	// every episode (shelltask.CacheMounts, shelltask.CacheEnv): builds in
	// later episodes reuse earlier ones. Off by default, since one episode
	// can then affect another.
	CacheDir string
	// Network gives the agent's and the verifier's sandboxes the host's
	// network when the task allows it ([environment] allow_internet is not
	// false). Off by default. Terminal-Bench verifiers that install their
	// test tools at run time need it.
	Network bool
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

	envs           resolvedEnvs
	boxEp          *boxEpisode        // the episode's container (container runners only)
	pendingMetrics map[string]float64 // measured before the agent's shell started
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
	e.opts.Runner = e.sh.Runner()
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

func (e *Env) limits() sandbox.Limits {
	l := e.opts.Limits
	if l.MemoryBytes == 0 {
		l.MemoryBytes, _ = e.task.Config.Environment.MemoryBytes()
	}
	if l.CPUs == 0 {
		l.CPUs = float64(e.task.Config.Environment.CPUs)
	}
	if l.DiskBytes == 0 {
		l.DiskBytes, _ = e.task.Config.Environment.StorageBytes()
	}
	if l.DiskBytes == 0 {
		// A task without storage_mb gets the documented default, not an
		// unbounded workspace on the host's disk.
		l.DiskBytes = sandbox.DefaultLimits().DiskBytes
	}
	return l
}

// Reset implements agent.Environment: a fresh workspace with
// environment/app/ copied to /app and a new sandbox shell in it.
func (e *Env) Reset(ctx context.Context) (string, error) {
	if err := e.Close(); err != nil {
		return "", fmt.Errorf("task %s: previous episode: %w", e.task.Name, err)
	}
	e.reward, e.rewards, e.verOut, e.note = 0, nil, "", ""
	e.pendingMetrics = map[string]float64{}
	if err := e.resolveEnvs(); err != nil {
		return "", err
	}
	if c, isContainer := e.opts.Runner.(sandbox.Container); isContainer {
		if err := e.resetBox(ctx, c); err != nil {
			return "", err
		}
		for k, v := range e.pendingMetrics {
			e.sh.SetMetric(k, v)
		}
		return e.taskText(), nil
	}
	{
		if need, why := e.task.NeedsContainer(); need {
			return "", fmt.Errorf("task %s: %w (%s); run it with a container runner", e.task.Name, ErrNeedsContainer, why)
		}
	}
	ws, err := e.sh.MakeWorkspace(e.opts.WorkRoot, "harbor-"+e.task.Name+"-", e.limits().DiskBytes)
	if err != nil {
		return "", err
	}
	app := filepath.Join(ws, "app")
	if src := e.task.AppDir(); src != "" {
		err = copyDir(src, app)
	} else {
		err = os.Mkdir(app, 0o755)
	}
	if err != nil {
		return "", fmt.Errorf("task %s: copy environment/app: %w", e.task.Name, err)
	}
	var mounts []sandbox.Mount
	if e.opts.ExposeSolution {
		sol := filepath.Join(ws, "solution")
		if err := copyDir(filepath.Join(e.task.Dir, "solution"), sol); err != nil {
			return "", fmt.Errorf("task %s: copy solution: %w", e.task.Name, err)
		}
		mounts = append(mounts, sandbox.Mount{Host: sol, Target: "/solution"})
	}
	if !e.opts.ExposeSolution {
		// The shared cache never sees an episode that has the solution.
		mounts = append(mounts, shelltask.CacheMounts(e.opts.CacheDir)...)
	}
	err = e.sh.Start(ctx, sandbox.Spec{
		Workdir: app, Mounts: mounts, Env: e.env(nil), Network: e.network(),
		Limits: e.limits(), Image: e.task.Config.Environment.DockerImage,
	}, e.agentTimeout())
	if err != nil {
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
	verify := e.verify
	if e.boxEp != nil {
		verify = e.verifyBox
	}
	reward, err := verify(ctx)
	if e.boxEp != nil {
		for _, n := range e.boxEp.notes {
			obs += "\n[" + n + "]"
		}
		if cerr := e.boxEp.close(); err == nil && cerr != nil {
			err = fmt.Errorf("task %s: %w", e.task.Name, cerr)
		}
		e.boxEp = nil
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

// verifierScript runs test.sh, then, from the verifier's own shell, counts
// the processes still alive besides the shell and the namespace's init
// and kills them all. A process counts unless every thread of it is a
// zombie (a thread-group leader that exited while another thread runs on
// is not dead); one whose /proc entry cannot be read counts too (it was
// listed after test.sh exited, or the shell was kept from reading: agent
// code can lower its ancestors' open-file limit). It prints the count on
// a line that starts with a per-verification nonce (NONCE below; code run
// by test.sh cannot predict it) and exits with test.sh's status. No command
// after test.sh carries a redirection: under a lowered open-file limit a
// failed redirection skips its command, which would fail open.
const verifierScript = `/tests/test.sh
__crl_rc=$?
exec 2>/dev/null
__crl_n=0
for __crl_p in /proc/[0-9]*; do
  __crl_p=${__crl_p#/proc/}
  case $__crl_p in 1|$$) continue;; esac
  __crl_live=0
  for __crl_t in /proc/$__crl_p/task/*; do
    if read -r __crl_s < "$__crl_t/stat"; then
      __crl_s=${__crl_s##*) }
      [ "${__crl_s%% *}" = Z ] || __crl_live=1
    else
      __crl_live=1
    fi
  done
  [ $__crl_live = 0 ] || __crl_n=$((__crl_n+1))
done
kill -9 -1
printf '\n` + stragglersMarker + `_NONCE %d\n' "$__crl_n"
(exit $__crl_rc)`

// stragglersMarker prefixes verifierScript's last line (with the nonce).
const stragglersMarker = "__compactrl_verifier_stragglers"

// stragglers reads verifierScript's count from the end of out (-1 when the
// line with this nonce is missing: the script was killed before it got
// there) and returns out without that line.
func stragglers(out, nonce string) (int, string) {
	marker := "\n" + stragglersMarker + "_" + nonce + " "
	i := strings.LastIndex(out, marker)
	if i < 0 {
		return -1, out
	}
	var n int
	if _, err := fmt.Sscanf(strings.TrimSpace(out[i+len(marker):]), "%d", &n); err != nil {
		return -1, out
	}
	return n, out[:i]
}

// verify runs tests/test.sh in a fresh sandbox over the workspace and
// returns the reward. The reward file is read only after that sandbox is
// closed, with every process in it dead, so nothing can rewrite it after the
// host has decided to read it.
//
// The verifier runs the agent's code (test.sh tests what is in /app), so
// what the verifier leaves behind is the attempt's doing, not the
// harness's: a missing or unreadable reward, a verifier killed from inside,
// or processes that outlived test.sh (which could have written the reward
// file while test.sh did) score 0 with the reason in RewardNote and the
// final observation. Only when the agent ran no command at all is a
// missing reward the task's own fault, an error; so is a reward beyond
// ±MaxAbsReward (with commands run, 0 with a note). The verifier gets no
// shared cache.
func (e *Env) verify(ctx context.Context) (float64, error) {
	ws := e.sh.Workspace()
	tests := filepath.Join(ws, "tests")
	logs := filepath.Join(ws, "logs", "verifier")
	if err := copyDir(filepath.Join(e.task.Dir, "tests"), tests); err != nil {
		if ferr := stageFresh(e.task); ferr != nil {
			return 0, fmt.Errorf("task %s: %w: its tests/ cannot be staged: %v", e.task.Name, ErrVerifier, ferr)
		}
		if e.sh.Metric("commands") > 0 {
			// The workspace is the agent's: a full one cannot take the tests.
			return e.zero("the workspace could not take the tests: %v", err), nil
		}
		return 0, fmt.Errorf("task %s: copy tests: %w", e.task.Name, err)
	}
	// Harbor's way: the copy is writable, test.sh executable and run
	// directly (its #! line; a script without one runs in bash).
	if err := os.Chmod(filepath.Join(tests, "test.sh"), 0o755); err != nil {
		return 0, fmt.Errorf("task %s: %w", e.task.Name, err)
	}
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return 0, fmt.Errorf("task %s: %w", e.task.Name, err)
	}
	os.Chmod(filepath.Dir(logs), 0o755)
	if m := shadowing(filepath.Join(ws, "app")); m != "" && e.sh.Metric("commands") > 0 {
		return e.zero("the agent left %s in /app, where it would shadow the test tooling's own module", m), nil
	}
	// No shared cache here: the verifier runs agent code, which must not
	// carry the hidden tests into a cache later episodes read.
	sess, err := e.opts.Runner.Start(ctx, sandbox.Spec{
		Workdir: filepath.Join(ws, "app"),
		Mounts: []sandbox.Mount{
			{Host: tests, Target: "/tests", Writable: true},
			{Host: logs, Target: "/logs/verifier", Writable: true},
		},
		Env: e.taskEnv(e.envs.verifier), Network: e.network(), Limits: e.limits(), Image: e.task.Config.Environment.DockerImage,
	})
	if err != nil && e.sh.Metric("commands") > 0 {
		// The agent's sandbox started over this workspace; the verifier's
		// does not: what the agent left (a 2,200-deep tree the host cannot
		// chown, a full disk) is the attempt's failure.
		return e.zero("the verifier's sandbox could not start over the agent's workspace: %v", err), nil
	}
	if err != nil {
		return 0, fmt.Errorf("task %s: start verifier sandbox: %w", e.task.Name, err)
	}
	begin := time.Now()
	var nb [8]byte
	rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	r, err := sess.Exec(ctx, strings.ReplaceAll(verifierScript, "NONCE", nonce), e.verifierTimeout())
	e.sh.SetMetric("verifier_seconds", time.Since(begin).Seconds())
	cerr := sess.Close()
	if err != nil {
		return 0, fmt.Errorf("task %s: verifier: %w", e.task.Name, err)
	}
	if cerr != nil {
		return 0, fmt.Errorf("task %s: verifier sandbox not contained: %w", e.task.Name, cerr)
	}
	n, out := stragglers(r.Output, nonce)
	r.Output = out
	if r.Restarted && !r.TimedOut {
		n = -1 // the verifier's shell died: whatever it printed, it did not finish
	}
	e.verOut = shelltask.FormatResult(r, e.verifierTimeout())
	switch {
	case r.TimedOut:
		return e.verifierTimedOut()
	case n < 0:
		return e.zero("the verifier was killed before it finished (test.sh exit %d)", r.ExitCode), nil
	case n > 0:
		e.sh.SetMetric("verifier_stragglers", float64(n))
		return e.zero("%d processes outlived test.sh; any of them could have written the reward file", n), nil
	case r.ExitCode > 128 && r.ExitCode < 128+65:
		return e.zero("test.sh was killed by signal %d (exit status %d)", r.ExitCode-128, r.ExitCode), nil
	}
	return e.readVerdict(logs, r.ExitCode)
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
func (e *Env) readVerdict(dir string, exit int) (float64, error) {
	all, err := ReadRewards(dir)
	switch {
	case errors.Is(err, ErrTwoRewardFiles):
		return e.zero("%v (compactrl does not guess which one counts)", err), nil
	case err != nil && (e.sh.Metric("commands") > 0 || e.boxEp != nil):
		return e.zero("%v (test.sh exit %d)", err, exit), nil
	case err != nil:
		return 0, fmt.Errorf("task %s: %w (test.sh exit %d; output:\n%s)", e.task.Name, err, exit, tail(e.verOut, 2000))
	}
	for k, v := range all {
		e.sh.SetMetric("reward/"+k, v) // every value the verifier reported
	}
	e.rewards = all
	reward, err := e.opts.Reward.Scalar(all)
	if err != nil {
		if e.sh.Metric("commands") > 0 {
			// The agent's code can write the file (a daemon renaming a
			// reward.json of its own into place): its failure, never a
			// masked episode.
			return e.zero("%v", err), nil
		}
		return 0, fmt.Errorf("task %s: %w: %s: %v", e.task.Name, ErrVerifier, dir, err)
	}
	if math.Abs(reward) > MaxAbsReward {
		if e.sh.Metric("commands") > 0 || e.boxEp != nil {
			// The agent's code could have written it: its failure.
			return e.zero("verifier reward %g is beyond ±%g", reward, MaxAbsReward), nil
		}
		return 0, fmt.Errorf("task %s: verifier reward %g is beyond ±%g", e.task.Name, reward, MaxAbsReward)
	}
	return reward, nil
}

// MaxAbsReward bounds a verifier's reward: Harbor accepts any finite
// number, compactrl's estimators (package rl) no more than this.
const MaxAbsReward = 1e6

// zero records why the attempt scores 0 although the verifier ran.
func (e *Env) zero(format string, args ...any) float64 {
	e.note = fmt.Sprintf(format, args...)
	e.sh.SetMetric("reward_invalid", 1)
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
	var berr error
	if e.boxEp != nil {
		berr = e.boxEp.close()
		e.boxEp = nil
	}
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
	ws := e.sh.Workspace()
	if ws == "" {
		return agent.Step{}, fmt.Errorf("task %s: Oracle before Reset", e.task.Name)
	}
	sol := filepath.Join(ws, "solution")
	if e.boxEp == nil && !e.opts.ExposeSolution {
		return agent.Step{}, fmt.Errorf("task %s: Oracle needs Options.ExposeSolution under bubblewrap", e.task.Name)
	}
	if e.boxEp != nil {
		if err := copyDir(filepath.Join(e.task.Dir, "solution"), sol); err != nil {
			return agent.Step{}, fmt.Errorf("task %s: copy solution: %w", e.task.Name, err)
		}
	}
	if err := os.Chmod(filepath.Join(sol, "solve.sh"), 0o755); err != nil {
		return agent.Step{}, fmt.Errorf("task %s: solution: %w", e.task.Name, err)
	}
	if e.boxEp != nil {
		if err := e.boxEp.box.CopyIn(ctx, sol, solutionDir); err != nil {
			return agent.Step{}, fmt.Errorf("task %s: %w", e.task.Name, err)
		}
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

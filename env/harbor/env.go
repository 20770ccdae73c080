package harbor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/sandbox"
)

// Replies of the two scripted policies.
const (
	// OracleReply runs the task's solution (mounted at /solution when
	// Options.ExposeSolution) and submits.
	OracleReply = "```bash\nbash /solution/solve.sh\n```\n<submit/>"
	// SubmitReply submits at once (the empty policy).
	SubmitReply = "<submit/>"
)

// Options configure an Env. Zero values take the documented defaults.
type Options struct {
	Runner sandbox.Runner // default sandbox.Bubblewrap{}
	// Limits for the agent's and the verifier's sandboxes; a zero
	// MemoryBytes takes [environment] memory (else sandbox.DefaultLimits).
	Limits sandbox.Limits
	// CommandTimeout bounds one action (default 120 s), never past the
	// agent's deadline ([agent] timeout_sec from Reset).
	CommandTimeout time.Duration
	// AgentTimeout / VerifierTimeout override task.toml when > 0.
	AgentTimeout, VerifierTimeout time.Duration
	WorkRoot                      string // parent of the per-episode workspaces; default os.TempDir()
	KeepWorkspace                 bool   // leave the workspace on disk after the episode
	ExposeSolution                bool   // mount solution/ read-only at /solution (for the oracle)
	NoFormatHint                  bool   // do not append FormatHint to the task
	// CacheDir, if set, is a host directory shared by every sandbox of
	// every episode, mounted writable at /cache, with GOCACHE=/cache/go-build
	// and PIP_CACHE_DIR=/cache/pip: builds in later episodes reuse earlier
	// ones. Off by default, since one episode can then affect another.
	CacheDir string
	// Network gives the agent's and the verifier's sandboxes the host's
	// network when the task allows it ([environment] allow_internet is not
	// false). Off by default. Terminal-Bench verifiers that install their
	// test tools at run time need it.
	Network bool
}

// Env is one Harbor task as an agent.Environment. It is not safe for
// concurrent use; make one Env per episode (they share nothing).
type Env struct {
	task *Task
	opts Options

	ws       string // workspace root: app/, tests/, logs/verifier/
	sess     sandbox.Session
	started  time.Time
	deadline time.Time
	done     bool
	reward   float64
	rewards  map[string]float64
	verOut   string
	metrics  map[string]float64
}

var (
	_ agent.Environment     = (*Env)(nil)
	_ agent.MetricsReporter = (*Env)(nil)
)

// New returns an Env for task.
func New(task *Task, opts Options) *Env {
	if opts.Runner == nil {
		opts.Runner = sandbox.Bubblewrap{}
	}
	if opts.CommandTimeout <= 0 {
		opts.CommandTimeout = 120 * time.Second
	}
	return &Env{task: task, opts: opts}
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
	return l
}

// Reset implements agent.Environment: a fresh workspace with
// environment/app/ copied to /app and a new sandbox shell in it.
func (e *Env) Reset(ctx context.Context) (string, error) {
	e.Close()
	if _, isContainer := e.opts.Runner.(sandbox.Container); !isContainer {
		if need, why := e.task.NeedsContainer(); need {
			return "", fmt.Errorf("task %s: %w (%s); run it with a container runner", e.task.Name, ErrNeedsContainer, why)
		}
	}
	ws, err := sandbox.MkdirTemp(e.opts.WorkRoot, "harbor-"+e.task.Name+"-")
	if err != nil {
		return "", fmt.Errorf("task %s: workspace: %w", e.task.Name, err)
	}
	e.ws = ws
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
	mounts = append(mounts, e.cacheMounts()...)
	e.sess, err = e.opts.Runner.Start(ctx, sandbox.Spec{
		Workdir: app, Mounts: mounts, Env: e.env(nil), Network: e.network(),
		Limits: e.limits(), Image: e.task.Config.Environment.DockerImage,
	})
	if err != nil {
		return "", fmt.Errorf("task %s: start sandbox: %w", e.task.Name, err)
	}
	e.started = time.Now()
	e.deadline = e.started.Add(e.agentTimeout())
	e.done = false
	e.reward, e.rewards, e.verOut = 0, nil, ""
	e.metrics = map[string]float64{"commands": 0, "invalid_actions": 0, "command_timeouts": 0, "shell_restarts": 0}
	task := e.task.Instruction
	if !e.opts.NoFormatHint {
		task += "\n\n" + FormatHint
	}
	return task, nil
}

// Step implements agent.Environment. See ParseAction for the format.
func (e *Env) Step(ctx context.Context, reply string) (agent.Step, error) {
	if e.sess == nil || e.done {
		return agent.Step{}, fmt.Errorf("task %s: Step before Reset or after the episode ended", e.task.Name)
	}
	a, err := ParseAction(reply)
	if err != nil || (a.Command == "" && !a.Submit) {
		if err == nil {
			err = ErrNoAction
		}
		e.metrics["invalid_actions"]++
		return agent.Step{Invalid: true, Observation: "Invalid action: " + err.Error()}, nil
	}
	var obs string
	if a.Command != "" {
		left := time.Until(e.deadline)
		if left <= 0 {
			return e.finish(ctx, "The agent's time limit was reached before this command could run.")
		}
		timeout := min(e.opts.CommandTimeout, left)
		r, err := e.sess.Exec(ctx, a.Command, timeout)
		if err != nil {
			return agent.Step{}, fmt.Errorf("task %s: exec: %w", e.task.Name, err)
		}
		e.metrics["commands"]++
		if r.TimedOut {
			e.metrics["command_timeouts"]++
		}
		if r.Restarted {
			e.metrics["shell_restarts"]++
		}
		obs = FormatResult(r, timeout)
		if r.TimedOut && time.Until(e.deadline) <= 0 {
			return e.finish(ctx, obs+"\nThe agent's time limit ("+e.agentTimeout().String()+") was reached.")
		}
	}
	if a.Submit {
		return e.finish(ctx, obs)
	}
	return agent.Step{Observation: obs}, nil
}

// FormatResult renders a command's result as the observation the policy
// sees: the output, then a bracketed status line.
func FormatResult(r sandbox.Result, timeout time.Duration) string {
	var b strings.Builder
	b.WriteString(r.Output)
	if r.Output != "" && !strings.HasSuffix(r.Output, "\n") {
		b.WriteByte('\n')
	}
	switch {
	case r.TimedOut:
		fmt.Fprintf(&b, "[command timed out after %s and was killed; the shell was restarted: working directory and variables were reset, files are kept]", timeout.Round(time.Millisecond))
	case r.Restarted:
		fmt.Fprintf(&b, "[the shell exited; a fresh shell (in /app, variables reset) runs the next command]")
	default:
		fmt.Fprintf(&b, "[exit code %d]", r.ExitCode)
	}
	return b.String()
}

// finish ends the agent phase and runs the verifier.
func (e *Env) finish(ctx context.Context, obs string) (agent.Step, error) {
	e.done = true
	e.metrics["agent_seconds"] = time.Since(e.started).Seconds()
	e.sess.Close()
	reward, err := e.verify(ctx)
	if err != nil {
		e.cleanup()
		return agent.Step{}, err
	}
	e.reward = reward
	e.cleanup()
	if obs != "" {
		obs += "\n"
	}
	obs += fmt.Sprintf("[submitted; verifier reward %g]", reward)
	if e.verOut != "" {
		obs += "\nverifier output (tail):\n" + tail(e.verOut, 2000)
	}
	return agent.Step{Done: true, Reward: reward, Observation: obs}, nil
}

// verify runs tests/test.sh in a fresh sandbox over the workspace.
func (e *Env) verify(ctx context.Context) (float64, error) {
	tests := filepath.Join(e.ws, "tests")
	logs := filepath.Join(e.ws, "logs", "verifier")
	if err := copyDir(filepath.Join(e.task.Dir, "tests"), tests); err != nil {
		return 0, fmt.Errorf("task %s: copy tests: %w", e.task.Name, err)
	}
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return 0, fmt.Errorf("task %s: %w", e.task.Name, err)
	}
	os.Chmod(filepath.Dir(logs), 0o755)
	sess, err := e.opts.Runner.Start(ctx, sandbox.Spec{
		Workdir: filepath.Join(e.ws, "app"),
		Mounts: append([]sandbox.Mount{
			{Host: tests, Target: "/tests"},
			{Host: logs, Target: "/logs/verifier", Writable: true},
		}, e.cacheMounts()...),
		Env: e.env(e.task.Config.Verifier.Env), Network: e.network(), Limits: e.limits(), Image: e.task.Config.Environment.DockerImage,
	})
	if err != nil {
		return 0, fmt.Errorf("task %s: start verifier sandbox: %w", e.task.Name, err)
	}
	defer sess.Close()
	begin := time.Now()
	r, err := sess.Exec(ctx, "bash /tests/test.sh", e.verifierTimeout())
	e.metrics["verifier_seconds"] = time.Since(begin).Seconds()
	if err != nil {
		return 0, fmt.Errorf("task %s: verifier: %w", e.task.Name, err)
	}
	e.verOut = FormatResult(r, e.verifierTimeout())
	reward, all, err := ReadReward(logs)
	if r.TimedOut {
		// The agent's work can make the tests hang: that is a failure of
		// the attempt, not of the infrastructure (a reward written before
		// the timeout still counts).
		e.metrics["verifier_timeout"] = 1
		if err != nil {
			return 0, nil
		}
	}
	if err != nil {
		return 0, fmt.Errorf("task %s: %w (test.sh exit %d; output:\n%s)", e.task.Name, err, r.ExitCode, tail(r.Output, 2000))
	}
	e.rewards = all
	return reward, nil
}

func (e *Env) network() bool {
	return e.opts.Network && e.task.Config.Environment.AllowInternet
}

// env is [environment] env, then extra, then the cache variables.
func (e *Env) env(extra map[string]string) map[string]string {
	env := map[string]string{}
	for k, v := range e.task.Config.Environment.Env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	if e.opts.CacheDir != "" {
		env["GOCACHE"] = "/cache/go-build"
		env["PIP_CACHE_DIR"] = "/cache/pip"
	}
	return env
}

func (e *Env) cacheMounts() []sandbox.Mount {
	if e.opts.CacheDir == "" {
		return nil
	}
	return []sandbox.Mount{{Host: e.opts.CacheDir, Target: "/cache", Writable: true}}
}

// Close ends the episode early (if running) and removes the workspace
// unless KeepWorkspace. Safe to call at any time.
func (e *Env) Close() error {
	if e.sess != nil {
		e.sess.Close()
	}
	e.cleanup()
	return nil
}

func (e *Env) cleanup() {
	if e.ws != "" && !e.opts.KeepWorkspace {
		os.RemoveAll(e.ws)
		e.ws = ""
	}
}

// Workspace is the host directory of the current episode ("" after cleanup).
func (e *Env) Workspace() string { return e.ws }

// VerifierOutput is test.sh's output from the last verification.
func (e *Env) VerifierOutput() string { return e.verOut }

// Rewards are all values the verifier reported (reward.json may hold several).
func (e *Env) Rewards() map[string]float64 { return e.rewards }

// Metrics implements agent.MetricsReporter.
func (e *Env) Metrics() map[string]float64 {
	m := make(map[string]float64, len(e.metrics))
	for k, v := range e.metrics {
		m[k] = v
	}
	return m
}

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

package harbor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/sandbox"
)

// backend is where an Env's episodes run, chosen once, by New: on the host
// (hostBackend: Options.Runner over a workspace directory) or, with
// Options.Engine, in one container of the task's image (boxBackend), the
// way Harbor runs tasks. Env keeps what both share — the task text, the
// agent's steps, the verdict — and asks its backend only for what differs.
type backend interface {
	// admit says why the task cannot run here ("" when it can), building
	// or finding its image once where that is needed; note receives what
	// it did (an image built).
	admit(ctx context.Context, note func(string)) string
	// start makes the episode's workspace and starts the agent's shell.
	start(ctx context.Context) error
	// stageSolution makes the task's solution/ available at /solution,
	// solve.sh executable, for the oracle.
	stageSolution(ctx context.Context) error
	// runVerifier stages the tests and runs test.sh once the agent's
	// shell is closed; what it saw is the run's, the verdict Env.verify's.
	runVerifier(ctx context.Context) (verifierRun, error)
	// close removes what start made beyond the workspace (a container,
	// guarded directories); safe to call again.
	close() error
}

// newBackend is the backend Options choose for e: the container engine
// when one is set, else the host runner (shelltask's default filled in).
func newBackend(e *Env) backend {
	if e.opts.Engine != nil {
		return &boxBackend{e: e, c: *e.opts.Engine}
	}
	return &hostBackend{e: e, runner: e.sh.Runner()}
}

// verifierRun is what one verification found, whichever backend ran it;
// Env.verify turns it into the verdict.
type verifierRun struct {
	// tampered, violated and held say how a process outside the
	// verifier's run reached it (the metric verifier_tampered; the verdict
	// is 0 with the note): tampered before test.sh's outcome can be judged
	// at all (it could not start, it was traced, its exec pipe was written
	// into), violated by opening or changing the verdict's files, held by
	// keeping them open after test.sh exited. They are weighed in that
	// order among the outcomes (see Env.verify): a timeout comes before
	// violated, a signal before held.
	tampered, violated, held string
	// refused says why test.sh did not run because of what the agent left
	// (its workspace full, a module shadowing the test tooling); the
	// verdict is 0 with this note.
	refused string
	logs    string // host directory holding what test.sh wrote to /logs/verifier
	output  string // what the episode reports as the verifier's output
	exit    int    // test.sh's exit status
	// timedOut: test.sh outlived [verifier] timeout_sec.
	timedOut bool
	// unfinished: the verifier's wrapper was killed before it could tell
	// how test.sh ended.
	unfinished bool
	// stragglers counts processes of the run that outlived test.sh.
	stragglers int
	// agentSandbox: test.sh ran in the agent's own sandbox (its
	// container), so what it left is the attempt's even when the agent ran
	// no command.
	agentSandbox bool
}

// The metrics Harbor episodes add to shelltask's.
const (
	metricRewardInvalid      shelltask.Metric = "reward_invalid"   // the verifier ran but its reward was not taken: see RewardNote
	metricRewardPrefix       shelltask.Metric = "reward/"          // + each key of the verifier's reward
	metricVerifierSeconds    shelltask.Metric = "verifier_seconds" // test.sh's wall-clock time
	metricVerifierTimeout    shelltask.Metric = "verifier_timeout"
	metricVerifierStragglers shelltask.Metric = "verifier_stragglers" // processes that outlived test.sh
	metricVerifierTampered   shelltask.Metric = "verifier_tampered"
	// containers: bytes the verifier exec's own pipe carried (test.sh's
	// output goes to test-stdout.txt; the pipe carries only the wrapper's
	// errors unless a process of the container wrote into it)
	metricVerifierPipeBytes     shelltask.Metric = "verifier_exec_pipe_bytes"
	metricVerifierGuarded       shelltask.Metric = "verifier_guarded"               // containers: the verdict's files were guarded
	metricDirsRefusedToAgent    shelltask.Metric = "verifier_dirs_refused_to_agent" // containers: opens of them the agent's phase tried
	metricImageBuildSeconds     shelltask.Metric = "image_build_seconds"
	metricImageCached           shelltask.Metric = "image_cached"
	metricContainerStartSeconds shelltask.Metric = "container_start_seconds"
)

// hostBackend runs an episode in host sandboxes (bubblewrap): the agent's
// over a workspace holding environment/app/ at /app, and after it a fresh
// one over the same workspace for the verifier.
type hostBackend struct {
	e      *Env
	runner sandbox.Runner
}

// admit refuses a task that needs its container image.
func (h *hostBackend) admit(context.Context, func(string)) string {
	if need, why := h.e.task.NeedsContainer(); need {
		return "needs its container image (" + why + "); run it with --runner podman (or docker)"
	}
	return ""
}

// start copies environment/app/ into a fresh workspace (and solution/
// with Options.ExposeSolution) and starts the agent's shell over it.
func (h *hostBackend) start(ctx context.Context) error {
	e := h.e
	if need, why := e.task.NeedsContainer(); need {
		return fmt.Errorf("task %s: %w (%s); run it with a container runner", e.task.Name, ErrNeedsContainer, why)
	}
	ws, err := e.sh.MakeWorkspace(e.opts.WorkRoot, "harbor-"+e.task.Name+"-", e.limits().DiskBytes)
	if err != nil {
		return err
	}
	app := filepath.Join(ws, "app")
	if src := e.task.AppDir(); src != "" {
		err = copyDir(src, app)
	} else {
		err = os.Mkdir(app, 0o755)
	}
	if err != nil {
		return fmt.Errorf("task %s: copy environment/app: %w", e.task.Name, err)
	}
	var mounts []sandbox.Mount
	if e.opts.ExposeSolution {
		sol := filepath.Join(ws, "solution")
		if err := copyDir(filepath.Join(e.task.Dir, "solution"), sol); err != nil {
			return fmt.Errorf("task %s: copy solution: %w", e.task.Name, err)
		}
		mounts = append(mounts, sandbox.Mount{Host: sol, Target: solutionDir})
	} else {
		// The shared cache never sees an episode that has the solution.
		mounts = append(mounts, shelltask.CacheMounts(e.opts.CacheDir)...)
	}
	return e.sh.Start(ctx, sandbox.Spec{
		Workdir: app, Mounts: mounts, Env: e.env(nil), Network: e.network(),
		Limits: e.limits(), Image: e.task.Config.Environment.DockerImage,
	}, e.agentTimeout())
}

// stageSolution: the solution was mounted at Reset, when
// Options.ExposeSolution asked for it.
func (h *hostBackend) stageSolution(context.Context) error {
	if !h.e.opts.ExposeSolution {
		return fmt.Errorf("Oracle needs Options.ExposeSolution on the host")
	}
	return os.Chmod(filepath.Join(h.e.sh.Workspace(), "solution", "solve.sh"), 0o755)
}

func (h *hostBackend) close() error { return nil }

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

// runVerifier runs tests/test.sh in a fresh sandbox over the workspace.
// Its reward file is read only after that sandbox is closed, with every
// process in it dead, so nothing can rewrite it after the host has decided
// to read it. The verifier gets no shared cache: it runs agent code, which
// must not carry the hidden tests into a cache later episodes read.
func (h *hostBackend) runVerifier(ctx context.Context) (verifierRun, error) {
	e := h.e
	ws := e.sh.Workspace()
	tests := filepath.Join(ws, "tests")
	logs := filepath.Join(ws, "logs", "verifier")
	if err := copyDir(filepath.Join(e.task.Dir, "tests"), tests); err != nil {
		if ferr := stageFresh(e.task); ferr != nil {
			return verifierRun{}, fmt.Errorf("task %s: %w: its tests/ cannot be staged: %v", e.task.Name, ErrVerifier, ferr)
		}
		if e.sh.Commands() > 0 {
			// The workspace is the agent's: a full one cannot take the tests.
			return verifierRun{refused: fmt.Sprintf("the workspace could not take the tests: %v", err)}, nil
		}
		return verifierRun{}, fmt.Errorf("task %s: copy tests: %w", e.task.Name, err)
	}
	// Harbor's way: the copy is writable, test.sh executable and run
	// directly (its #! line; a script without one runs in bash).
	if err := os.Chmod(filepath.Join(tests, "test.sh"), 0o755); err != nil {
		return verifierRun{}, fmt.Errorf("task %s: %w", e.task.Name, err)
	}
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return verifierRun{}, fmt.Errorf("task %s: %w", e.task.Name, err)
	}
	os.Chmod(filepath.Dir(logs), 0o755)
	if m := shadowing(filepath.Join(ws, "app")); m != "" && e.sh.Commands() > 0 {
		return verifierRun{refused: fmt.Sprintf("the agent left %s in /app, where it would shadow the test tooling's own module", m)}, nil
	}
	sess, err := h.runner.Start(ctx, sandbox.Spec{
		Workdir: filepath.Join(ws, "app"),
		Mounts: []sandbox.Mount{
			{Host: tests, Target: testsDir, Writable: true},
			{Host: logs, Target: verifierDir, Writable: true},
		},
		Env: e.taskEnv(e.envs.verifier), Network: e.network(), Limits: e.limits(), Image: e.task.Config.Environment.DockerImage,
	})
	if err != nil && e.sh.Commands() > 0 {
		// The agent's sandbox started over this workspace; the verifier's
		// does not: what the agent left (a 2,200-deep tree the host cannot
		// chown, a full disk) is the attempt's failure.
		return verifierRun{refused: fmt.Sprintf("the verifier's sandbox could not start over the agent's workspace: %v", err)}, nil
	}
	if err != nil {
		return verifierRun{}, fmt.Errorf("task %s: start verifier sandbox: %w", e.task.Name, err)
	}
	begin := time.Now()
	var nb [8]byte
	rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	r, err := sess.Exec(ctx, strings.ReplaceAll(verifierScript, "NONCE", nonce), e.verifierTimeout())
	e.sh.SetMetric(metricVerifierSeconds, time.Since(begin).Seconds())
	cerr := sess.Close()
	if err != nil {
		return verifierRun{}, fmt.Errorf("task %s: verifier: %w", e.task.Name, err)
	}
	if cerr != nil {
		return verifierRun{}, fmt.Errorf("task %s: verifier sandbox not contained: %w", e.task.Name, cerr)
	}
	n, out := stragglers(r.Output, nonce)
	r.Output = out
	if r.Restarted && !r.TimedOut {
		n = -1 // the verifier's shell died: whatever it printed, it did not finish
	}
	return verifierRun{
		logs: logs, output: shelltask.FormatResult(r, e.verifierTimeout()), exit: r.ExitCode,
		timedOut: r.TimedOut, unfinished: n < 0, stragglers: max(n, 0),
	}, nil
}

package shelltask

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/sandbox"
)

// DefaultCommandTimeout bounds one command when Config.CommandTimeout is 0.
const DefaultCommandTimeout = 120 * time.Second

// Config configures a Shell. Zero values take the documented defaults.
type Config struct {
	// Name names the episode in errors ("task hello", "instance a__b-1").
	Name   string
	Runner sandbox.Runner // default sandbox.Bubblewrap{}
	// CommandTimeout bounds one command (default DefaultCommandTimeout),
	// never past the agent's deadline.
	CommandTimeout time.Duration
	KeepWorkspace  bool // leave the workspace on disk after the episode
	// CountRestarts adds the metric shell_restarts: commands that found the
	// shell exited and ran in a fresh one.
	CountRestarts bool
	// PatchOnly is the invalid-action error for a reply that parses but
	// neither runs a command nor submits (a ```diff block alone); nil means
	// ErrNoAction.
	PatchOnly error
	// TimeUpNote follows the result of a command that ran into the agent's
	// deadline, in the last observation.
	TimeUpNote string
}

// Shell is the agent phase of one shell-task episode: the workspace, the
// persistent sandbox shell the policy's commands run in, the agent's
// deadline and the episode's metrics. It is not safe for concurrent use.
//
// An environment's Reset calls MakeWorkspace, fills the workspace and calls
// Start; its Step is Shell.Step with the environment's verification as the
// SubmitFunc; its Close is Shell.Close.
type Shell struct {
	cfg      Config
	ws       string       // workspace root
	unmount  func() error // undoes the workspace's size-limited tmpfs
	sess     sandbox.Session
	started  time.Time
	deadline time.Time
	done     bool
	metrics  map[Metric]float64
}

// Metric names one of an episode's metrics (a key of
// agent.MetricsReporter's map). The agent phase's own are the constants
// below; an environment declares its own the same way and sets them with
// SetMetric.
type Metric string

// The agent phase's metrics, kept by Shell.
const (
	metricCommands        Metric = "commands"         // commands run
	metricInvalidActions  Metric = "invalid_actions"  // replies that neither ran a command nor submitted
	metricCommandTimeouts Metric = "command_timeouts" // commands killed at their timeout
	metricShellRestarts   Metric = "shell_restarts"   // commands that found the shell exited (Config.CountRestarts)
	metricAgentSeconds    Metric = "agent_seconds"    // the agent phase's wall-clock time
)

// NewShell returns a Shell with no episode started.
func NewShell(cfg Config) *Shell {
	if cfg.Runner == nil {
		cfg.Runner = sandbox.Bubblewrap{}
	}
	if cfg.CommandTimeout <= 0 {
		cfg.CommandTimeout = DefaultCommandTimeout
	}
	if cfg.PatchOnly == nil {
		cfg.PatchOnly = ErrNoAction
	}
	return &Shell{cfg: cfg}
}

// Runner is the runner the shell's sandboxes start from (the default
// filled in); the environment's verifier sandboxes use it too.
func (s *Shell) Runner() sandbox.Runner { return s.cfg.Runner }

// MakeWorkspace makes the episode's workspace under root with NewWorkspace
// and returns its path; Cleanup and Close remove it.
func (s *Shell) MakeWorkspace(root, pattern string, limit int64) (string, error) {
	ws, unmount, err := NewWorkspace(s.cfg.Runner, root, pattern, limit)
	if err != nil {
		return "", fmt.Errorf("%s: workspace: %w", s.cfg.Name, err)
	}
	s.ws, s.unmount = ws, unmount
	return ws, nil
}

// Start starts the agent's shell from spec, the agent's clock (deadline
// agentTimeout from now) and fresh metrics: commands, invalid_actions,
// command_timeouts (and shell_restarts with Config.CountRestarts).
func (s *Shell) Start(ctx context.Context, spec sandbox.Spec, agentTimeout time.Duration) error {
	sess, err := s.cfg.Runner.Start(ctx, spec)
	if err != nil {
		return fmt.Errorf("%s: start sandbox: %w", s.cfg.Name, err)
	}
	s.StartSession(sess, agentTimeout)
	return nil
}

// StartSession is Start with a session the environment started itself
// (a shell in the episode's container).
func (s *Shell) StartSession(sess sandbox.Session, agentTimeout time.Duration) {
	s.sess = sess
	s.started = time.Now()
	s.deadline = s.started.Add(agentTimeout)
	s.done = false
	s.metrics = map[Metric]float64{metricCommands: 0, metricInvalidActions: 0, metricCommandTimeouts: 0}
	if s.cfg.CountRestarts {
		s.metrics[metricShellRestarts] = 0
	}
}

// SubmitFunc ends an episode once the agent phase is over and its sandbox
// is closed with every process in it dead: it verifies the workspace and
// returns the final step. a is the last reply's action; obs is what that
// reply's command showed (or a time-limit note, or "").
type SubmitFunc func(ctx context.Context, a Action, obs string) (agent.Step, error)

// Step plays one policy reply (see ParseAction for the format). An
// unusable reply is an invalid step whose observation says why. A command
// runs in the shell for at most CommandTimeout, never past the agent's
// deadline, and its FormatResult is the observation. On submit, or when
// the agent's time is up, the agent's sandbox is closed and submit ends
// the episode.
func (s *Shell) Step(ctx context.Context, reply string, submit SubmitFunc) (agent.Step, error) {
	if s.sess == nil || s.done {
		return agent.Step{}, fmt.Errorf("%s: Step before Reset or after the episode ended", s.cfg.Name)
	}
	a, err := ParseAction(reply)
	if err == nil && a.Command == "" && !a.Submit {
		err = s.cfg.PatchOnly
	}
	if err != nil {
		s.metrics[metricInvalidActions]++
		return agent.Step{Invalid: true, Observation: "Invalid action: " + err.Error()}, nil
	}
	var obs string
	if a.Command != "" {
		left := time.Until(s.deadline)
		if left <= 0 {
			return s.end(ctx, submit, a, "The agent's time limit was reached before this command could run.")
		}
		timeout := min(s.cfg.CommandTimeout, left)
		r, err := s.sess.Exec(ctx, a.Command, timeout)
		if err != nil {
			return agent.Step{}, fmt.Errorf("%s: exec: %w", s.cfg.Name, err)
		}
		s.metrics[metricCommands]++
		if r.TimedOut {
			s.metrics[metricCommandTimeouts]++
		}
		if r.Restarted && s.cfg.CountRestarts {
			s.metrics[metricShellRestarts]++
		}
		obs = FormatResult(r, timeout)
		if r.TimedOut && time.Until(s.deadline) <= 0 {
			return s.end(ctx, submit, a, obs+"\n"+s.cfg.TimeUpNote)
		}
	}
	if a.Submit {
		return s.end(ctx, submit, a, obs)
	}
	return agent.Step{Observation: obs}, nil
}

// end closes the agent phase, records agent_seconds and hands over to
// submit. Close returns only once every process the agent started is
// dead: nothing of the agent runs beside the verification, and nothing
// can still write the files it reads.
func (s *Shell) end(ctx context.Context, submit SubmitFunc, a Action, obs string) (agent.Step, error) {
	s.done = true
	s.metrics[metricAgentSeconds] = time.Since(s.started).Seconds()
	err := s.sess.Close()
	s.sess = nil
	if err != nil {
		s.Cleanup()
		return agent.Step{}, fmt.Errorf("%s: agent sandbox not contained: %w", s.cfg.Name, err)
	}
	return submit(ctx, a, obs)
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

// SetCommandTimeout changes the bound on one command (still never past
// the agent's deadline): the oracle's solve.sh runs under the agent's
// whole timeout.
func (s *Shell) SetCommandTimeout(d time.Duration) {
	if d > 0 {
		s.cfg.CommandTimeout = d
	}
}

// Commands is how many of the policy's commands have run this episode:
// none means whatever the verification finds is not the agent's doing.
func (s *Shell) Commands() int { return int(s.metrics[metricCommands]) }

// SetMetric records an environment's own metric; only after Start.
func (s *Shell) SetMetric(name Metric, v float64) { s.metrics[name] = v }

// Metrics returns a copy of the episode's metrics, for
// agent.MetricsReporter.
func (s *Shell) Metrics() map[string]float64 {
	m := make(map[string]float64, len(s.metrics))
	for k, v := range s.metrics {
		m[string(k)] = v
	}
	return m
}

// Workspace is the current episode's workspace ("" before MakeWorkspace
// and after Cleanup).
func (s *Shell) Workspace() string { return s.ws }

// Close ends the episode early (if running) and removes the workspace
// unless KeepWorkspace. Safe to call at any time. The error reports a
// sandbox whose processes could not all be confirmed dead, or a workspace
// that could not be removed.
func (s *Shell) Close() error {
	var err error
	if s.sess != nil {
		err = s.sess.Close()
		s.sess = nil
	}
	return errors.Join(err, s.Cleanup())
}

// Cleanup removes the workspace unless KeepWorkspace.
func (s *Shell) Cleanup() error {
	if s.ws == "" || s.cfg.KeepWorkspace {
		return nil
	}
	err := RemoveWorkspace(s.ws, s.unmount)
	s.ws, s.unmount = "", nil
	return err
}

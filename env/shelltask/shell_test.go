package shelltask

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/sandbox"
)

// fakeRunner's sessions answer commands with results in order (a result's
// Duration is slept), and Close returns closeErr.
type fakeRunner struct {
	results  []sandbox.Result
	closeErr error
	cmds     []string
	closed   int
	mounted  []int64 // MountWorkspace's limits
	unmounts int
}

func (r *fakeRunner) MountWorkspace(_ string, limit int64) (func() error, error) {
	r.mounted = append(r.mounted, limit)
	return func() error { r.unmounts++; return nil }, nil
}

type fakeSession struct{ r *fakeRunner }

func (r *fakeRunner) Start(context.Context, sandbox.Spec) (sandbox.Session, error) {
	return fakeSession{r}, nil
}

func (s fakeSession) Exec(_ context.Context, cmd string, _ time.Duration) (sandbox.Result, error) {
	s.r.cmds = append(s.r.cmds, cmd)
	if len(s.r.results) == 0 {
		return sandbox.Result{}, errors.New("no result scripted")
	}
	res := s.r.results[0]
	s.r.results = s.r.results[1:]
	time.Sleep(res.Duration)
	return res, nil
}

func (s fakeSession) Close() error {
	s.r.closed++
	return s.r.closeErr
}

// submitted records the SubmitFunc's call and ends the episode with reward 1.
type submitted struct {
	called bool
	a      Action
	obs    string
}

func (s *submitted) submit(_ context.Context, a Action, obs string) (agent.Step, error) {
	s.called, s.a, s.obs = true, a, obs
	return agent.Step{Done: true, Reward: 1, Observation: obs + "[verified]"}, nil
}

func startShell(t *testing.T, cfg Config, agentTimeout time.Duration) (*Shell, *fakeRunner) {
	t.Helper()
	r, _ := cfg.Runner.(*fakeRunner)
	if r == nil {
		r = &fakeRunner{}
		cfg.Runner = r
	}
	sh := NewShell(cfg)
	ws, err := sh.MakeWorkspace(t.TempDir(), "shelltask-", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(context.Background(), sandbox.Spec{Workdir: ws}, agentTimeout); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Close() })
	return sh, r
}

func TestShellStep(t *testing.T) {
	ctx := context.Background()
	patchOnly := errors.New("diff alone")
	for _, c := range []struct {
		name    string
		cfg     Config
		results []sandbox.Result
		reply   string
		want    agent.Step
		submit  bool // the SubmitFunc ran
		metrics map[string]float64
	}{
		{"command", Config{}, []sandbox.Result{{Output: "hi"}}, "```bash\necho hi\n```",
			agent.Step{Observation: "hi\n[exit code 0]"}, false,
			map[string]float64{"commands": 1, "invalid_actions": 0, "command_timeouts": 0}},
		{"restart counted", Config{CountRestarts: true}, []sandbox.Result{{ExitCode: -1, Restarted: true}}, "```bash\nexit\n```",
			agent.Step{Observation: "[the shell exited; a fresh shell (in /app, variables reset) runs the next command]"}, false,
			map[string]float64{"commands": 1, "invalid_actions": 0, "command_timeouts": 0, "shell_restarts": 1}},
		{"restart not counted", Config{}, []sandbox.Result{{ExitCode: -1, Restarted: true}}, "```bash\nexit\n```",
			agent.Step{Observation: "[the shell exited; a fresh shell (in /app, variables reset) runs the next command]"}, false,
			map[string]float64{"commands": 1, "invalid_actions": 0, "command_timeouts": 0}},
		{"no action", Config{}, nil, "let me think",
			agent.Step{Invalid: true, Observation: "Invalid action: " + ErrNoAction.Error()}, false,
			map[string]float64{"commands": 0, "invalid_actions": 1, "command_timeouts": 0}},
		{"diff alone, default", Config{}, nil, "```diff\n-a\n+b\n```",
			agent.Step{Invalid: true, Observation: "Invalid action: " + ErrNoAction.Error()}, false,
			map[string]float64{"commands": 0, "invalid_actions": 1, "command_timeouts": 0}},
		{"diff alone, PatchOnly", Config{PatchOnly: patchOnly}, nil, "```diff\n-a\n+b\n```",
			agent.Step{Invalid: true, Observation: "Invalid action: diff alone"}, false,
			map[string]float64{"commands": 0, "invalid_actions": 1, "command_timeouts": 0}},
		{"command then submit", Config{}, []sandbox.Result{{Output: "built\n", ExitCode: 2}}, "```bash\nmake\n```\n<submit/>",
			agent.Step{Done: true, Reward: 1, Observation: "built\n[exit code 2][verified]"}, true,
			map[string]float64{"commands": 1, "invalid_actions": 0, "command_timeouts": 0}},
		{"submit", Config{}, nil, SubmitReply,
			agent.Step{Done: true, Reward: 1, Observation: "[verified]"}, true,
			map[string]float64{"commands": 0, "invalid_actions": 0, "command_timeouts": 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Runner = &fakeRunner{results: c.results}
			sh, r := startShell(t, c.cfg, time.Hour)
			var sub submitted
			st, err := sh.Step(ctx, c.reply, sub.submit)
			if err != nil || st != c.want {
				t.Fatalf("Step = %+v, %v; want %+v", st, err, c.want)
			}
			if sub.called != c.submit {
				t.Errorf("submit called %v, want %v", sub.called, c.submit)
			}
			m := sh.Metrics()
			if c.submit {
				if m["agent_seconds"] <= 0 || r.closed != 1 {
					t.Errorf("agent phase not ended: agent_seconds %v, %d closes", m["agent_seconds"], r.closed)
				}
				delete(m, "agent_seconds")
				if _, err := sh.Step(ctx, SubmitReply, sub.submit); err == nil {
					t.Error("Step after the episode ended accepted")
				}
			}
			for k, v := range c.metrics {
				if m[k] != v {
					t.Errorf("metric %s = %v, want %v", k, m[k], v)
				}
			}
			if len(m) != len(c.metrics) {
				t.Errorf("metrics %v, want %v", m, c.metrics)
			}
		})
	}
}

func TestShellAgentDeadline(t *testing.T) {
	ctx := context.Background()
	t.Run("command cut off", func(t *testing.T) {
		cfg := Config{TimeUpNote: "Time is up.", Runner: &fakeRunner{results: []sandbox.Result{{Output: "partial", ExitCode: -1, TimedOut: true, Duration: 60 * time.Millisecond}}}}
		sh, r := startShell(t, cfg, 50*time.Millisecond)
		var sub submitted
		st, err := sh.Step(ctx, "```bash\nsleep 100\n```", sub.submit)
		if err != nil || !st.Done || !sub.called {
			t.Fatalf("Step = %+v, %v; submit called %v", st, err, sub.called)
		}
		if !strings.HasPrefix(sub.obs, "partial\n[command timed out after ") || !strings.HasSuffix(sub.obs, "]\nTime is up.") {
			t.Errorf("observation %q", sub.obs)
		}
		if m := sh.Metrics(); m["command_timeouts"] != 1 || m["commands"] != 1 {
			t.Errorf("metrics %v", m)
		}
		if r.closed != 1 {
			t.Errorf("%d closes, want 1", r.closed)
		}
	})
	t.Run("no time left", func(t *testing.T) {
		sh, r := startShell(t, Config{}, time.Nanosecond)
		time.Sleep(time.Millisecond)
		var sub submitted
		if _, err := sh.Step(ctx, "```bash\nls\n```", sub.submit); err != nil {
			t.Fatal(err)
		}
		if sub.obs != "The agent's time limit was reached before this command could run." || len(r.cmds) != 0 {
			t.Errorf("observation %q, commands run %q", sub.obs, r.cmds)
		}
	})
}

func TestShellStepErrors(t *testing.T) {
	ctx := context.Background()
	never := func(context.Context, Action, string) (agent.Step, error) {
		t.Error("submit called")
		return agent.Step{}, nil
	}
	if _, err := NewShell(Config{Name: "task x"}).Step(ctx, SubmitReply, never); err == nil || !strings.HasPrefix(err.Error(), "task x: Step before Reset") {
		t.Errorf("Step before Start: %v", err)
	}
	sh, _ := startShell(t, Config{Name: "task x", Runner: &fakeRunner{closeErr: errors.New("3 processes still alive")}}, time.Hour)
	ws := sh.Workspace()
	_, err := sh.Step(ctx, SubmitReply, never)
	if err == nil || err.Error() != "task x: agent sandbox not contained: 3 processes still alive" {
		t.Errorf("leaking sandbox: %v", err)
	}
	if _, serr := os.Stat(ws); !os.IsNotExist(serr) || sh.Workspace() != "" {
		t.Errorf("workspace %s left after a leaking sandbox: %v", ws, serr)
	}
	sh, _ = startShell(t, Config{Name: "task x"}, time.Hour)
	if _, err := sh.Step(ctx, "```bash\nls\n```", never); err == nil || !strings.HasPrefix(err.Error(), "task x: exec: ") {
		t.Errorf("exec failure: %v", err)
	}
}

func TestShellClose(t *testing.T) {
	for _, keep := range []bool{false, true} {
		sh, r := startShell(t, Config{KeepWorkspace: keep}, time.Hour)
		ws := sh.Workspace()
		if err := sh.Close(); err != nil {
			t.Fatal(err)
		}
		_, err := os.Stat(ws)
		if kept := err == nil; kept != keep || r.closed != 1 {
			t.Errorf("KeepWorkspace %v: workspace kept %v, %d closes", keep, kept, r.closed)
		}
		if err := sh.Close(); err != nil || r.closed != 1 {
			t.Errorf("second Close: %v, %d closes", err, r.closed)
		}
		os.RemoveAll(ws)
	}
}

func TestFormatResult(t *testing.T) {
	for _, c := range []struct {
		name string
		r    sandbox.Result
		want string
	}{
		{"exit code", sandbox.Result{Output: "out", ExitCode: 3}, "out\n[exit code 3]"},
		{"no output", sandbox.Result{}, "[exit code 0]"},
		{"newline kept", sandbox.Result{Output: "out\n"}, "out\n[exit code 0]"},
		{"timed out", sandbox.Result{TimedOut: true, Restarted: true, ExitCode: -1},
			"[command timed out after 1.5s and was killed; the shell was restarted: working directory and variables were reset, files are kept]"},
		{"restarted", sandbox.Result{Restarted: true, ExitCode: -1}, "[the shell exited; a fresh shell (in /app, variables reset) runs the next command]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := FormatResult(c.r, 1500*time.Millisecond); got != c.want {
				t.Errorf("FormatResult = %q, want %q", got, c.want)
			}
		})
	}
}

func TestCache(t *testing.T) {
	if CacheMounts("") != nil || CacheEnv("", nil) != nil {
		t.Error("no cache dir: want no mounts and no variables")
	}
	if m := CacheMounts("/host/cache"); !slices.Equal(m, []sandbox.Mount{{Host: "/host/cache", Target: "/cache", Writable: true}}) {
		t.Errorf("CacheMounts = %v", m)
	}
	env := CacheEnv("/host/cache", map[string]string{"A": "1"})
	if len(env) != 3 || env["A"] != "1" || env["GOCACHE"] != "/cache/go-build" || env["PIP_CACHE_DIR"] != "/cache/pip" {
		t.Errorf("CacheEnv = %v", env)
	}
}

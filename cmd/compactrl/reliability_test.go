package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hangTask writes a task whose oracle solution sleeps, so that its episode
// holds a workspace while the test kills the run.
func hangTask(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tasks", "hang")
	for p, s := range map[string]string{"instruction.md": "x", "task.toml": "", "tests/test.sh": "echo 1 > /logs/verifier/reward.txt",
		"solution/solve.sh": "echo started > /app/started; sleep 120", "environment/app/keep": "x"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), []byte(s), 0o755)
	}
	return filepath.Dir(dir)
}

// TestEvalHelperProcess is the eval that TestEvalKill9LeavesNoWorkspace
// kills: it runs `eval` with the arguments in COMPACTRL_EVAL_HELPER.
func TestEvalHelperProcess(t *testing.T) {
	args := os.Getenv("COMPACTRL_EVAL_HELPER")
	if args == "" {
		t.Skip("helper process only")
	}
	run(context.Background(), env{stdin: strings.NewReader(""), stdout: os.Stdout, stderr: os.Stderr}, strings.Split(args, "\x1f"))
}

// kill -9 of eval mid-episode leaves its run directory (with the episode's
// workspace, a tmpfs as root); the next eval with the same --work-root
// removes it.
func TestEvalKill9LeavesNoWorkspace(t *testing.T) {
	evalNeedBwrap(t)
	tasks := hangTask(t)
	tmp := t.TempDir()
	os.Chmod(tmp, 0o711) // the sandbox user must reach the workspaces
	os.Chmod(filepath.Dir(tmp), 0o711)
	root := filepath.Join(tmp, "work")
	args := []string{"eval", "--tasks", tasks, "--policy", "oracle", "--out", filepath.Join(t.TempDir(), "run1"), "--work-root", root}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEvalHelperProcess$")
	cmd.Env = append(os.Environ(), "COMPACTRL_EVAL_HELPER="+strings.Join(args, "\x1f"))
	var logb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logb, &logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var started string
	for deadline := time.Now().Add(60 * time.Second); started == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		m, _ := filepath.Glob(filepath.Join(root, "run-*", "harbor-hang-*", "app", "started"))
		if len(m) > 0 {
			started = m[0]
		}
	}
	if started == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the episode never started:\n%s", logb.String())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	runDir := filepath.Dir(filepath.Dir(filepath.Dir(started)))
	if _, err := os.Stat(runDir); err != nil {
		t.Fatalf("the killed run's directory is already gone: %v", err)
	}
	_, stderr, _ := runCmd(t, "eval", "--tasks", copyShipped(t, "count-lines"), "--policy", "empty", "--out", filepath.Join(t.TempDir(), "run2"), "--work-root", root)
	if _, err := os.Stat(runDir); err == nil {
		t.Fatalf("%s survived the next eval:\n%s", runDir, stderr)
	}
	if !strings.Contains(stderr, "left by a run that died") {
		t.Errorf("the next eval did not say what it removed:\n%s", stderr)
	}
	if left, _ := os.ReadDir(root); len(left) != 0 {
		t.Errorf("%s still holds %v", root, left)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(root)) {
		t.Errorf("a workspace is still mounted under %s", root)
	}
}

// deadEngine answers every sampling request with 500; its /tokenize works
// (one id per byte) unless tokenize is false.
func deadEngine(t *testing.T, tokenize bool) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tokenize && r.URL.Path == "/tokenize" {
			var body struct {
				Content string `json:"content"`
			}
			json.NewDecoder(r.Body).Decode(&body)
			ids := make([]int, len(body.Content))
			for i := range ids {
				ids[i] = 10
			}
			json.NewEncoder(w).Encode(map[string]any{"tokens": ids})
			return
		}
		http.Error(w, `{"error":"injected"}`, 500)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A total engine outage: every episode is infra_error, eval says nothing
// could be scored and exits with exitNothingScored (not 0).
func TestEvalTotalOutageIsNotSuccess(t *testing.T) {
	evalNeedBwrap(t)
	tasks := copyShipped(t, "count-lines")
	out := filepath.Join(t.TempDir(), "run")
	var stdout, stderr bytes.Buffer
	err := runEval(context.Background(), env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}, []string{"--tasks", tasks, "--out", out,
		"--engine", deadEngine(t, true), "--template", "1,2,3,4,5,6", "--engine-timeout", "2s", "--engine-retries", "2", "--attempts", "2"})
	var ee *exitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitNothingScored {
		t.Fatalf("err %v (want exit %d)\n%s", err, exitNothingScored, stderr.String())
	}
	if !strings.Contains(stdout.String(), "NOTHING COULD BE SCORED") {
		t.Fatalf("stdout:\n%s", stdout.String())
	}
	if r := readResults(t, out); r.Scored != 0 || r.InfraError != 2 || r.Pass1 != nil {
		t.Fatalf("results %+v", r)
	}
	// An engine whose /tokenize is down already refuses to build the agent
	// (its system prompt cannot be encoded): eval stops before any episode.
	err = runEval(context.Background(), env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}, []string{"--tasks", tasks, "--out", t.TempDir(),
		"--engine", deadEngine(t, false), "--template", "1,2,3,4,5,6", "--engine-timeout", "2s", "--engine-retries", "1"})
	if err == nil || !strings.Contains(err.Error(), "system prompt: tokenize: ") {
		t.Fatalf("eval over a dead /tokenize: %v", err)
	}
	if _, _, code := runCmd(t, "eval", "--tasks", tasks, "--out", out, "--engine", deadEngine(t, true), "--template", "1,2,3,4,5,6",
		"--engine-timeout", "2s", "--engine-retries", "1"); code == 0 {
		t.Fatal("exit 0 on a total outage")
	}
	if !strings.Contains(stderr.String(), "sandbox limits per session") {
		t.Errorf("no startup line on the enforced limits:\n%s", stderr.String())
	}
}

func TestInfraOutcome(t *testing.T) {
	if err := infraOutcome(5, 0); err != nil {
		t.Fatal(err)
	}
	var ee *exitError
	if err := infraOutcome(5, 2); !errors.As(err, &ee) || ee.ExitCode() != exitSomeInfra || !strings.Contains(err.Error(), "2 of 5") {
		t.Fatalf("some infra: %v", err)
	}
	if err := infraOutcome(3, 3); !errors.As(err, &ee) || ee.ExitCode() != exitNothingScored {
		t.Fatalf("all infra: %v", err)
	}
}

// rollout over infra errors: success is over scored episodes ("n/a" when
// none), and the exit status is not 0.
func TestRolloutTotalInfraErrorNotSuccess(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ep.jsonl")
	var stdout, stderr bytes.Buffer
	err := runRollout(context.Background(), env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}, []string{"--episodes", "3", "--workers", "1", "--episode-timeout", "1ns", "--out", out})
	var ee *exitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitNothingScored {
		t.Fatalf("err %v\n%s", err, stderr.String())
	}
	if s := stdout.String(); !strings.Contains(s, "success n/a (nothing scored)") || strings.Contains(s, "success 0.000") {
		t.Fatalf("stats line: %s", s)
	}
	// The process exits with the documented code, not 0 or a generic 1.
	if _, _, code := runCmd(t, "rollout", "--episodes", "2", "--workers", "1", "--episode-timeout", "1ns", "--out", out); code != exitNothingScored {
		t.Fatalf("exit %d with every episode infra_error, want %d", code, exitNothingScored)
	}
}

package harbor

import (
	"context"
	"errors"
	"github.com/compactrl/compactrl/env/tasks"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/sandbox"
)

// These tests play hostile tasks: the agent's code (in /app, which the
// verifier runs) tries to fake or void the verifier's verdict, or to use
// more than the task's resources across several processes.

// hostile runs one episode of a task whose test.sh runs /app/prog (written
// by the agent's one command) and returns the final step and the Env.
func hostile(t *testing.T, opts Options, toml, testSh, prog string) (float64, string, *Env, error) {
	t.Helper()
	testenv.MustHaveBwrap(t)
	task, err := Load(writeTask(t, map[string]string{"instruction.md": "x", "task.toml": toml, "tests/test.sh": testSh}))
	if err != nil {
		t.Fatal(err)
	}
	e := New(task, opts)
	ctx := context.Background()
	if _, err := e.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	write := "```bash\ncat > /app/prog <<'PROG_EOF'\n" + prog + "\nPROG_EOF\nchmod +x /app/prog\n```\n<submit/>"
	st, err := e.Step(ctx, write)
	if err == nil && !st.Done {
		t.Fatalf("episode did not end: %+v", st)
	}
	return st.Reward, st.Observation, e, err
}

// A failing test.sh whose program leaves a daemon that keeps writing 1 to
// the reward file: the verdict is 0, not the daemon's 1.
func TestHostileBackgroundRewardWriter(t *testing.T) {
	for i := 0; i < 3; i++ {
		r, obs, e, err := hostile(t, Options{}, "",
			"/app/prog\necho 0 > /logs/verifier/reward.txt\n",
			"#!/bin/bash\nsetsid nohup bash -c 'while :; do echo 1 > /logs/verifier/reward.txt; done' >/dev/null 2>&1 &\nsleep 0.2\n")
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if r != 0 {
			t.Fatalf("run %d: a background writer faked reward %v\n%s", i, r, obs)
		}
		if e.RewardNote() == "" || e.Metrics()["reward_invalid"] != 1 || !strings.Contains(obs, "outlived test.sh") {
			t.Fatalf("run %d: no reason recorded: note %q metrics %v\n%s", i, e.RewardNote(), e.Metrics(), obs)
		}
	}
}

// The agent's code kills every process it can (the verifier included):
// the attempt scores 0 with status ok, not a masked infra error.
func TestHostileKillsVerifier(t *testing.T) {
	r, obs, e, err := hostile(t, Options{}, "",
		"/app/prog\necho 1 > /logs/verifier/reward.txt\n",
		"#!/bin/bash\nkill -9 -1\n")
	if err != nil {
		t.Fatalf("killing the verifier became an error (infra_error, masked): %v", err)
	}
	if r != 0 || !strings.Contains(e.RewardNote(), "killed") {
		t.Fatalf("reward %v note %q\n%s", r, e.RewardNote(), obs)
	}
}

// After the agent ran code, a missing reward file scores 0 with the reason.
func TestMissingRewardAfterAgentCodeScoresZero(t *testing.T) {
	r, _, e, err := hostile(t, Options{}, "", "/app/prog\n", "#!/bin/bash\nrm -rf /logs/verifier/* 2>/dev/null; exit 0\n")
	if err != nil || r != 0 || !strings.Contains(e.RewardNote(), "no reward file") {
		t.Fatalf("reward %v err %v note %q", r, err, e.RewardNote())
	}
}

// Any finite reward is the verifier's (Harbor's rule: partial credit and
// scales other than [0, 1] exist); one beyond ±MaxAbsReward, once the
// agent's code ran, scores 0 with a note (the agent's code could have
// written it), never a number the estimators would overflow on.
func TestRewardRange(t *testing.T) {
	for _, v := range []string{"2", "-3", "0.25"} {
		r, _, _, err := hostile(t, Options{}, "", "echo "+v+" > /logs/verifier/reward.txt\n", "true")
		if want, _ := strconv.ParseFloat(v, 64); err != nil || r != want {
			t.Fatalf("reward %s: got %v, %v", v, r, err)
		}
	}
	for _, v := range []string{"1e7", "-1e308"} {
		r, _, e, err := hostile(t, Options{}, "", "echo "+v+" > /logs/verifier/reward.txt\n", "true")
		if err != nil || r != 0 || !strings.Contains(e.RewardNote(), "beyond") {
			t.Fatalf("reward %s: got %v, %v, note %q", v, r, err, e.RewardNote())
		}
	}
}

// A daemon the agent started during its phase is dead before the verifier
// starts: it would otherwise recreate /app/flag while the tests run.
func TestAgentDaemonDeadBeforeVerifier(t *testing.T) {
	testenv.MustHaveBwrap(t)
	task, err := Load(writeTask(t, map[string]string{"instruction.md": "x", "task.toml": "",
		"tests/test.sh": "rm -f /app/flag; sleep 0.3; if [ -e /app/flag ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"}))
	if err != nil {
		t.Fatal(err)
	}
	e := New(task, Options{})
	ctx := context.Background()
	if _, err := e.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	st, err := e.Step(ctx, "```bash\nsetsid nohup sh -c 'while :; do touch /app/flag; sleep 0.01; done' >/dev/null 2>&1 &\nsleep 0.1\n```\n<submit/>")
	if err != nil || !st.Done || st.Reward != 0 {
		t.Fatalf("agent daemon survived into the verifier: %+v %v", st, err)
	}
}

// needConfined returns Options whose sandbox enforces per-session limits,
// skipping (locally) or failing (CI) where the host cannot.
func needConfined(t *testing.T) Options {
	t.Helper()
	testenv.MustHaveBwrap(t)
	c := sandbox.DetectConfinement()
	if mem, pids, _, disk := c.Enforced(); !mem || !pids || !disk {
		testenv.Unavailable(t, "per-session limits not enforceable here: %s", c.Describe())
	}
	return Options{Sandboxing: tasks.Sandboxing{Runner: sandbox.Bubblewrap{Confine: c}}}
}

// Four processes of 150 MB each under a task with memory_mb = 256: the
// session's cgroup stops them (per-process rlimits alone let all through).
func TestHostileMemoryAcrossProcesses(t *testing.T) {
	opts := needConfined(t)
	r, obs, _, err := hostile(t, opts, "[environment]\nmemory_mb = 256\n",
		"if /app/prog | grep -q '^survived 4$'; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
		"#!/bin/bash\nfor i in 1 2 3 4; do (python3 -c 'import time; b = bytearray(150 << 20); time.sleep(2)' && echo ok) & done | grep -c ok | sed 's/^/survived /'\n")
	if err != nil || r != 0 {
		t.Fatalf("4 × 150 MB ran under memory_mb = 256: reward %v err %v\n%s", r, err, obs)
	}
}

// Three files of 40 MB under storage_mb = 64: the workspace's tmpfs is full
// before the third (RLIMIT_FSIZE alone bounds each file, not their sum).
func TestHostileDiskAcrossProcesses(t *testing.T) {
	opts := needConfined(t)
	r, obs, _, err := hostile(t, opts, "[environment]\nstorage_mb = 64\n",
		"if /app/prog; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
		"#!/bin/bash\nfor i in 1 2 3; do head -c 40000000 /dev/zero > /app/f$i & done; wait\nfor i in 1 2 3; do [ $(stat -c %s /app/f$i) = 40000000 ] || exit 1; done\n")
	if err != nil || r != 0 {
		t.Fatalf("120 MB written under storage_mb = 64: reward %v err %v\n%s", r, err, obs)
	}
}

// The oracle still passes with the verifier hardening, within a deadline.
func TestVerifierHardeningKeepsHonestVerdicts(t *testing.T) {
	start := time.Now()
	r, obs, e, err := hostile(t, Options{}, "", "if [ -x /app/prog ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n", "true")
	if err != nil || r != 1 || e.RewardNote() != "" {
		t.Fatalf("honest pass: reward %v err %v note %q\n%s", r, err, e.RewardNote(), obs)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("took %v", d)
	}
}

// leakyRunner's sessions cannot confirm their processes dead.
type leakyRunner struct{}

type leakySession struct{}

// MountWorkspace bounds nothing (the test writes no files).
func (leakyRunner) MountWorkspace(string, int64) (func() error, error) {
	return func() error { return nil }, nil
}

func (leakyRunner) Start(context.Context, sandbox.Spec) (sandbox.Session, error) {
	return leakySession{}, nil
}

func (leakySession) Exec(context.Context, string, time.Duration) (sandbox.Result, error) {
	return sandbox.Result{}, nil
}

func (leakySession) Close() error { return errors.New("3 processes still alive") }

// A sandbox that leaks is reported: by Close, and as an error (infra) when
// the agent's sandbox leaks before the verifier would start.
func TestLeakedSandboxReported(t *testing.T) {
	task, err := Load(writeTask(t, map[string]string{"instruction.md": "x", "task.toml": "", "tests/test.sh": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	e := New(task, Options{Sandboxing: tasks.Sandboxing{Runner: leakyRunner{}}})
	if _, err := e.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err == nil || !strings.Contains(err.Error(), "still alive") {
		t.Fatalf("Close = %v", err)
	}
	if _, err := e.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step(context.Background(), shelltask.SubmitReply); err == nil || !strings.Contains(err.Error(), "not contained") {
		t.Fatalf("leaking agent sandbox: %v", err)
	}
}

// Agent code run by test.sh writes 1, prints the line the verifier's
// wrapper prints at its end (it cannot know the per-verification nonce),
// and kills every process it can, the wrapper included: 0, "killed".
func TestHostileForgedStragglerLine(t *testing.T) {
	r, obs, e, err := hostile(t, Options{}, "",
		"/app/prog\necho 0 > /logs/verifier/reward.txt\n",
		"#!/bin/bash\necho 1 > /logs/verifier/reward.txt\nprintf '\\n__compactrl_verifier_stragglers 0\\n__compactrl_verifier_stragglers_0000000000000000 0\\n'\nkill -9 -1\n")
	if err != nil || r != 0 || !strings.Contains(e.RewardNote(), "killed") {
		t.Fatalf("reward %v err %v note %q\n%s", r, err, e.RewardNote(), obs)
	}
}

// Agent code run by test.sh forks a process whose thread-group leader
// exits while a thread lives on and rewrites the reward whenever it reads
// 0: a zombie leader is not a dead process, so it counts as outliving
// test.sh and the attempt scores 0.
func TestHostileThreadBehindExitedLeader(t *testing.T) {
	r, obs, e, err := hostile(t, Options{}, "",
		"/app/prog\nsleep 0.3\necho 0 > /logs/verifier/reward.txt\n",
		`#!/usr/bin/python3
import ctypes, os, platform, threading, time
if os.fork() == 0:
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    def flip():
        while True:
            try:
                if open("/logs/verifier/reward.txt").read().strip() == "0":
                    open("/logs/verifier/reward.txt", "w").write("1")
            except OSError:
                pass
    threading.Thread(target=flip).start()
    time.sleep(0.05)
    ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)`)
	if err != nil || r != 0 || !strings.Contains(e.RewardNote(), "outlived test.sh") {
		t.Fatalf("reward %v err %v note %q\n%s", r, err, e.RewardNote(), obs)
	}
}

// Agent code run by test.sh leaves a writer behind and lowers the
// verifier's shell's open-file limit so that it cannot read /proc to count
// it: an unreadable process counts as alive, and the attempt scores 0.
func TestHostileLowersVerifierFileLimit(t *testing.T) {
	r, obs, e, err := hostile(t, Options{}, "",
		"/app/prog\necho 0 > /logs/verifier/reward.txt\n",
		`#!/usr/bin/python3
import os, resource, subprocess
shell = int(open("/proc/%d/stat" % os.getppid()).read().rsplit(")", 1)[1].split()[1])
subprocess.Popen(["setsid", "bash", "-c", "while :; do echo 1 > /logs/verifier/reward.txt; done"],
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
resource.prlimit(shell, resource.RLIMIT_NOFILE, (3, 3))`)
	if err != nil || r != 0 || !strings.Contains(e.RewardNote(), "outlived test.sh") {
		t.Fatalf("reward %v err %v note %q\n%s", r, err, e.RewardNote(), obs)
	}
}

// playOnce loads a task from files and plays one reply in a fresh episode
// (closed when the test ends).
func playOnce(t *testing.T, opts Options, files map[string]string, reply string) (agent.Step, *Env, error) {
	t.Helper()
	testenv.MustHaveBwrap(t)
	task, err := Load(writeTask(t, files))
	if err != nil {
		t.Fatal(err)
	}
	e := New(task, opts)
	t.Cleanup(func() { e.Close() })
	if _, err := e.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := e.Step(context.Background(), reply)
	return st, e, err
}

// agentFails plays one agent command and submits; the attempt must score 0
// with a note containing want (status ok), not an error that would mask it.
func agentFails(t *testing.T, opts Options, toml, cmd, want string) {
	t.Helper()
	st, e, err := playOnce(t, opts, map[string]string{"instruction.md": "x", "task.toml": toml,
		"tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n", "tests/data.txt": strings.Repeat("x", 64<<10)},
		"```bash\n"+cmd+"\n```\n<submit/>")
	if err != nil || !st.Done || st.Reward != 0 || !strings.Contains(e.RewardNote(), want) {
		t.Fatalf("reward %v err %v note %q\n%s", st.Reward, err, e.RewardNote(), st.Observation)
	}
}

// An agent that fills its workspace so the host cannot copy the tests in
// fails its attempt (was infra_error, masked).
func TestAgentFillingWorkspaceScoresZero(t *testing.T) {
	agentFails(t, needConfined(t), "[environment]\nstorage_mb = 16\n",
		"head -c 40000000 /dev/zero > /app/fill; true", "could not take the tests")
}

// An agent that nests directories deeper than the host's path limit, so the
// verifier's sandbox cannot be set up over its workspace, fails its attempt
// (was infra_error, masked).
func TestAgentDeepTreeScoresZero(t *testing.T) {
	agentFails(t, Options{}, "",
		`python3 -c "
import os
os.chdir('/app')
for _ in range(2200):
    os.mkdir('d'); os.chdir('d')
"`, "could not start over the agent's workspace")
}

// Without storage_mb a task's workspace still gets the documented default
// disk limit (it got none: an agent wrote 5 GiB to the host's disk).
func TestDefaultDiskLimit(t *testing.T) {
	task, err := Load(writeTask(t, map[string]string{"instruction.md": "x", "task.toml": "", "tests/test.sh": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := New(task, Options{}).limits().DiskBytes; got != sandbox.DefaultLimits().DiskBytes || got == 0 {
		t.Fatalf("disk limit %d, want the default %d", got, sandbox.DefaultLimits().DiskBytes)
	}
}

// The shared --cache is not mounted in the verifier (agent code it runs
// cannot carry the hidden tests to the next attempt) and absent from
// episodes that see the solution.
func TestCacheHoldsNoTestsOrSolution(t *testing.T) {
	testenv.MustHaveBwrap(t)
	cache, err := sandbox.MkdirTemp("", "compactrl-cache-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(cache) })
	os.Chmod(cache, 0o777)
	task, err := Load(writeTask(t, map[string]string{"instruction.md": "x", "task.toml": "",
		"tests/test.sh":     "cp /tests/secret.txt /cache/ 2>/dev/null; echo 0 > /logs/verifier/reward.txt\n",
		"tests/secret.txt":  "hidden",
		"solution/solve.sh": "cp /solution/solve.sh /cache/ 2>/dev/null; true\n"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, oracle := range []bool{false, true} {
		e := New(task, Options{Sandboxing: tasks.Sandboxing{CacheDir: cache}, ExposeSolution: oracle})
		if _, err := e.Reset(context.Background()); err != nil {
			t.Fatal(err)
		}
		var err error
		if oracle {
			_, err = e.Oracle(context.Background())
		} else {
			_, err = e.Step(context.Background(), "<submit/>")
		}
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Fatalf("the cache holds %v", ents)
	}
}

// A unittest.py the agent planted in /app does not shadow the standard
// library's when test.sh runs `python3 -m unittest` from /app.
func TestPlantedModuleDoesNotShadowTestTool(t *testing.T) {
	st, e, err := playOnce(t, Options{}, map[string]string{"instruction.md": "x", "task.toml": "",
		"tests/test_fail.py": "import unittest\n\nclass T(unittest.TestCase):\n    def test_fails(self):\n        self.fail()\n",
		"tests/test.sh":      "cd /app && python3 -m unittest discover -s /tests && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"},
		"```bash\nprintf 'import sys\\nsys.exit(0)\\n' > /app/unittest.py\n```\n<submit/>")
	if err != nil || st.Reward != 0 || !strings.Contains(e.RewardNote(), "unittest.py") {
		t.Fatalf("a planted unittest.py passed the tests: %+v %v (note %q)", st, err, e.RewardNote())
	}
}

// memory_mb reaches both host limits (each process's address space, and
// the session's cgroup, whose default is the same value) and the
// container's memory limit, which sandbox.Container sets from
// SessionMemoryBytes's default.
func TestMemoryMBLimits(t *testing.T) {
	task, err := Load(writeTask(t, map[string]string{"instruction.md": "x", "task.toml": "[environment]\nmemory_mb = 256\n", "tests/test.sh": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	l := New(task, Options{}).limits()
	if l.MemoryBytes != 256<<20 || l.SessionMemoryBytes != 0 {
		t.Fatalf("limits %+v: want MemoryBytes 256 MiB and SessionMemoryBytes left to default to it", l)
	}
	if l := New(task, Options{Sandboxing: tasks.Sandboxing{Limits: sandbox.Limits{MemoryBytes: 1 << 30}}}).limits(); l.MemoryBytes != 1<<30 {
		t.Fatalf("--memory-mb does not override memory_mb: %+v", l)
	}
}

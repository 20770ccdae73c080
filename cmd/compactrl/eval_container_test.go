package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compactrl/compactrl/env/harbor"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/sandbox"
	"github.com/compactrl/compactrl/serve"
)

// eval runs today's Harbor tasks in containers built from their own
// Dockerfiles (--runner podman): the oracle passes, the empty policy does
// not, an attack on the verdict scores 0 with its note in the episode, a
// symlinked task directory loads, and a task whose image cannot be built,
// or whose task.toml Harbor would reject, is skipped and named (exit 5)
// while the others run.
func TestEvalContainerHarbor(t *testing.T) {
	testenv.MustHavePodman(t)
	src := filepath.Join("..", "..", "env", "harbor", "testdata", "container")
	tasks := filepath.Join(t.TempDir(), "tasks")
	os.Mkdir(tasks, 0o755)
	for _, n := range []string{"service-and-files", "tamper-leftover-writer"} {
		if err := harbor.CopyDir(filepath.Join(src, n), filepath.Join(tasks, n)); err != nil {
			t.Fatal(err)
		}
	}
	real := filepath.Join(t.TempDir(), "elsewhere")
	if err := harbor.CopyDir(filepath.Join(src, "reward-json-two-keys"), real); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(tasks, "linked")); err != nil {
		t.Fatal(err)
	}
	for dir, files := range map[string]map[string]string{
		"unbuildable": {"instruction.md": "x", "task.toml": "", "tests/test.sh": "#!/bin/bash\n", "environment/Dockerfile": "FROM localhost/compactrl-base:bookworm\nRUN exit 3\n"},
		"bad-toml":    {"instruction.md": "x", "task.toml": "[verifier]\ntimeout_sec = \"soon\"\n", "tests/test.sh": "#!/bin/bash\n"},
	} {
		for p, s := range files {
			os.MkdirAll(filepath.Dir(filepath.Join(tasks, dir, p)), 0o755)
			os.WriteFile(filepath.Join(tasks, dir, p), []byte(s), 0o755)
		}
	}
	for _, c := range []struct {
		policy string
		pass   map[string]float64
	}{
		{"oracle", map[string]float64{"service-and-files": 1, "linked": 1, "tamper-leftover-writer": 0}},
		{"empty", map[string]float64{"service-and-files": 0, "linked": 0, "tamper-leftover-writer": 0}},
	} {
		t.Run(c.policy, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			stdout, stderr, code := runCmd(t, "eval", "--tasks", tasks, "--runner", "podman", "--policy", c.policy, "--out", out)
			if code != exitSomeSkipped {
				t.Fatalf("exit %d, want %d (tasks skipped):\n%s\n%s", code, exitSomeSkipped, stdout, stderr)
			}
			r := readResults(t, out)
			skipped := map[string]string{}
			for _, s := range r.Skipped {
				skipped[s.Task] = s.Reason
			}
			if !strings.Contains(skipped["unbuildable"], "build") || !strings.Contains(skipped["bad-toml"], "timeout_sec") || len(skipped) != 2 {
				t.Fatalf("skipped %v", skipped)
			}
			if r.Scored != 3 || len(r.Tasks) != 3 {
				t.Fatalf("results %+v", r)
			}
			for _, tr := range r.Tasks {
				if tr.Pass1 == nil || *tr.Pass1 != c.pass[tr.Task] {
					t.Errorf("task %s: pass@1 %v, want %v (%+v)", tr.Task, tr.Pass1, c.pass[tr.Task], tr.Episodes)
				}
				if tr.Task == "tamper-leftover-writer" && c.policy == "oracle" && !strings.Contains(tr.Episodes[0].RewardNote, "outside its run") {
					t.Errorf("tamper episode's note %q", tr.Episodes[0].RewardNote)
				}
			}
		})
	}
}

// serve runs container tasks too: an engine whose policy never submits (a
// random model) plays in the task's own image until max_turns, the episode
// comes back overlong with its segments (never infra_error), and its
// container is gone once the response is written.
func TestServeContainerTask(t *testing.T) {
	testenv.MustHavePodman(t)
	llama := startEvalLlama(t)
	tasks := filepath.Join(t.TempDir(), "tasks")
	for p, s := range map[string]string{
		"instruction.md": "ab12", "task.toml": "schema_version = \"1.1\"\n[task]\nname = \"compactrl/tiny-image\"\n[agent]\ntimeout_sec = 120\n",
		"environment/Dockerfile": "FROM localhost/compactrl-base:bookworm\nWORKDIR /app\n",
		"tests/test.sh":          "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(tasks, "tiny", p)), 0o755)
		os.WriteFile(filepath.Join(tasks, "tiny", p), []byte(s), 0o755)
	}
	sys := filepath.Join(t.TempDir(), "system.txt")
	os.WriteFile(sys, []byte("1"), 0o644)
	before := podmanContainers(t, "compactrl-task-tiny")
	p := startServe(t, t.TempDir(), "--tasks", tasks, "--runner", "podman", "--template", "120,121,122,123,124,125",
		"--context", "256", "--reserve", "96", "--max-action-tokens", "12", "--max-summary-tokens", "16",
		"--max-format-errors", "1000", "--max-turns", "6", "--system-prompt", sys, "--summary-instruction", "2a",
		"--resume-text", "3b", "--no-format-hint", "--max-episodes", "2", "--queue", "2")
	for rid := range int64(2) {
		code, out, err := postRollout(context.Background(), p.url, map[string]any{
			"task_id":    "tiny",
			"engine":     map[string]any{"url": llama, "kind": "llamacpp"},
			"sampling":   map[string]any{"temperature": 1, "top_p": 1, "max_new_tokens": 12, "seed": 7 + rid},
			"agent":      map[string]any{"context": 256, "reserve": 96, "keep_last": 2, "max_turns": 6, "max_compactions": 100},
			"rollout_id": rid,
		})
		var r serve.Response
		if err != nil || code != 200 || json.Unmarshal(out, &r) != nil {
			t.Fatalf("rollout %d: %d %v %s", rid, code, err, out)
		}
		if r.Status != "overlong" || len(r.Segments) == 0 {
			t.Fatalf("rollout %d: status %s (%q), %d segments", rid, r.Status, r.Error, len(r.Segments))
		}
	}
	if after := podmanContainers(t, "compactrl-task-tiny"); after > before {
		t.Errorf("%d containers before the episodes, %d after", before, after)
	}
}

// podmanContainers counts the engine's containers whose image name holds
// image (other packages' tests run containers at the same time).
func podmanContainers(t *testing.T, image string) int {
	out, err := exec.Command("podman", "ps", "-a", "--format", "{{.Image}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, img := range strings.Fields(string(out)) {
		if strings.Contains(img, image) {
			n++
		}
	}
	return n
}

// When no task can run, eval still writes results.json with every skipped
// task and its reason, and exits 4 (nothing scored).
func TestEvalNothingRunnableWritesResults(t *testing.T) {
	tasks := filepath.Join(t.TempDir(), "tasks")
	for p, s := range map[string]string{"instruction.md": "x", "task.toml": "[verifier]\ntimeout_sec = \"soon\"\n", "tests/test.sh": "true\n"} {
		os.MkdirAll(filepath.Dir(filepath.Join(tasks, "bad", p)), 0o755)
		os.WriteFile(filepath.Join(tasks, "bad", p), []byte(s), 0o644)
	}
	out := filepath.Join(t.TempDir(), "run")
	_, stderr, code := runCmd(t, "eval", "--tasks", tasks, "--policy", "oracle", "--out", out)
	if code != exitNothingScored || !strings.Contains(stderr, "no task can run here") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r := readResults(t, out)
	if len(r.Skipped) != 1 || r.Skipped[0].Task != "bad" || !strings.Contains(r.Skipped[0].Reason, "timeout_sec") {
		t.Fatalf("skipped %+v", r.Skipped)
	}
}

// eval killed with -9 mid-episode leaves its container running; the next
// eval with the same --work-root removes it (containers carry their run
// directory as a label) together with the run directory and its guarded
// mounts.
func TestEvalKill9LeavesNoContainer(t *testing.T) {
	testenv.MustHavePodman(t)
	tasks := filepath.Join(t.TempDir(), "tasks")
	for p, s := range map[string]string{
		"instruction.md": "x", "task.toml": "schema_version = \"1.1\"\n[agent]\ntimeout_sec = 600\n",
		"environment/Dockerfile": "FROM localhost/compactrl-base:bookworm\nWORKDIR /app\n",
		"tests/test.sh":          "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n",
		"solution/solve.sh":      "#!/bin/bash\ntouch /app/started\nsleep 300\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(tasks, "hang-box", p)), 0o755)
		os.WriteFile(filepath.Join(tasks, "hang-box", p), []byte(s), 0o755)
	}
	root := filepath.Join(t.TempDir(), "work")
	// Whatever happens, nothing of the killed run may outlive the test
	// (registered first, so it runs after the container's removal).
	t.Cleanup(func() { sandbox.ReapRunDirs(root) })
	args := []string{"eval", "--tasks", tasks, "--runner", "podman", "--policy", "oracle", "--out", filepath.Join(t.TempDir(), "run1"), "--work-root", root}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEvalHelperProcess$")
	cmd.Env = append(os.Environ(), "COMPACTRL_EVAL_HELPER="+strings.Join(args, "\x1f"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id := ""
	for deadline := time.Now().Add(90 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, _ := exec.Command("podman", "ps", "--filter", "label="+sandbox.RunLabel, "--format", "{{.ID}} {{index .Labels \""+sandbox.RunLabel+"\"}}").Output()
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && strings.HasPrefix(f[1], root+"/") && exec.Command("podman", "exec", f[0], "test", "-e", "/app/started").Run() == nil {
				id = f[0]
			}
		}
	}
	if id == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the episode's container never started its solution")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	t.Cleanup(func() { exec.Command("podman", "rm", "-f", "-t", "0", id).Run() })
	if exec.Command("podman", "container", "exists", id).Run() != nil {
		t.Fatal("the killed run's container is already gone")
	}
	next := filepath.Join(t.TempDir(), "next")
	if err := harbor.CopyDir(filepath.Join("..", "..", "env", "harbor", "testdata", "container", "service-and-files"), next); err != nil {
		t.Fatal(err)
	}
	_, stderr, _ := runCmd(t, "eval", "--tasks", next, "--runner", "podman", "--policy", "empty", "--out", filepath.Join(t.TempDir(), "run2"), "--work-root", root)
	if exec.Command("podman", "container", "exists", id).Run() == nil {
		t.Fatalf("container %s survived the next eval:\n%s", id, stderr)
	}
	if !strings.Contains(stderr, "removed container") {
		t.Errorf("the next eval did not say what it removed:\n%s", stderr)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), root) {
		t.Errorf("a guarded directory is still mounted under %s", root)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/env/harbor"
	"github.com/compactrl/compactrl/eval"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/stats"
)

func evalNeedBwrap(t *testing.T) {
	t.Helper()
	testenv.MustHaveBwrap(t)
}

func readResults(t *testing.T, dir string) eval.Results {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r eval.Results
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	return r
}

// copyShipped copies shipped tasks into a fresh directory of tasks.
func copyShipped(t *testing.T, names ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tasks")
	os.Mkdir(dir, 0o755)
	for _, n := range names {
		if err := harbor.CopyDir(filepath.Join("..", "..", "tasks", n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestEvalScriptedHarbor(t *testing.T) {
	evalNeedBwrap(t)
	tasks := copyShipped(t, "count-lines", "sales-report")
	// A task that needs its image is skipped under bubblewrap, and said so.
	img := filepath.Join(tasks, "needs-image")
	for p, s := range map[string]string{"instruction.md": "x", "task.toml": "", "tests/test.sh": "", "environment/Dockerfile": "FROM x"} {
		os.MkdirAll(filepath.Dir(filepath.Join(img, p)), 0o755)
		os.WriteFile(filepath.Join(img, p), []byte(s), 0o644)
	}
	// A task whose task.toml does not load is skipped too, not the end of the run.
	bad := filepath.Join(tasks, "bad-toml")
	for p, s := range map[string]string{"instruction.md": "x", "task.toml": "[environment]\nmemory_mb = 2.5\n", "tests/test.sh": ""} {
		os.MkdirAll(filepath.Dir(filepath.Join(bad, p)), 0o755)
		os.WriteFile(filepath.Join(bad, p), []byte(s), 0o644)
	}
	for _, c := range []struct {
		policy string
		pass   float64
	}{{"oracle", 1}, {"empty", 0}} {
		t.Run(c.policy, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			stdout, stderr, code := runCmd(t, "eval", "--tasks", tasks, "--policy", c.policy, "--attempts", "2", "--out", out)
			if code != exitSomeSkipped || !strings.Contains(stderr, "skipping bad-toml") || !strings.Contains(stderr, "memory_mb") {
				t.Fatalf("%s: exit %d (want %d, tasks skipped): %s", c.policy, code, exitSomeSkipped, stderr)
			}
			r := readResults(t, out)
			if r.Episodes != 4 || r.Scored != 4 || r.Pass1 == nil || *r.Pass1 != c.pass || len(r.Tasks) != 2 || len(r.Pass1CI) != 2 {
				t.Fatalf("%s: results %+v", c.policy, r)
			}
			if r.Pass1CI[0] > c.pass || r.Pass1CI[1] < c.pass || r.Pass1CI[1]-r.Pass1CI[0] < 0.3 {
				t.Fatalf("%s: Wilson interval %v for 4 episodes at %v", c.policy, r.Pass1CI, c.pass)
			}
			// Two attempts of each of two tasks, all alike: the interval
			// counts each task once (Wilson over 2, not 4).
			lo, hi := stats.Wilson(int(c.pass)*2, 2)
			if !strings.Contains(r.Pass1CIMethod, "effective") || math.Abs(r.Pass1CI[0]-lo) > 1e-9 || math.Abs(r.Pass1CI[1]-hi) > 1e-9 {
				t.Fatalf("%s: interval %v (%s), want Wilson over the 2 tasks [%v, %v]", c.policy, r.Pass1CI, r.Pass1CIMethod, lo, hi)
			}
			if len(r.Skipped) != 2 || r.Skipped[0].Task != "bad-toml" || r.Skipped[1].Task != "needs-image" || !strings.Contains(stdout, "skipped needs-image") {
				t.Fatalf("%s: skipped %+v, stdout %s", c.policy, r.Skipped, stdout)
			}
			for _, tr := range r.Tasks {
				if tr.Attempts != 2 || tr.Pass1 == nil || *tr.Pass1 != c.pass {
					t.Fatalf("%s: task %+v", c.policy, tr)
				}
			}
			if !strings.Contains(stdout, "count-lines") || !strings.Contains(stdout, fmt.Sprintf("pass@1 %.3f", c.pass)) {
				t.Fatalf("%s: table:\n%s", c.policy, stdout)
			}
			eps := readFileEpisodes(t, filepath.Join(out, "episodes.jsonl"))
			if len(eps) != 4 || eps[0].Meta["policy"] != c.policy {
				t.Fatalf("%s: %d episodes %+v", c.policy, len(eps), eps)
			}
		})
	}
}

func TestEvalScriptedSWEBench(t *testing.T) {
	evalNeedBwrap(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repos", "acme__mini")
	os.MkdirAll(repo, 0o755)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return string(out)
	}
	put := func(p, s string) { os.WriteFile(filepath.Join(repo, p), []byte(s), 0o644) }
	git("init", "-q")
	put("mini.py", "def double(x):\n    return x + x + 1\n")
	put("test_mini.py", "import unittest\n")
	git("add", "-A")
	git("commit", "-q", "-m", "base")
	base := strings.TrimSpace(git("rev-parse", "HEAD"))
	put("mini.py", "def double(x):\n    return x + x\n")
	gold := git("diff")
	git("checkout", "-q", "--", ".")
	put("test_mini.py", "import unittest\n\nfrom mini import double\n\n\nclass T(unittest.TestCase):\n    def test_double(self):\n        self.assertEqual(double(4), 8)\n")
	testPatch := git("diff")
	git("checkout", "-q", "--", ".")
	line, _ := json.Marshal(map[string]any{
		"instance_id": "acme__mini-1", "repo": "acme/mini", "base_commit": base,
		"problem_statement": "double(4) is 9", "patch": gold, "test_patch": testPatch,
		"FAIL_TO_PASS": `["test_mini.py::T::test_double"]`, "PASS_TO_PASS": `[]`,
	})
	jsonl := filepath.Join(dir, "instances.jsonl")
	os.WriteFile(jsonl, append(line, '\n'), 0o644)
	for policy, want := range map[string]float64{"oracle": 1, "empty": 0} {
		t.Run(policy, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			_, stderr, code := runCmd(t, "eval", "--tasks", jsonl, "--repos", filepath.Join(dir, "repos"), "--policy", policy, "--out", out)
			if code != 0 {
				t.Fatalf("%s: exit %d: %s", policy, code, stderr)
			}
			r := readResults(t, out)
			if r.Scored != 1 || r.Pass1 == nil || *r.Pass1 != want || r.Tasks[0].Task != "acme__mini-1" {
				t.Fatalf("%s: results %+v", policy, r)
			}
		})
	}
}

func TestEvalFlagErrors(t *testing.T) {
	tasks := copyShipped(t, "count-lines")
	out := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no-tasks", []string{"--policy", "oracle", "--out", out}, "--tasks"},
		{"no-out", []string{"--tasks", tasks, "--policy", "oracle"}, "--out"},
		{"unknown-policy", []string{"--tasks", tasks, "--policy", "magic", "--out", out}, "--policy"},
		{"no-policy-or-engine", []string{"--tasks", tasks, "--out", out}, "--engine"},
		{"engine-without-template", []string{"--tasks", tasks, "--out", out, "--engine", "http://127.0.0.1:9"}, "--template"},
		{"short-template", []string{"--tasks", tasks, "--out", out, "--engine", "http://127.0.0.1:9", "--template", "1,2,3"}, "6 ids"},
		{"engine-not-http", []string{"--tasks", tasks, "--out", out, "--engine", "ftp://x", "--template", "1,2,3,4,5,6"}, "http"},
		{"tasks-dir-missing", []string{"--tasks", filepath.Join(out, "nope"), "--policy", "oracle", "--out", out}, "--tasks"},
		{"zero-attempts", []string{"--tasks", tasks, "--policy", "oracle", "--out", out, "--attempts", "0"}, "--attempts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := runCmd(t, append([]string{"eval"}, c.args...)...)
			if code == 0 || !strings.Contains(stderr, c.want) {
				t.Errorf("eval %v: exit %d, stderr %q (want mention of %s)", c.args, code, stderr, c.want)
			}
		})
	}
}

// startEvalLlama starts llama-server on a random-weight llama model
// (vocab 128, 2 slots of 256 tokens) from COMPACTRL_LLAMA_DIR.
func startEvalLlama(t *testing.T) string {
	t.Helper()
	dir := testenv.MustHaveLlama(t)
	archs := filepath.Join(dir, "root/usr/libexec/x86_64-linux-gnu/llama.cpp-tests/test-llama-archs")
	if _, err := os.Stat(archs); err != nil {
		testenv.Unavailable(t, "llama.cpp installation: %v", err)
	}
	tmp := t.TempDir()
	if out, err := exec.Command(filepath.Join(dir, "run"), archs, "-a", "^llama$", "-s", "7", "-o", tmp).CombinedOutput(); err != nil {
		t.Fatalf("make model: %v %s", err, out)
	}
	return startLlamaOn(t, filepath.Join(tmp, "llama-dense.gguf"), 2, 512)
}

// startLlamaOn starts llama-server (COMPACTRL_LLAMA_DIR) on a GGUF model
// with slots parallel slots sharing ctx tokens, and returns its URL.
func startLlamaOn(t *testing.T, model string, slots, ctx int) string {
	t.Helper()
	return testenv.LlamaServer(t, model, "-np", fmt.Sprint(slots), "-c", fmt.Sprint(ctx))
}

// tinyTask writes a directory holding one Harbor task, "tiny" (its
// verifier always scores 0), and a system-prompt file holding "1"; it
// returns both paths.
func tinyTask(t *testing.T, timeoutSec int) (tasks, sys string) {
	t.Helper()
	tasks = filepath.Join(t.TempDir(), "tasks")
	task := filepath.Join(tasks, "tiny")
	for p, s := range map[string]string{
		"instruction.md": "ab12", "task.toml": fmt.Sprintf("[agent]\ntimeout_sec = %d\n", timeoutSec),
		"tests/test.sh": "echo 0 > /logs/verifier/reward.txt",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(task, p)), 0o755)
		os.WriteFile(filepath.Join(task, p), []byte(s), 0o644)
	}
	sys = filepath.Join(t.TempDir(), "system.txt")
	os.WriteFile(sys, []byte("1"), 0o644)
	return tasks, sys
}

// The engine path end to end against a real llama-server: episodes carry
// the sampled token ids with loss mask 1 and the server's log-probs, and
// results.json scores them. The random model writes no valid actions: the
// invalid-action observations fill the 256-token window, the loop compacts,
// and the episodes end overlong at max_turns (scored, reward 0).
func TestEvalEngineLlamaServer(t *testing.T) {
	evalNeedBwrap(t)
	url := startEvalLlama(t)
	tasks, sys := tinyTask(t, 60)
	out := filepath.Join(t.TempDir(), "run")
	stdout, stderr, code := runCmd(t, "eval", "--tasks", tasks, "--engine", url, "--engine-kind", "llamacpp",
		"--template", "120,121,122,123,124,125", "--context", "256", "--reserve", "96",
		"--max-action-tokens", "12", "--max-summary-tokens", "16", "--max-format-errors", "50", "--max-turns", "12",
		"--system-prompt", sys, "--summary-instruction", "2a", "--resume-text", "3b", "--no-format-hint",
		"--temperature", "1", "--attempts", "2", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r := readResults(t, out)
	if r.Episodes != 2 || r.InfraError != 0 || r.Scored != 2 || r.Meta["engine"] != url || r.MeanCompactions < 1 || r.Compacted != 2 {
		t.Fatalf("results %+v\n%s", r, stdout)
	}
	eps := readFileEpisodes(t, filepath.Join(out, "episodes.jsonl"))
	if len(eps) != 2 {
		t.Fatalf("%d episodes", len(eps))
	}
	for _, ep := range eps {
		sampled := 0
		for _, s := range ep.Segments {
			if len(s.PromptIDs) == 0 || len(s.ResponseIDs) != len(s.LossMask) || len(s.Logprobs) != len(s.ResponseIDs) {
				t.Fatalf("episode %s: malformed segment", ep.ID)
			}
			for i, m := range s.LossMask {
				if m == 1 {
					sampled++
					if s.Logprobs[i] > 0 || s.ResponseIDs[i] < 0 || s.ResponseIDs[i] >= 128 {
						t.Fatalf("episode %s: token %d logprob %v", ep.ID, s.ResponseIDs[i], s.Logprobs[i])
					}
				}
			}
		}
		if len(ep.Segments) < 2 || ep.Segments[0].Kind != "summary" {
			t.Fatalf("episode %s did not compact: %d segments", ep.ID, len(ep.Segments))
		}
		if sampled == 0 || ep.Metrics["sampled_tokens"] != float64(sampled) {
			t.Fatalf("episode %s: %d sampled tokens, metrics %v", ep.ID, sampled, ep.Metrics)
		}
	}
}

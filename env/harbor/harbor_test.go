package harbor

import (
	"context"
	"errors"
	"fmt"
	"github.com/compactrl/compactrl/env/tasks"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/env/shelltask/shelltasktest"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/sandbox"
)

func TestReadRewards(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		os.RemoveAll(filepath.Join(dir, "reward.txt"))
		os.RemoveAll(filepath.Join(dir, "reward.json"))
		if name != "" {
			os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644)
		}
	}
	write("", "")
	if _, err := ReadRewards(dir); !errors.Is(err, ErrNoReward) {
		t.Fatalf("missing reward: %v", err)
	}
	for _, c := range []struct {
		file, body string
		want       float64
		ok         bool // the file parses
		primary    bool // and has a primary reward
	}{
		{"reward.txt", "0.75\n", 0.75, true, true},
		{"reward.txt", " 1 ", 1, true, true},
		{"reward.txt", "1_0", 10, true, true},
		{"reward.txt", "", 0, false, false},
		{"reward.txt", "yes", 0, false, false},
		{"reward.txt", "NaN", 0, false, false},
		{"reward.txt", "1e309", 0, false, false},
		{"reward.json", `{"reward": 0.5, "tests_passed": 3}`, 0.5, true, true},
		{"reward.json", `{"accuracy": 0.25}`, 0.25, true, true},
		{"reward.json", `{"reward": true}`, 1, true, true},
		{"reward.json", `{"a": 1, "b": 0}`, 0, true, false},
		{"reward.json", `{}`, 0, true, false},
		{"reward.json", `{"reward": null}`, 0, false, false},
		{"reward.json", `[1]`, 0, false, false},
		{"reward.json", `0.5`, 0, false, false},
		{"reward.json", ``, 0, false, false},
	} {
		t.Run(c.file+":"+c.body, func(t *testing.T) {
			write(c.file, c.body)
			rs, err := ReadRewards(dir)
			got, ok := Primary(rs)
			if (err == nil) != c.ok || ok != c.primary || got != c.want {
				t.Errorf("%s %q: rewards %v err %v primary %v %v; want %v ok=%v primary=%v", c.file, c.body, rs, err, got, ok, c.want, c.ok, c.primary)
			}
			if err != nil && !errors.Is(err, ErrNoReward) && !strings.Contains(err.Error(), c.file) {
				t.Errorf("error %q does not name %s", err, c.file)
			}
		})
	}
	// A symlink is never followed (the host would read what the sandbox points at).
	write("", "")
	target := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(target, []byte("1"), 0o644)
	os.Symlink(target, filepath.Join(dir, "reward.txt"))
	if _, err := ReadRewards(dir); err == nil {
		t.Fatal("reward.txt symlink followed")
	}
	os.Remove(filepath.Join(dir, "reward.txt"))
	// Both files: compactrl's own rule (Harbor would take reward.json).
	os.WriteFile(filepath.Join(dir, "reward.txt"), []byte("1"), 0o644)
	os.WriteFile(filepath.Join(dir, "reward.json"), []byte(`{"reward": 0}`), 0o644)
	if _, err := ReadRewards(dir); !errors.Is(err, ErrTwoRewardFiles) {
		t.Fatalf("both files: %v", err)
	}
}

// writeTask makes a task directory from a map of relative path → content.
func writeTask(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "task")
	for p, s := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadConfig(t *testing.T) {
	dir := writeTask(t, map[string]string{
		"instruction.md": "Do it.\n",
		"task.toml": `version = "1.0"
[metadata]
difficulty = "hard"
tags = ["a"]
[agent]
timeout_sec = 12.5
[verifier]
timeout_sec = 30
env = { TOKEN = "x" }
[environment]
docker_image = "ghcr.io/x/y:1"
cpus = 2
memory = "2G"
storage_mb = 10240
allow_internet = false
custom_thing = 1
`,
		"tests/test.sh":          "exit 0",
		"environment/Dockerfile": "FROM debian:12",
	})
	task, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if task.Instruction != "Do it." || task.AgentTimeout() != 12500*time.Millisecond || task.VerifierTimeout() != 30*time.Second {
		t.Fatalf("parsed %+v", task)
	}
	c := task.Config
	mem := c.Environment.MemoryBytes()
	if c.Environment.DockerImage != "ghcr.io/x/y:1" || c.Environment.CPUs != 2 || mem != 2<<30 || c.Environment.StorageMB != 10240 || c.Verifier.Env["TOKEN"] != "x" || c.Metadata["difficulty"] != "hard" {
		t.Fatalf("environment %+v verifier %+v", c.Environment, c.Verifier)
	}
	if c.Environment.AllowInternet || c.Environment.Network != NetworkNone || c.SchemaVersion != "1.0" {
		t.Fatalf("allow_internet = false read as %v %q; schema %q", c.Environment.AllowInternet, c.Environment.Network, c.SchemaVersion)
	}
	if w := strings.Join(task.Warnings, "\n"); !strings.Contains(w, "environment.custom_thing") || !strings.Contains(w, "task.toml") {
		t.Fatalf("warnings %v", task.Warnings)
	}
	if need, why := task.NeedsContainer(); !need || !strings.Contains(why, "Dockerfile") {
		t.Fatalf("NeedsContainer = %v %q", need, why)
	}
	_, err = New(task, Options{}).Reset(context.Background())
	if !errors.Is(err, ErrNeedsContainer) {
		t.Fatalf("Reset of a container task: %v", err)
	}
	// With environment/app/ the bubblewrap convention of docs/design.md §5.4 applies.
	os.MkdirAll(filepath.Join(dir, "environment", "app"), 0o755)
	if need, _ := task.NeedsContainer(); need {
		t.Fatal("environment/app/ present but still needs a container")
	}

	for name, files := range map[string]map[string]string{
		"no instruction": {"task.toml": "", "tests/test.sh": ""},
		"no task.toml":   {"instruction.md": "x", "tests/test.sh": ""},
		"no test.sh":     {"instruction.md": "x", "task.toml": ""},
		"bad toml":       {"instruction.md": "x", "task.toml": "[agent\n", "tests/test.sh": ""},
		"bad memory":     {"instruction.md": "x", "task.toml": "[environment]\nmemory = \"lots\"\n", "tests/test.sh": ""},
		"bad cpus":       {"instruction.md": "x", "task.toml": "[environment]\ncpus = \"two\"\n", "tests/test.sh": ""},
		"negative cpus":  {"instruction.md": "x", "task.toml": "[environment]\ncpus = -2\n", "tests/test.sh": ""},
		"nan memory_mb":  {"instruction.md": "x", "task.toml": "[environment]\nmemory_mb = nan\n", "tests/test.sh": ""},
		"bad storage":    {"instruction.md": "x", "task.toml": "[environment]\nstorage = \"big\"\n", "tests/test.sh": ""},
		"huge timeout":   {"instruction.md": "x", "task.toml": "[verifier]\ntimeout_sec = 1e12\n", "tests/test.sh": ""},
		"huge memory":    {"instruction.md": "x", "task.toml": "[environment]\nmemory_mb = 17592186044417\n", "tests/test.sh": ""},
		"huge cpus":      {"instruction.md": "x", "task.toml": "[environment]\ncpus = 1e9\n", "tests/test.sh": ""},
		"bad task name":  {"instruction.md": "x", "task.toml": "[task]\nname = \"noslash\"\n", "tests/test.sh": ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeTask(t, files))
			if err == nil {
				t.Errorf("%s: loaded", name)
			} else if name != "no instruction" && name != "no task.toml" && name != "no test.sh" && !strings.Contains(err.Error(), "task.toml") {
				t.Errorf("%s: error %q does not name task.toml", name, err)
			}
		})
	}
}

func shippedTasks(t *testing.T) []*Task {
	t.Helper()
	tasks, failed, err := LoadAll(filepath.Join("..", "..", "tasks"))
	if err != nil || len(failed) > 0 {
		t.Fatal(err, failed)
	}
	if len(tasks) < 4 {
		t.Fatalf("only %d shipped tasks", len(tasks))
	}
	return tasks
}

func TestShippedTasksOracleAndEmpty(t *testing.T) {
	testenv.MustHaveBwrap(t)
	cache, err := sandbox.MkdirTemp(t.TempDir(), "cache")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(cache), 0o711)
	os.Chmod(filepath.Dir(filepath.Dir(cache)), 0o711)
	for _, task := range shippedTasks(t) {
		t.Run(task.Name, func(t *testing.T) {
			if testing.Short() && strings.Contains(task.Name, "-go-") {
				t.Skip("cold Go build of the task's program: skipped in -short")
			}
			if need, why := task.NeedsContainer(); need {
				t.Fatalf("shipped task needs a container: %s", why)
			}
			if _, err := os.Stat(filepath.Join(task.Dir, "solution", "solve.sh")); err != nil {
				t.Fatal(err)
			}
			oracle := New(task, Options{Sandboxing: tasks.Sandboxing{CacheDir: cache}, ExposeSolution: true})
			if _, r := shelltasktest.Play(t, oracle, OracleReply); r != 1 {
				t.Fatalf("oracle reward %v; verifier said:\n%s", r, oracle.VerifierOutput())
			}
			empty := New(task, Options{Sandboxing: tasks.Sandboxing{CacheDir: cache}})
			if _, r := shelltasktest.Play(t, empty, shelltask.SubmitReply); r != 0 {
				t.Fatalf("empty policy reward %v; verifier said:\n%s", r, empty.VerifierOutput())
			}
		})
	}
}

func TestEpisodeMechanics(t *testing.T) {
	testenv.MustHaveBwrap(t)
	dir := writeTask(t, map[string]string{
		"instruction.md":               "Write 42 to /app/answer.",
		"task.toml":                    "[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 10\n",
		"environment/app/hello.txt":    "hello\n",
		"tests/test.sh":                "if [ \"$(cat /app/answer 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
		"tests/secret_expected_answer": "42",
		"solution/solve.sh":            "echo 42 > /app/answer",
	})
	task, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := New(task, Options{})
	prompt, err := e.Reset(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !strings.HasPrefix(prompt, "Write 42") || !strings.Contains(prompt, "<submit/>") {
		t.Fatalf("task prompt %q", prompt)
	}
	step := func(reply string) string {
		t.Helper()
		st, err := e.Step(ctx, reply)
		if err != nil || st.Done {
			t.Fatalf("step %q: %+v %v", reply, st, err)
		}
		return st.Observation
	}
	if obs := step("```bash\ncat hello.txt; ls /tests /solution 2>&1 | head -2; cd /tmp\n```"); !strings.HasPrefix(obs, "hello\n") || !strings.Contains(obs, "No such file") || !strings.HasSuffix(obs, "[exit code 0]") {
		t.Fatalf("observation %q", obs)
	}
	if obs := step("```bash\npwd\n```"); obs != "/tmp\n[exit code 0]" {
		t.Fatalf("cwd did not persist: %q", obs)
	}
	st, err := e.Step(ctx, "what now?")
	if err != nil || !st.Invalid || !strings.Contains(st.Observation, "```bash") {
		t.Fatalf("invalid reply: %+v %v", st, err)
	}
	// The agent cannot pre-write the verifier's reward: /logs is not there.
	if obs := step("```bash\nmkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt\n```"); strings.HasSuffix(obs, "[exit code 0]") {
		t.Fatalf("agent wrote into /logs: %q", obs)
	}
	st, err = e.Step(ctx, "```bash\necho 42 > /app/answer\n```\n<submit/>")
	if err != nil || !st.Done || st.Reward != 1 {
		t.Fatalf("submit: %+v %v", st, err)
	}
	m := e.Metrics()
	if m["commands"] != 4 || m["invalid_actions"] != 1 || m["agent_seconds"] <= 0 {
		t.Fatalf("metrics %v", m)
	}
	if _, err := e.Step(ctx, "<submit/>"); err == nil {
		t.Fatal("Step after Done accepted")
	}
}

func TestNetworkOptIn(t *testing.T) {
	testenv.MustHaveBwrap(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	probe := fmt.Sprintf("```bash\necho hi > /dev/tcp/127.0.0.1/%d && echo CONNECTED\n```", ln.Addr().(*net.TCPAddr).Port)
	for _, c := range []struct {
		name    string
		toml    string
		network bool
		want    bool
	}{
		{"default-no-network", "", false, false},
		{"opted-in-task-allows", "", true, true}, // Harbor's default
		{"opted-in-task-forbids", "[environment]\nallow_internet = false\n", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			task, err := Load(writeTask(t, map[string]string{"instruction.md": "x", "task.toml": c.toml, "tests/test.sh": "echo 0 > /logs/verifier/reward.txt"}))
			if err != nil {
				t.Fatal(err)
			}
			e := New(task, Options{Sandboxing: tasks.Sandboxing{Network: c.network}})
			if _, err := e.Reset(context.Background()); err != nil {
				t.Fatal(err)
			}
			st, err := e.Step(context.Background(), probe)
			e.Close()
			if err != nil || strings.Contains(st.Observation, "CONNECTED") != c.want {
				t.Errorf("toml %q network %v: observation %q (%v), want connected=%v", c.toml, c.network, st.Observation, err, c.want)
			}
		})
	}
}

func TestMissingRewardIsError(t *testing.T) {
	testenv.MustHaveBwrap(t)
	task, err := Load(writeTask(t, map[string]string{
		"instruction.md": "x", "task.toml": "", "tests/test.sh": "echo forgot the reward",
	}))
	if err != nil {
		t.Fatal(err)
	}
	e := New(task, Options{})
	if _, err := e.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = e.Step(context.Background(), shelltask.SubmitReply)
	if !errors.Is(err, ErrNoReward) || !strings.Contains(err.Error(), "forgot the reward") {
		t.Fatalf("missing reward file: %v", err)
	}
}

func TestTimeouts(t *testing.T) {
	testenv.MustHaveBwrap(t)
	task, err := Load(writeTask(t, map[string]string{
		"instruction.md": "x",
		"task.toml":      "[agent]\ntimeout_sec = 1.5\n[verifier]\ntimeout_sec = 1\n",
		"tests/test.sh":  "if [ -f /app/hang ]; then sleep 60; fi; echo 0.5 > /logs/verifier/reward.txt",
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The agent's deadline ends the episode and still verifies.
	e := New(task, Options{})
	if _, err := e.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	st, err := e.Step(ctx, "```bash\nsleep 30\n```")
	if err != nil || !st.Done || st.Reward != 0.5 || !strings.Contains(st.Observation, "time limit") {
		t.Fatalf("agent timeout: %+v %v", st, err)
	}
	if el := time.Since(begin); el > 10*time.Second {
		t.Fatalf("agent timeout took %v", el)
	}
	// A verifier the agent made hang scores 0 (not an error that would
	// mask the episode).
	e = New(task, Options{})
	if _, err := e.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = e.Step(ctx, "```bash\ntouch /app/hang\n```\n<submit/>")
	if err != nil || !st.Done || st.Reward != 0 || e.Metrics()["verifier_timeout"] != 1 || !strings.Contains(e.RewardNote(), "timed out") {
		t.Fatalf("verifier timeout after agent commands: %+v %v %v", st, err, e.Metrics())
	}
}

// The task shown is instruction.md, then the format hint: the embedded one,
// Options.FormatHint, or none.
func TestTaskPrompt(t *testing.T) {
	task, err := Load(writeTask(t, map[string]string{"instruction.md": "Do it.", "task.toml": "", "tests/test.sh": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"embedded hint", Options{}, "Do it.\n\n" + shelltask.FormatHint()},
		{"override", Options{FormatHint: "Reply in bash."}, "Do it.\n\nReply in bash."},
		{"no hint", Options{Sandboxing: tasks.Sandboxing{NoFormatHint: true}, FormatHint: "unused"}, "Do it."},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Runner = leakyRunner{} // no process runs: Reset only starts the session
			e := New(task, c.opts)
			got, err := e.Reset(context.Background())
			e.Close()
			if err != nil || got != c.want {
				t.Errorf("Reset = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// As in Harbor, the verifier's /tests is a writable copy (real test.sh
// files move their fixtures around) and test.sh runs by its #! line.
func TestVerifierTestsWritableAndShebang(t *testing.T) {
	st, _, err := playOnce(t, Options{}, map[string]string{"instruction.md": "x", "task.toml": "",
		"tests/expected.txt": "ok\n",
		"tests/test.sh":      "#!/usr/bin/python3\nimport os\nos.rename('/tests/expected.txt', '/tests/moved.txt')\nopen('/logs/verifier/reward.txt', 'w').write('1' if open('/tests/moved.txt').read() == 'ok\\n' else '0')\n"},
		"<submit/>")
	if err != nil || st.Reward != 1 {
		t.Fatalf("%+v %v", st, err)
	}
}

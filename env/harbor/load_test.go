package harbor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/agent"
)

func TestLoadAllReportsFailuresAndFollowsSymlinks(t *testing.T) {
	root := t.TempDir()
	mk := func(dir string, files map[string]string) {
		for p, s := range files {
			full := filepath.Join(dir, p)
			os.MkdirAll(filepath.Dir(full), 0o755)
			if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	tasks := filepath.Join(root, "tasks")
	good := map[string]string{"instruction.md": "<!-- canary GUID 123 -->\n\nDo it.\n", "task.toml": "[agent]\ntimeout_sec = 5\n", "tests/test.sh": "exit 0"}
	mk(filepath.Join(tasks, "a-good"), good)
	mk(filepath.Join(tasks, "b-bad"), map[string]string{"instruction.md": "x", "task.toml": "[environment]\nmemory_mb = 2.5\n", "tests/test.sh": ""})
	mk(filepath.Join(tasks, "c-no-instruction"), map[string]string{"task.toml": "", "tests/test.sh": ""})
	mk(filepath.Join(tasks, "d-multi"), map[string]string{"task.toml": "[[steps]]\nname = \"one\"\n", "steps/one/instruction.md": "x"})
	mk(filepath.Join(root, "elsewhere"), good)
	if err := os.Symlink(filepath.Join(root, "elsewhere"), filepath.Join(tasks, "e-link")); err != nil {
		t.Fatal(err)
	}
	mk(filepath.Join(tasks, "not-a-task"), map[string]string{"README": "x"})

	loaded, failed, err := LoadAll(tasks)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tk := range loaded {
		names = append(names, tk.Name)
	}
	if strings.Join(names, ",") != "a-good,d-multi,e-link" {
		t.Fatalf("loaded %v", names)
	}
	if len(failed) != 2 || failed[0].Task != "b-bad" || !strings.Contains(failed[0].Reason, "environment.memory_mb") ||
		!strings.Contains(failed[0].Reason, filepath.Join("b-bad", "task.toml")) || failed[1].Task != "c-no-instruction" {
		t.Fatalf("failed %+v", failed)
	}
	if loaded[0].Instruction != "Do it." {
		t.Fatalf("canary not stripped: %q", loaded[0].Instruction)
	}
	if why := loaded[1].Unsupported(); !strings.Contains(why, "multi-step") || loaded[1].Instruction != "" {
		t.Fatalf("multi-step task: Unsupported %q, instruction %q", why, loaded[1].Instruction)
	}
	if loaded[0].Unsupported() != "" || loaded[0].AgentTimeout().Seconds() != 5 || loaded[0].VerifierTimeout() != DefaultVerifierTimeout {
		t.Fatalf("single-step task: %q %v %v", loaded[0].Unsupported(), loaded[0].AgentTimeout(), loaded[0].VerifierTimeout())
	}

	// One task directory that fails: a failure, not an error.
	one, failed, err := LoadAll(filepath.Join(tasks, "b-bad"))
	if err != nil || len(one) != 0 || len(failed) != 1 || failed[0].Task != "b-bad" {
		t.Fatalf("single bad task: %v %v %v", one, failed, err)
	}
	if _, _, err := LoadAll(filepath.Join(tasks, "not-a-task")); err == nil {
		t.Fatal("a directory without tasks loaded")
	}
}

func TestResolveEnv(t *testing.T) {
	host := map[string]string{"SET": "host"}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	got, err := ResolveEnv(map[string]string{"a": "${SET}", "b": "${UNSET:-dflt}", "c": "lit ${SET}", "d": "${SET:-x}", "e": "${UNSET:-}"}, lookup)
	if err != nil || got["a"] != "host" || got["b"] != "dflt" || got["c"] != "lit ${SET}" || got["d"] != "host" || got["e"] != "" {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := ResolveEnv(map[string]string{"a": "${UNSET}"}, lookup); err == nil || !strings.Contains(err.Error(), "UNSET") {
		t.Fatalf("unset variable: %v", err)
	}
}

func TestParseConfigWarnsOnUnknownKeys(t *testing.T) {
	_, warnings, err := ParseConfig("x/task.toml", []byte("custom = 1\n[verifer]\nx = 1\n[environment]\nmemory = \"1G\"\nfoo = 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(warnings, "\n")
	for _, want := range []string{"unknown key custom", "unknown key verifer", "unknown key environment.foo", "environment.memory is deprecated"} {
		if !strings.Contains(w, want) || !strings.Contains(w, "x/task.toml") {
			t.Errorf("warnings %q lack %q", w, want)
		}
	}
}

func TestRangeLimitsNameFileFieldValue(t *testing.T) {
	for _, c := range []struct{ toml, field, value string }{
		{"[verifier]\ntimeout_sec = 1e12\n", "verifier.timeout_sec", "1e+12"},
		{"[environment]\nmemory_mb = 17592186044417\n", "environment.memory_mb", "1.7592186044417e+13"},
		{"[environment]\ncpus = 1e9\n", "environment.cpus", "1e+09"},
		{"[[steps]]\nname = \"s\"\n[steps.agent]\ntimeout_sec = 1e300\n", "steps[0].agent.timeout_sec", "1e+300"},
	} {
		_, _, err := ParseConfig("t/task.toml", []byte(c.toml))
		if err == nil || !strings.Contains(err.Error(), "t/task.toml") || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.value) {
			t.Errorf("%q: %v (want file, %s, %s)", c.toml, err, c.field, c.value)
		}
	}
}

// An instruction.md over agent.MaxTaskBytes is refused on reading, before
// it is held in memory (a 200 MB one cost 1.8 GB and a 200 MB episode line).
func TestOversizedInstructionRefused(t *testing.T) {
	dir := writeTask(t, map[string]string{"instruction.md": "x", "task.toml": "", "tests/test.sh": "true"})
	if err := os.Truncate(filepath.Join(dir, "instruction.md"), agent.MaxTaskBytes+1); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "MaxTaskBytes") {
		t.Fatalf("Load: %v", err)
	}
}

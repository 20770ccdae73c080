package swebench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/env/shelltask/shelltasktest"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/sandbox"
)

func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

func write(t *testing.T, path, s string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	opsBuggy = "def add(a, b):\n    return a + b\n\n\ndef clamp(x, lo, hi):\n    return max(lo, min(x, lo))\n"
	opsFixed = "def add(a, b):\n    return a + b\n\n\ndef clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
	testBase = "import unittest\n\nfrom calc.ops import add, clamp\n\n\nclass OpsTest(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
	testNew  = testBase + "\n    def test_clamp(self):\n        self.assertEqual(clamp(5, 0, 3), 3)\n        self.assertEqual(clamp(-1, 0, 3), 0)\n        self.assertEqual(clamp(2, 0, 3), 2)\n"
)

// fixture builds repos/acme__calc (a Python package with a bug in clamp)
// and returns the repositories directory, the instance and the id of a
// commit after base_commit (which the agent must not see).
func fixture(t *testing.T) (string, Instance, string) {
	t.Helper()
	repos := t.TempDir()
	repo := filepath.Join(repos, "acme__calc")
	os.Mkdir(repo, 0o755)
	run(t, repo, "git", "init", "-q")
	write(t, filepath.Join(repo, "calc", "__init__.py"), "")
	write(t, filepath.Join(repo, "calc", "ops.py"), opsBuggy)
	write(t, filepath.Join(repo, "tests", "__init__.py"), "")
	write(t, filepath.Join(repo, "tests", "test_ops.py"), testBase)
	write(t, filepath.Join(repo, ".gitignore"), "__pycache__/\n")
	run(t, repo, "git", "add", "-A")
	run(t, repo, "git", "commit", "-q", "-m", "base")
	base := strings.TrimSpace(run(t, repo, "git", "rev-parse", "HEAD"))
	write(t, filepath.Join(repo, "calc", "ops.py"), opsFixed)
	gold := run(t, repo, "git", "diff")
	run(t, repo, "git", "checkout", "-q", "--", ".")
	write(t, filepath.Join(repo, "tests", "test_ops.py"), testNew)
	testPatch := run(t, repo, "git", "diff")
	run(t, repo, "git", "checkout", "-q", "--", ".")
	// A later commit on the branch: the episode must see base_commit, not HEAD.
	write(t, filepath.Join(repo, "LATER"), "later\n")
	run(t, repo, "git", "add", "-A")
	run(t, repo, "git", "commit", "-q", "-m", "later")
	later := strings.TrimSpace(run(t, repo, "git", "rev-parse", "HEAD"))
	return repos, Instance{
		InstanceID: "acme__calc-1", Repo: "acme/calc", BaseCommit: base,
		ProblemStatement: "clamp(5, 0, 3) returns 0; it should return 3.",
		Patch:            gold, TestPatch: testPatch,
		FailToPass: TestList{"tests/test_ops.py::OpsTest::test_clamp"},
		PassToPass: TestList{"tests.test_ops.OpsTest.test_add"},
	}, later
}

func episode(t *testing.T, e *Env, replies ...string) float64 {
	t.Helper()
	task, r := shelltasktest.Play(t, e, replies...)
	if !strings.Contains(task, "clamp(5, 0, 3)") || !strings.Contains(task, "/app") {
		t.Fatalf("task text %q", task)
	}
	return r
}

func TestResolution(t *testing.T) {
	testenv.MustHaveBwrap(t)
	repos, inst, later := fixture(t)
	opts := Options{ReposDir: repos}

	t.Run("gold patch resolves", func(t *testing.T) {
		e := New(inst, opts)
		if r := episode(t, e, OracleReply(&inst)); r != 1 {
			t.Fatalf("reward %v, report %+v", r, e.Report())
		}
		rep := e.Report()
		if !rep.PatchApplied || !rep.FailToPass[inst.FailToPass[0]] || !rep.PassToPass[inst.PassToPass[0]] {
			t.Fatalf("report %+v", rep)
		}
	})
	t.Run("empty patch does not", func(t *testing.T) {
		e := New(inst, opts)
		if r := episode(t, e, shelltask.SubmitReply); r != 0 {
			t.Fatalf("reward %v", r)
		}
		rep := e.Report()
		if rep.FailToPass[inst.FailToPass[0]] || !rep.PassToPass[inst.PassToPass[0]] || rep.Resolved {
			t.Fatalf("empty patch: F2P must fail and P2P pass: %+v", rep)
		}
	})
	t.Run("workspace edits are the patch", func(t *testing.T) {
		e := New(inst, opts)
		r := episode(t, e,
			"```bash\ntest ! -e LATER && test \"$(git log --all --oneline | wc -l)\" = 1 && ! git cat-file -e "+later+" && sed -i 's/min(x, lo)/min(x, hi)/' calc/ops.py && echo '# note' > NOTES.md\n```",
			"<submit/>")
		if r != 1 {
			t.Fatalf("reward %v, report %+v", r, e.Report())
		}
	})
	t.Run("the workspace's git config never runs on the host", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "pwned")
		e := New(inst, opts)
		hook := sandbox.ShellQuote("touch " + marker + "; false")
		r := episode(t, e, "```bash\ngit config core.fsmonitor "+hook+" && sed -i 's/min(x, lo)/min(x, hi)/' calc/ops.py\n```\n<submit/>")
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("a command from the agent's .git/config ran on the host")
		}
		if r != 1 {
			t.Fatalf("reward %v, report %+v, metrics %v", r, e.Report(), e.Metrics())
		}
	})
	t.Run("editing the tests does not help", func(t *testing.T) {
		e := New(inst, opts)
		cheat := "```bash\ncat > tests/test_ops.py <<'EOF'\nimport unittest\n\n\nclass OpsTest(unittest.TestCase):\n    def test_add(self):\n        pass\n\n    def test_clamp(self):\n        pass\nEOF\n```\n<submit/>"
		if r := episode(t, e, cheat); r != 0 {
			t.Fatalf("reward %v, report %+v", r, e.Report())
		}
	})
	t.Run("the grading sandbox has no shared cache", func(t *testing.T) {
		cache, err := sandbox.MkdirTemp("", "compactrl-swe-cache-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(cache) })
		os.Chmod(cache, 0o777)
		o := opts
		o.CacheDir = cache
		e := New(inst, o)
		leak := "```bash\nprintf 'import shutil\\ntry:\\n    shutil.copy(\"/in/test.patch\", \"/cache/test.patch\")\\nexcept OSError:\\n    pass\\n' >> calc/ops.py\n```\n<submit/>"
		episode(t, e, leak)
		if ents, _ := os.ReadDir(cache); len(ents) != 0 {
			t.Fatalf("the patched code carried %v into the cache", ents)
		}
	})
	// python3 -m unittest|pytest runs from the repository's root, first
	// on sys.path: a module planted there would be imported instead of the
	// test tooling's own (a passing run for every test). Each resolved the
	// instance before local mode refused them.
	for _, plant := range []struct{ name, file, when string }{
		{"unittest.py", "unittest.py", "patch"},
		{"pytest.py", "pytest.py", "patch"},
		{"a package named argparse (imported by unittest's main)", "argparse/__init__.py", "patch"},
		{"unittest.py written by the patched code during the first test", "", "test"},
	} {
		t.Run("a module at the root cannot shadow the tooling: "+plant.name, func(t *testing.T) {
			e := New(inst, opts)
			cmd := "mkdir -p $(dirname " + plant.file + ") && printf 'import os\\nos._exit(0)\\n' > " + plant.file
			if plant.when == "test" {
				// The fix is missing; the package, imported by the first
				// test, plants unittest.py for the next one.
				cmd = "printf 'import pathlib\\npathlib.Path(\"/app/unittest.py\").write_text(\"import os\\\\nos._exit(0)\\\\n\")\\n' >> calc/__init__.py"
			}
			r := episode(t, e, "```bash\n"+cmd+"\n```\n<submit/>")
			if r != 0 || !strings.Contains(e.Report().Note, "local mode refuses") {
				t.Fatalf("reward %v, report %+v", r, e.Report())
			}
		})
	}
	t.Run("a broken patch does not apply", func(t *testing.T) {
		e := New(inst, opts)
		if r := episode(t, e, "```diff\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n```\n<submit/>"); r != 0 || e.Report().PatchApplied {
			t.Fatalf("reward %v, report %+v", r, e.Report())
		}
	})
}

func TestLoadInstances(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "i.jsonl")
	write(t, p, `{"instance_id":"a__b-1","repo":"a/b","base_commit":"abc","problem_statement":"x","FAIL_TO_PASS":"[\"t1\", \"t2\"]","PASS_TO_PASS":"[]"}`+"\n\n"+
		`{"instance_id":"a__b-2","repo":"a/b","base_commit":"abc","problem_statement":"y","FAIL_TO_PASS":["t3"],"PASS_TO_PASS":["t4"],"test_cmd":"pytest {test}"}`+"\n")
	ins, err := LoadInstances(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 2 || len(ins[0].FailToPass) != 2 || ins[0].FailToPass[1] != "t2" || len(ins[0].PassToPass) != 0 || ins[1].PassToPass[0] != "t4" || ins[1].TestCmd != "pytest {test}" {
		t.Fatalf("loaded %+v", ins)
	}
	for name, body := range map[string]string{
		"bad list":  `{"instance_id":"x","repo":"a/b","base_commit":"c","problem_statement":"p","FAIL_TO_PASS":"not a list"}`,
		"no f2p":    `{"instance_id":"x","repo":"a/b","base_commit":"c","problem_statement":"p"}`,
		"no base":   `{"instance_id":"x","repo":"a/b","problem_statement":"p","FAIL_TO_PASS":["t"]}`,
		"duplicate": `{"instance_id":"x","repo":"a/b","base_commit":"c","problem_statement":"p","FAIL_TO_PASS":["t"]}` + "\n" + `{"instance_id":"x","repo":"a/b","base_commit":"c","problem_statement":"p","FAIL_TO_PASS":["t"]}`,
		"not json":  `{"instance_id":`,
		"empty":     "\n",
	} {
		t.Run(name, func(t *testing.T) {
			write(t, p, body)
			if _, err := LoadInstances(p); err == nil {
				t.Errorf("%s: loaded", name)
			} else if name != "empty" && !strings.Contains(err.Error(), "i.jsonl:") {
				t.Errorf("%s: error lacks file:line: %v", name, err)
			}
		})
	}
}

func TestRepoDir(t *testing.T) {
	repos := t.TempDir()
	for _, d := range []string{"o__n/.git", "other/.git", "own/nm/.git"} {
		os.MkdirAll(filepath.Join(repos, d), 0o755)
	}
	for _, c := range []struct {
		name string
		in   Instance
		want string
	}{
		{"owner__name", Instance{Repo: "o/n"}, "o__n"},
		{"name-only", Instance{Repo: "x/other"}, "other"},
		{"owner-dir-name-dir", Instance{Repo: "own/nm"}, "own/nm"},
		{"repo_path-wins", Instance{Repo: "o/n", RepoPath: "other"}, "other"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := RepoDir(&c.in, repos)
			if err != nil || got != filepath.Join(repos, c.want) {
				t.Errorf("%+v: %q %v, want %s", c.in, got, err, c.want)
			}
		})
	}
	if _, err := RepoDir(&Instance{InstanceID: "i", Repo: "no/where"}, repos); err == nil || !strings.Contains(err.Error(), "no__where") {
		t.Errorf("missing repo: %v", err)
	}
}

func TestTestCommand(t *testing.T) {
	goRoot := t.TempDir()
	write(t, filepath.Join(goRoot, "go.mod"), "module m\n")
	pyRoot := t.TempDir()
	for _, c := range []struct {
		name     string
		root, id string
		inst     Instance
		pytest   bool
		cmd      string
		must     string
	}{
		{"go-test", goRoot, "TestX", Instance{}, false, "go test -count=1 -v -run '^TestX$' './...' 2>&1", "--- PASS: TestX "},
		{"go-subtest-in-package", goRoot, "./pkg:TestX/sub.case", Instance{}, false, `go test -count=1 -v -run '^TestX$/^sub\.case$' './pkg' 2>&1`, "--- PASS: TestX/sub.case "},
		{"unittest-from-pytest-id", pyRoot, "tests/test_a.py::C::test_m", Instance{}, false, "python3 -m unittest -v 'tests.test_a.C.test_m' 2>&1", ""},
		{"pytest", pyRoot, "tests/test_a.py::C::test_m", Instance{}, true, "python3 -m pytest -q -p no:cacheprovider 'tests/test_a.py::C::test_m' 2>&1", ""},
		{"unittest-dotted-id", pyRoot, "tests.test_a.C.test_m", Instance{}, false, "python3 -m unittest -v 'tests.test_a.C.test_m' 2>&1", ""},
		{"test_cmd-placeholder-quoted", pyRoot, "it's", Instance{TestCmd: "./run {test} --fast"}, false, `./run 'it'\''s' --fast`, ""},
		{"test_cmd-id-appended", goRoot, "T", Instance{TestCmd: "make test"}, false, "make test 'T'", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := TestCommand(&c.inst, c.root, c.id, c.pytest)
			if got.Cmd != c.cmd || got.MustContain != c.must {
				t.Errorf("%s: %+v; want %q must %q", c.id, got, c.cmd, c.must)
			}
		})
	}
}

func TestPatchFiles(t *testing.T) {
	p := "diff --git a/x/y.py b/x/y.py\n--- a/x/y.py\n+++ b/x/y.py\n@@ -1 +1 @@\ndiff --git a/new.py b/new.py\nnew file mode 100644\n"
	if got := strings.Join(patchFiles(p), ","); got != "x/y.py,new.py" {
		t.Fatalf("patchFiles = %s", got)
	}
}

// The task template moved from a Go string literal to prompts/task.tmpl; it renders
// what the literal did.
func TestTaskTemplate(t *testing.T) {
	inst := Instance{InstanceID: "a__b-1", Repo: "a/b", BaseCommit: "0123456789abcdef0123", ProblemStatement: "\n  x is broken.\n"}
	short := inst.BaseCommit[:12]
	old := strings.TrimSpace(inst.ProblemStatement) + "\n\n" +
		fmt.Sprintf("The repository %s is checked out at /app (commit %s). Change the code to resolve the issue above; "+
			"the tests that check it are not shown to you. When you submit, your changes (git diff against that commit, new files included) are the patch that is evaluated; "+
			"a ```diff block in the submitting reply is taken as the patch instead.", inst.Repo, short)
	for _, c := range []struct {
		name, tmpl, want string
		ok               bool
	}{
		{"embedded", "", old, true},
		{"override", "Fix {{.Repo}}@{{.Commit}}: {{.ProblemStatement}}", "Fix a/b@0123456789ab: x is broken.", true},
		{"bad template", "{{.Repo", "", false},
		{"unknown field", "{{.Nope}}", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := New(inst, Options{TaskTemplate: c.tmpl}).task(sandbox.AppDir)
			if (err == nil) != c.ok || got != c.want {
				t.Errorf("task() = %q, %v; want %q (ok %v)", got, err, c.want, c.ok)
			}
		})
	}
}

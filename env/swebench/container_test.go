package swebench

import (
	"context"
	"encoding/json"
	"github.com/compactrl/compactrl/env/tasks"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/sandbox"
)

// The container tests run the tiny instances of testdata/images (one per
// log-parser family: pytest, Django's runtests.py, SymPy's bin/test) in the
// images testdata/images/build.sh builds. Locally they skip without podman
// or the images; under CI=true they fail.

const testImagePrefix = "localhost/compactrl-swe-test-"

func testInstances(t *testing.T) map[string]Instance {
	t.Helper()
	insts, err := LoadInstances("testdata/images/instances.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Instance{}
	for _, in := range insts {
		out[in.InstanceID] = in
	}
	return out
}

// mustHaveImage stops t unless podman runs and image is in its store.
func mustHaveImage(t *testing.T, image string) sandbox.Container {
	t.Helper()
	return mustHaveEngineImage(t, "podman", image)
}

// mustHaveEngineImage stops t unless engine runs and image is in its
// store. Docker Engine is optional locally; where COMPACTRL_ENGINES names
// it (CI starts dockerd), it is required as podman is under CI=true.
func mustHaveEngineImage(t *testing.T, engine, image string) sandbox.Container {
	t.Helper()
	unavailable := testenv.Unavailable
	if engine == "docker" && !strings.Contains(os.Getenv("COMPACTRL_ENGINES"), "docker") {
		unavailable = func(t testing.TB, format string, args ...any) { t.Helper(); t.Skipf(format, args...) }
	}
	c := sandbox.Container{Engine: engine}
	if _, err := exec.LookPath(engine); err != nil {
		unavailable(t, "%s not installed: %v", engine, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, time.Minute))
	defer cancel()
	if err := c.Available(ctx); err != nil {
		unavailable(t, "%s not usable: %v", engine, err)
	}
	if _, err := c.InspectImage(ctx, image); err != nil {
		unavailable(t, "image %s missing from %s (build it with env/swebench/testdata/images/build.sh %s): %v", image, engine, engine, err)
	}
	return c
}

// play runs one episode of inst in container mode with the reply (then a
// plain submit if the reply did not end it) and returns its report.
func play(t *testing.T, c sandbox.Container, inst Instance, image string, replies ...string) (Report, float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 5*time.Minute))
	defer cancel()
	e := New(inst, Options{Sandboxing: tasks.Sandboxing{Engine: &c}, Image: image, WorkRoot: t.TempDir(), EvalTimeout: testenv.Deadline(t, 3*time.Minute)})
	defer e.Close()
	task, err := e.Reset(ctx)
	if err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if !strings.Contains(task, "/testbed") {
		t.Errorf("task does not name /testbed: %q", task)
	}
	var st = struct {
		done   bool
		reward float64
		obs    string
	}{}
	for _, r := range append(replies, "<submit/>") {
		s, err := e.Step(ctx, r)
		if err != nil {
			t.Fatalf("Step(%.60q): %v", r, err)
		}
		if s.Done {
			st.done, st.reward, st.obs = true, s.Reward, s.Observation
			break
		}
	}
	if !st.done {
		t.Fatal("episode did not end at submit")
	}
	rep := e.Report()
	if dir := os.Getenv("COMPACTRL_SWE_RECORD_LOGS"); dir != "" {
		// Records the test logs for testdata/harness/cases.json.
		name := strings.NewReplacer("/", "_").Replace(t.Name())
		if err := os.WriteFile(dir+"/"+name+".log", []byte(rep.Log), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if t.Failed() || (rep.Resolved != (st.reward == 1)) {
		t.Logf("observation: %s\nlog tail: %s", st.obs, tailString(rep.Log, 3000))
	}
	return rep, st.reward
}

func diffReply(p string) string { return "```diff\n" + p + "```\n<submit/>" }

// TestContainerVerdicts: the gold patch resolves each family's instance,
// the empty patch does not, and every verdict-faking patch (a conftest.py
// forcing exit status 0, a top-level pytest.py, edits to the test file,
// skipping every test, a runner forced to exit 0) scores 0.
func TestContainerVerdicts(t *testing.T) {
	insts := testInstances(t)
	var fakers map[string]map[string]string
	b, err := os.ReadFile("testdata/images/fakers.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &fakers); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []struct{ id, family, engine string }{
		{"pallets__flask-90001", "pytest", "podman"}, {"django__django-90002", "django", "podman"}, {"sympy__sympy-90003", "sympy", "podman"},
		// Docker Engine, on the family whose fakers are the most varied.
		{"pallets__flask-90001", "pytest", "docker"},
	} {
		t.Run(fam.family+map[string]string{"podman": "", "docker": "/docker"}[fam.engine], func(t *testing.T) {
			image := testImagePrefix + fam.family + ":latest"
			c := mustHaveEngineImage(t, fam.engine, image)
			inst := insts[fam.id]
			// sympy's row has no image column: the override names it.
			override := ""
			if inst.Image == "" {
				override = image
			}
			t.Run("gold", func(t *testing.T) {
				rep, reward := play(t, c, inst, override, OracleReply(&inst))
				if reward != 1 || !rep.Resolved || rep.Resolution != ResolvedFull || !rep.PatchApplied || rep.Image != image {
					t.Errorf("gold: reward %v, report %+v", reward, rep)
				}
				for _, id := range inst.FailToPass {
					if !rep.FailToPass[id] {
						t.Errorf("gold: FAIL_TO_PASS %q not passed: %v", id, rep.TestStatus)
					}
				}
			})
			t.Run("empty", func(t *testing.T) {
				rep, reward := play(t, c, inst, override)
				if reward != 0 || rep.Resolved || rep.Resolution != ResolvedNo || rep.Tests == nil || len(rep.Tests.FailToPass.Success) != 0 {
					t.Errorf("empty: reward %v, report %+v", reward, rep)
				}
				if len(rep.Tests.PassToPass.Failure) != 0 {
					t.Errorf("empty: PASS_TO_PASS failed: %v", rep.Tests.PassToPass.Failure)
				}
			})
			for name, p := range fakers[fam.id] {
				t.Run("fake_"+name, func(t *testing.T) {
					rep, reward := play(t, c, inst, override, diffReply(p))
					if reward != 0 || rep.Resolved {
						t.Errorf("%s: reward %v, report %+v", name, reward, rep)
					}
					if !rep.PatchApplied {
						t.Errorf("%s: patch did not apply: %+v", name, rep)
					}
				})
			}
		})
	}
}

// TestContainerAgentDiff: the agent's edits in /testbed (no ```diff block)
// are the patch — a new binary file left out of it — and they resolve the
// instance; the agent's shell has the testbed environment active.
func TestContainerAgentDiff(t *testing.T) {
	image := testImagePrefix + "pytest:latest"
	c := mustHaveImage(t, image)
	inst := testInstances(t)["pallets__flask-90001"]
	rep, reward := play(t, c, inst, "",
		"```bash\ntest \"$VIRTUAL_ENV\" = /opt/miniconda3/envs/testbed && pwd && sed -i 's/return max(lo, x)/return max(lo, min(x, hi))/' src/calc.py && printf '\\x00\\x01\\x02' > blob.bin && git commit -qam wip\n```",
	)
	if reward != 1 || !rep.Resolved {
		t.Fatalf("agent fix: reward %v, report %+v", reward, rep)
	}
	if len(rep.BinaryExcluded) != 1 || rep.BinaryExcluded[0] != "blob.bin" {
		t.Errorf("binary excluded %v, want [blob.bin]", rep.BinaryExcluded)
	}
}

// TestContainerImageMissing: an instance whose image is not there is an
// error naming the images tried (an infra error, never a 0).
func TestContainerImageMissing(t *testing.T) {
	c := mustHaveImage(t, testImagePrefix+"pytest:latest")
	inst := testInstances(t)["sympy__sympy-90003"]
	e := New(inst, Options{Sandboxing: tasks.Sandboxing{Engine: &c}, Namespace: "compactrl-no-such-namespace", WorkRoot: t.TempDir()})
	defer e.Close()
	_, err := e.Reset(context.Background())
	want := "compactrl-no-such-namespace/sweb.eval.x86_64.sympy_1776_sympy-90003:latest"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), ErrImageMissing.Error()) {
		t.Fatalf("Reset = %v, want %v naming %s", err, ErrImageMissing, want)
	}
}

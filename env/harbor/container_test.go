package harbor

import (
	"context"
	"errors"
	"github.com/compactrl/compactrl/env/tasks"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/sandbox"
)

// containerCase is one episode of a task in testdata/container, played by
// the oracle (the task's solve.sh: for the tamper tasks, the attack) or the
// empty policy, and what it must end in.
type containerCase struct {
	task   string
	oracle bool
	reward float64
	note   string // a substring of RewardNote ("" : none); alternatives separated by "|"
	verErr string // a substring of an ErrVerifier error ("" : no error)
	choice RewardChoice
	// execTimeout, when set, is the engine's per-command deadline
	// (sandbox.Container.ExecTimeout) for the case.
	execTimeout time.Duration
	// fired, for an attack that must catch a moment of the verifier's run,
	// is the metric that reaches 1 MiB when it did: below that the attack
	// missed (on a loaded host it can), the episode must end as the honest
	// verifier ends it (reward, no note), and the case runs again, up to
	// attackTries episodes.
	fired string
}

const attackTries = 4

// The container runner runs today's Harbor tasks the way Harbor does
// (their Dockerfile built, the verifier in the agent's container after the
// agent), and no attack on the verdict scores above 0. Every tamper task's
// solve.sh would get reward 1 from a verifier that trusted its reward
// directory: each asserts the detection that stops it.
func TestContainerTasks(t *testing.T) {
	testenv.MustHavePodman(t)
	if err := sandbox.GuardAvailable(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	cases := []containerCase{
		{task: "service-and-files", oracle: true, reward: 1},
		{task: "service-and-files", reward: 0},
		// A compose task (was refused): the db service runs beside the
		// main one for the agent and the verifier, and is torn down after.
		{task: "compose-two-services", oracle: true, reward: 1},
		{task: "compose-two-services", reward: 0},
		// Harbor's compose variables (${MAIN_IMAGE_NAME}, ${CONTEXT_DIR}) set
		// as Harbor sets them (was infra_error: the image name was empty).
		{task: "compose-harbor-vars", oracle: true, reward: 1},
		{task: "reward-json-two-keys", oracle: true, reward: 1},
		{task: "reward-json-two-keys", reward: 0},
		{task: "agent-timeout", oracle: true, reward: 0},
		{task: "verifier-timeout", verErr: "timed out"},
		{task: "verifier-timeout", oracle: true, note: "timed out after 2s (the agent's work"},
		{task: "verifier-no-interpreter", verErr: "interpreter /usr/bin/python9 is not in the image"},
		{task: "verifier-syntax-error", verErr: "does not parse"},
		{task: "tamper-leftover-writer", oracle: true, note: "opens or changes of the verifier's files by processes outside its run"},
		// Changes without an open (issue 35's probe): each scored 1 when
		// the guard only saw opens.
		{task: "tamper-symlink-testsh", oracle: true, note: "(python3) created .swap while closed"},
		{task: "tamper-plant-test-module", oracle: true, note: "created test_aaa.py while closed"},
		{task: "tamper-rename-over-reward", oracle: true, note: "(python3) moved away test-stdout.txt while the verifier ran"},
		{task: "tamper-fd-in-flight", oracle: true, note: "wrote reward.txt while the verifier ran"},
		// The verifier exec's output pipe reopened and flooded: the host
		// keeps MaxExecOutputBytes (it buffered everything, and waited for
		// the pipe to close until the verifier's timeout).
		{task: "tamper-flood-exec-pipe", oracle: true, note: "past the host's cap", fired: "verifier_exec_pipe_bytes"},
		// Staging slowed by thousands of directories while a daemon
		// re-creates test.sh: was infra_error (masked) or an unnoted 0.
		{task: "tamper-slow-staging", oracle: true, note: "opens or changes of the verifier's files by processes outside its run"},
		// Several keys, none named "reward": the agent's (it ran a
		// command) 0 with a note, the task's (no command) verifier_error
		// (was verifier_error both); a chosen key or aggregation reads it.
		{task: "reward-json-no-reward-key", oracle: true, note: `none named "reward"`},
		{task: "reward-json-no-reward-key", verErr: `none named "reward"`},
		{task: "reward-json-no-reward-key", oracle: true, reward: 3, choice: RewardChoice{Key: "tests_passed"}},
		{task: "reward-json-no-reward-key", oracle: true, reward: 2, choice: RewardChoice{Agg: "mean"}},
		{task: "tamper-kill-testsh", oracle: true, note: "killed by signal 9"},
		{task: "tamper-thread-straggler", oracle: true, note: "outlived test.sh"},
		{task: "tamper-second-reward-file", oracle: true, note: "both reward.txt and reward.json"},
		// The daemon may catch the verifier's wrapper before it has even
		// loaded its libraries (it cannot start), or its shell before it
		// opens test-stdout.txt (no reward): 0 with a note either way.
		{task: "tamper-lower-nofile", oracle: true, note: "opens or changes of the verifier's files by processes outside its run|could not start in the agent's container|no reward file"},
		{task: "tamper-ptrace", oracle: true, note: "traced"},
		{task: "tamper-shadow-unittest", oracle: true, note: "unittest.py in /app"},
		// The host's interpreter check runs the container's `test`, which the
		// agent replaced with a program that never returns: the check ends at
		// its deadline and the attempt scores 0 with a note (was: eval hung;
		// infra_error under --episode-timeout).
		{task: "tamper-block-host-check", oracle: true, note: "did not finish", execTimeout: 5 * time.Second},
	}
	// Two at a time, as eval's default workers, on every engine here.
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, c := range containerEngines(t) {
		tasks := map[string]*Task{}
		for _, tc := range cases {
			if tasks[tc.task] != nil {
				continue
			}
			task, err := Load(filepath.Join("testdata", "container", tc.task))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := ImageRef(context.Background(), task, c, ""); errors.Is(err, sandbox.ErrNoCompose) && !testenv.InCI() {
				t.Logf("%s: %v: its cases do not run here", c.Name(), err)
				continue
			} else if err != nil {
				t.Fatal(err)
			}
			tasks[tc.task] = task
		}
		for _, tc := range cases {
			if tasks[tc.task] == nil {
				continue
			}
			name := c.Name() + "/" + tc.task + map[bool]string{true: "/oracle", false: "/empty"}[tc.oracle]
			if tc.choice != (RewardChoice{}) {
				name += "/" + tc.choice.Key + tc.choice.Agg
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				t.Run(name, func(t *testing.T) {
					for try := 1; !runContainerCase(t, tasks[tc.task], c, tc); try++ {
						if try == attackTries {
							t.Logf("the attack missed its window in all %d episodes (each ended as the honest verifier ends it); its defence was not exercised", try)
							return
						}
						t.Logf("episode %d: the attack missed its window; again", try)
					}
				})
			}()
		}
	}
	wg.Wait()
}

// runContainerCase plays one episode of the case and checks its end; it
// reports false when the case's attack missed its window (tc.fired).
func runContainerCase(t *testing.T, task *Task, c sandbox.Container, tc containerCase) bool {
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Deadline(t, 2*time.Minute))
	defer cancel()
	if tc.execTimeout > 0 {
		c.ExecTimeout = testenv.Deadline(t, tc.execTimeout)
	}
	e := New(task, Options{Sandboxing: tasks.Sandboxing{Engine: &c}, RequireGuard: true, WorkRoot: t.TempDir(), ExposeSolution: tc.oracle, Reward: tc.choice})
	defer func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	if _, err := e.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	var st agent.Step
	var err error
	if tc.oracle {
		st, err = e.Oracle(ctx)
	} else {
		st, err = e.Step(ctx, shelltask.SubmitReply)
	}
	if tc.verErr != "" {
		if !errors.Is(err, ErrVerifier) || !strings.Contains(err.Error(), tc.verErr) {
			t.Fatalf("got %+v, %v; want a verifier error naming %q", st, err, tc.verErr)
		}
		return true
	}
	if err != nil || !st.Done {
		t.Fatalf("step: %+v %v", st, err)
	}
	if tc.fired != "" && e.Metrics()[tc.fired] < 1<<20 {
		if st.Reward != tc.reward || e.RewardNote() != "" {
			t.Fatalf("the attack missed its window, yet reward %v note %q; want %v and no note\n%s", st.Reward, e.RewardNote(), tc.reward, st.Observation)
		}
		return false
	}
	if st.Reward != tc.reward || !noteMatches(e.RewardNote(), tc.note) || (tc.note == "") != (e.RewardNote() == "") {
		t.Fatalf("reward %v note %q, want %v and a note with %q\n%s", st.Reward, e.RewardNote(), tc.reward, tc.note, st.Observation)
	}
	if m := e.Metrics(); m["verifier_guarded"] != 1 {
		t.Errorf("verifier not guarded: %v", m)
	}
	if m := e.Metrics(); tc.task == "tamper-leftover-writer" && m["verifier_dirs_refused_to_agent"] == 0 {
		t.Errorf("the agent phase's writes to /logs/verifier were not counted: %v", m)
	}
	if tc.task == "service-and-files" {
		// storage_mb: applied where the engine's storage has quotas, else
		// dropped with a note the engine's own report gave.
		ss, err := c.StorageSupport(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(st.Observation, "storage_mb not enforced: "+ss.Why); got == ss.Quota {
			t.Errorf("%s storage %+v; observation:\n%s", c.Name(), ss, st.Observation)
		}
	}
	if tc.task == "reward-json-two-keys" {
		if m := e.Metrics(); m["reward/tests_passed"] != map[bool]float64{true: 3, false: 0}[tc.oracle] || m["reward/reward"] != st.Reward {
			t.Errorf("reward.json's values not kept: %v", m)
		}
	}
	return true
}

// The agent's processes outlive its phase in the container (Harbor runs
// the verifier beside them), but nothing of an episode outlives Close: no
// container, no guarded mount, no workspace.
func TestContainerEpisodeLeavesNothing(t *testing.T) {
	testenv.MustHavePodman(t)
	task, err := Load(filepath.Join("testdata", "container", "tamper-leftover-writer"))
	if err != nil {
		t.Fatal(err)
	}
	c := sandbox.Container{Engine: "podman"}
	ctx := context.Background()
	root := t.TempDir()
	e := New(task, Options{Sandboxing: tasks.Sandboxing{Engine: &c}, WorkRoot: root, ExposeSolution: true})
	if _, err := e.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	id := e.back.(*boxBackend).ep.box.ID()
	if _, err := e.Oracle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if c.ContainerExists(ctx, id) {
		t.Errorf("container %s still exists", id)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), root) {
		t.Errorf("a guarded directory under %s is still mounted", root)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("workspace left: %v", ents)
	}
}

// noteMatches reports whether note contains one of want's "|"-separated
// alternatives.
func noteMatches(note, want string) bool {
	for _, w := range strings.Split(want, "|") {
		if strings.Contains(note, w) {
			return true
		}
	}
	return false
}

// containerEngines are the engines the container tests run on: podman,
// and Docker Engine where dockerd answers and has the base image (CI
// starts it and sets COMPACTRL_ENGINES="podman docker", which makes a
// missing one a failure).
func containerEngines(t *testing.T) []sandbox.Container {
	base := testenv.MustHavePodman(t)
	out := []sandbox.Container{{Engine: "podman"}}
	want := strings.Contains(os.Getenv("COMPACTRL_ENGINES"), "docker")
	d := sandbox.Container{Engine: "docker"}
	if err := d.Available(context.Background()); err != nil {
		if want {
			t.Fatalf("COMPACTRL_ENGINES names docker: %v", err)
		}
		return out
	}
	if err := exec.Command("docker", "image", "inspect", base).Run(); err != nil {
		if want {
			t.Fatalf("COMPACTRL_ENGINES names docker, but its store lacks %s (podman save %s | docker load)", base, base)
		}
		return out
	}
	return append(out, d)
}

// A compose episode leaves nothing behind either: its services'
// containers and its network are gone after Close.
func TestComposeEpisodeLeavesNothing(t *testing.T) {
	testenv.MustHavePodman(t)
	task, err := Load(filepath.Join("testdata", "container", "compose-two-services"))
	if err != nil {
		t.Fatal(err)
	}
	c := sandbox.Container{Engine: "podman"}
	ctx := context.Background()
	if _, _, err := ImageRef(ctx, task, c, ""); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	e := New(task, Options{Sandboxing: tasks.Sandboxing{Engine: &c}, WorkRoot: t.TempDir(), ExposeSolution: true})
	if _, err := e.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	project := composeProject(filepath.Base(e.Workspace()))
	if _, err := e.Oracle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("podman", "ps", "-aq", "--filter", "label=com.docker.compose.project="+project).Output()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("containers of %s left: %q %v", project, out, err)
	}
	if out, _ := exec.Command("podman", "network", "ls", "--format", "{{.Name}}").Output(); strings.Contains(string(out), project) {
		t.Errorf("network of %s left: %s", project, out)
	}
}

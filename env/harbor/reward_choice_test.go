package harbor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/sandbox"
)

// The scalar for RL comes from every key the verifier reported, as the
// user chose: Harbor's "reward" key (else the only key), one named key, or
// an aggregation over the keys.
func TestRewardChoice(t *testing.T) {
	r := Rewards{"tests_passed": 3, "style": 0.5, "lint": -1}
	for _, c := range []struct {
		key, agg string
		want     float64
		err      string
	}{
		{key: "tests_passed", want: 3},
		{key: "style", want: 0.5},
		{agg: "sum", want: 2.5},
		{agg: "mean", want: 2.5 / 3},
		{agg: "min", want: -1},
		{agg: "max", want: 3},
		{key: "reward", err: `no key "reward" (keys: lint, style, tests_passed)`},
		{err: `3 keys (lint, style, tests_passed) and none named "reward"`},
	} {
		ch, err := ParseRewardChoice(c.key, c.agg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ch.Scalar(r)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: got %v, %v; want an error with %q", ch, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v: got %v, %v; want %v", ch, got, err, c.want)
		}
	}
	for _, bad := range [][2]string{{"a", "mean"}, {"", "median"}, {" a", ""}} {
		if _, err := ParseRewardChoice(bad[0], bad[1]); err == nil {
			t.Errorf("ParseRewardChoice(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// A key a task cannot produce is refused when the tasks load (the task is
// skipped with the reason), not masked episode by episode: a task whose
// tests write only reward.txt has the one key "reward"; a reward.json task
// whose tests never name the key cannot write it.
func TestRewardKeyRefusedAtLoad(t *testing.T) {
	txt := writeTask(t, map[string]string{"instruction.md": "x", "task.toml": "", "tests/test.sh": "echo 1 > /logs/verifier/reward.txt"})
	js := writeTask(t, map[string]string{"instruction.md": "x", "task.toml": "",
		"tests/test.sh": "python3 /tests/grade.py", "tests/grade.py": `import json; json.dump({"tests_passed": 3, "style": 1}, open("/logs/verifier/reward.json", "w"))`})
	for _, c := range []struct {
		dir, key, agg string
		skipped       string
	}{
		{dir: txt},
		{dir: txt, key: "reward"},
		{dir: txt, agg: "mean"},
		{dir: txt, key: "tests_passed", skipped: "no file of tests/ names reward.json"},
		{dir: js, key: "tests_passed"},
		{dir: js, key: "coverage", skipped: `no file of tests/ names the key "coverage"`},
		{dir: js, agg: "min"},
	} {
		ts, skipped, err := LoadTasks(context.Background(), c.dir, tasks.Options{Sandboxing: tasks.Sandboxing{Runner: sandbox.Bubblewrap{}}, Settings: tasks.Settings{settingRewardKey: c.key, settingRewardAgg: c.agg}})
		if err != nil {
			t.Fatal(err)
		}
		if c.skipped == "" {
			if len(ts) != 1 || len(skipped) != 0 {
				t.Errorf("%s key %q agg %q: %d tasks, skipped %v", c.dir, c.key, c.agg, len(ts), skipped)
			}
			continue
		}
		if len(ts) != 0 || len(skipped) != 1 || !strings.Contains(skipped[0].Reason, c.skipped) {
			t.Errorf("%s key %q: %d tasks, skipped %v; want it skipped for %q", c.dir, c.key, len(ts), skipped, c.skipped)
		}
	}
	if _, _, err := LoadTasks(context.Background(), txt, tasks.Options{Sandboxing: tasks.Sandboxing{Runner: sandbox.Bubblewrap{}}, Settings: tasks.Settings{settingRewardKey: "a", settingRewardAgg: "sum"}}); err == nil {
		t.Error("both --reward-key and --reward-agg accepted")
	}
}

// A reward of the wrong shape (several keys, none named "reward"; or
// without the chosen key) is the agent's once it ran a command: its code
// runs inside the verifier's run and can write reward.json. 0 with a note,
// never verifier_error (which masks the episode). With no command run, it
// is the task's: verifier_error. The chosen key reads it.
func TestWrongShapeRewardIsTheAgents(t *testing.T) {
	testenv.MustHaveBwrap(t)
	testSh := "/app/prog\n[ -f /logs/verifier/reward.json ] || echo '{\"reward\": 0}' > /logs/verifier/reward.json\n"
	prog := "#!/bin/sh\necho '{\"tests_passed\": 1, \"style\": 1}' > /logs/verifier/reward.json\n"
	r, obs, e, err := hostile(t, Options{}, "", testSh, prog)
	if err != nil || r != 0 || !strings.Contains(e.RewardNote(), `none named "reward"`) {
		t.Fatalf("wrong-shape reward after an agent command: reward %v err %v note %q\n%s", r, err, e.RewardNote(), obs)
	}
	if m := e.Metrics(); m["reward/tests_passed"] != 1 || m["reward/style"] != 1 {
		t.Errorf("the keys were not kept: %v", m)
	}
	r, _, e, err = hostile(t, Options{Reward: RewardChoice{Key: "tests_passed"}}, "", testSh, prog)
	if err != nil || r != 1 || e.RewardNote() != "" {
		t.Fatalf("--reward-key tests_passed: reward %v err %v note %q", r, err, e.RewardNote())
	}
	// No command: the task's own fault.
	task, err := Load(writeTask(t, map[string]string{"instruction.md": "x", "task.toml": "",
		"tests/test.sh": `echo '{"tests_passed": 1, "style": 1}' > /logs/verifier/reward.json`}))
	if err != nil {
		t.Fatal(err)
	}
	e = New(task, Options{})
	defer e.Close()
	if _, err := e.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step(context.Background(), shelltask.SubmitReply); !errors.Is(err, ErrVerifier) || !strings.Contains(err.Error(), `none named "reward"`) {
		t.Fatalf("wrong-shape reward with no agent command: %v; want verifier_error", err)
	}
}

// A cancelled load (Ctrl-C while images are built) stops with the
// context's error instead of skipping every task.
func TestLoadTasksStopsWhenCancelled(t *testing.T) {
	dir := writeTask(t, map[string]string{"instruction.md": "x", "task.toml": "", "tests/test.sh": "echo 1 > /logs/verifier/reward.txt"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ts, _, err := LoadTasks(ctx, dir, tasks.Options{Sandboxing: tasks.Sandboxing{Runner: sandbox.Bubblewrap{}}}); !errors.Is(err, context.Canceled) || ts != nil {
		t.Fatalf("LoadTasks after cancel = %d tasks, %v; want context.Canceled", len(ts), err)
	}
}

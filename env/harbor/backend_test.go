package harbor

import (
	"context"
	"github.com/compactrl/compactrl/env/tasks"
	"sync/atomic"
	"testing"

	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/sandbox"
)

// countingRunner wraps a host runner and counts the sandboxes it starts.
type countingRunner struct {
	sandbox.Runner
	starts *atomic.Int32
}

// MountWorkspace delegates to the wrapped runner: a wrapper that did not
// would have its episodes' workspace limit refused (shelltask.NewWorkspace).
func (c countingRunner) MountWorkspace(dir string, limit int64) (func() error, error) {
	return c.Runner.(sandbox.WorkspaceMounter).MountWorkspace(dir, limit)
}

func (c countingRunner) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	c.starts.Add(1)
	return c.Runner.Start(ctx, spec)
}

// The backend is Options' choice, made once by New, never the runner's
// type: a wrapped runner stays the host backend, with both the agent's and
// the verifier's sandboxes started through the wrapper, and Engine picks
// the container backend whatever Runner holds.
func TestBackendChosenByOptionsNotRunnerType(t *testing.T) {
	testenv.MustHaveBwrap(t)
	task, err := Load(writeTask(t, map[string]string{"instruction.md": "x", "task.toml": "",
		"tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n"}))
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	wrapped := countingRunner{sandbox.Bubblewrap{}, &n}
	e := New(task, Options{Sandboxing: tasks.Sandboxing{Runner: wrapped}})
	if _, ok := e.back.(*hostBackend); !ok {
		t.Fatalf("wrapped host runner: backend %T, want *hostBackend", e.back)
	}
	defer e.Close()
	ctx := context.Background()
	if _, err := e.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := e.Step(ctx, "```bash\ntrue\n```\n<submit/>")
	if err != nil || !st.Done || st.Reward != 1 {
		t.Fatalf("step %+v, %v", st, err)
	}
	if got := n.Load(); got != 2 {
		t.Fatalf("%d sandboxes started through the wrapper, want 2 (agent, verifier)", got)
	}
	// A container engine as a wrapped Runner is still the host's runner:
	// only Engine selects the container backend.
	for _, o := range []Options{
		{Sandboxing: tasks.Sandboxing{Runner: wrapped, Engine: &sandbox.Container{Engine: "podman"}}},
		{Sandboxing: tasks.Sandboxing{Engine: &sandbox.Container{Engine: "docker"}}},
	} {
		if b := New(task, o).back; func() bool { _, ok := b.(*boxBackend); return !ok }() {
			t.Fatalf("Engine set: backend %T, want *boxBackend", b)
		}
	}
	if b := New(task, Options{Sandboxing: tasks.Sandboxing{Runner: countingRunner{sandbox.Container{Engine: "podman"}, &n}}}).back; func() bool { _, ok := b.(*hostBackend); return !ok }() {
		t.Fatalf("container wrapped as Runner: backend %T, want *hostBackend (the field says host)", b)
	}
}

package shelltask

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/sandbox"
)

// wrapper is a Runner that wraps another without delegating MountWorkspace.
type wrapper struct{ sandbox.Runner }

// mountingWrapper wraps another Runner and delegates MountWorkspace.
type mountingWrapper struct {
	sandbox.Runner
	sandbox.WorkspaceMounter
}

func (w mountingWrapper) Start(ctx context.Context, s sandbox.Spec) (sandbox.Session, error) {
	return w.Runner.Start(ctx, s)
}

// A workspace limit reaches the runner's MountWorkspace through a wrapper
// that delegates it, and is refused (no directory left behind) through one
// that does not; without a limit nothing is mounted.
func TestNewWorkspaceLimitNeverDropped(t *testing.T) {
	inner := &fakeRunner{}
	root := t.TempDir()

	ws, unmount, err := NewWorkspace(mountingWrapper{inner, inner}, root, "ws-", 5<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(inner.mounted) != 1 || inner.mounted[0] != 5<<20 {
		t.Fatalf("delegating wrapper: mounted %v, want [%d]", inner.mounted, 5<<20)
	}
	if err := RemoveWorkspace(ws, unmount); err != nil || inner.unmounts != 1 {
		t.Fatalf("RemoveWorkspace: %v, %d unmounts", err, inner.unmounts)
	}

	_, _, err = NewWorkspace(wrapper{inner}, root, "ws-", 5<<20)
	if err == nil || !strings.Contains(err.Error(), "not a sandbox.WorkspaceMounter") || !strings.Contains(err.Error(), "shelltask.wrapper") {
		t.Fatalf("non-delegating wrapper: err %v, want a refusal naming the runner", err)
	}
	if left, _ := os.ReadDir(root); len(left) != 0 {
		t.Fatalf("refused workspace left %d entries under root", len(left))
	}

	ws, unmount, err = NewWorkspace(wrapper{inner}, root, "ws-", 0)
	if err != nil || len(inner.mounted) != 1 {
		t.Fatalf("no limit: err %v, mounted %v", err, inner.mounted)
	}
	if err := RemoveWorkspace(ws, unmount); err != nil {
		t.Fatal(err)
	}
}

// Bubblewrap is a WorkspaceMounter, so a plain host runner keeps its limit.
var _ sandbox.WorkspaceMounter = sandbox.Bubblewrap{}

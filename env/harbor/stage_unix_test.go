//go:build unix

package harbor

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/internal/testenv"
)

// A task whose own tests/ cannot be staged (here a FIFO in it) is the
// task's fault whatever the agent did: verifier_error, never 0 charged to
// the agent (bubblewrap blamed the agent's workspace once it had run a
// command).
func TestUnstageableTestsAreTheTasks(t *testing.T) {
	testenv.MustHaveBwrap(t)
	dir := writeTask(t, map[string]string{"instruction.md": "x", "task.toml": "", "tests/test.sh": "echo 1 > /logs/verifier/reward.txt"})
	if err := syscall.Mkfifo(filepath.Join(dir, "tests", "pipe"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	task, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, reply := range []string{shelltask.SubmitReply, "```bash\ntrue\n```\n<submit/>"} {
		e := New(task, Options{})
		if _, err := e.Reset(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, err := e.Step(context.Background(), reply)
		e.Close()
		if !errors.Is(err, ErrVerifier) || !strings.Contains(err.Error(), "cannot be staged") {
			t.Fatalf("reply %q: %v (note %q); want verifier_error naming the staging", reply, err, e.RewardNote())
		}
	}
}

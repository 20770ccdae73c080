package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoSandboxOnWindows: every way to start a sandbox refuses with the
// advice to use WSL2, before it touches the disk.
func TestNoSandboxOnWindows(t *testing.T) {
	spec := Spec{Workdir: t.TempDir(), Image: "debian"}
	_, bwrapErr := Bubblewrap{}.Start(context.Background(), spec)
	_, containerErr := Container{}.Start(context.Background(), spec)
	runs := filepath.Join(t.TempDir(), "runs")
	_, _, runDirErr := NewRunDir(runs)
	if _, err := os.Stat(runs); !os.IsNotExist(err) {
		t.Errorf("NewRunDir made %s on a system where no sandbox runs (stat: %v)", runs, err)
	}
	for name, err := range map[string]error{
		"Bubblewrap.Available": Bubblewrap{}.Available(), "Bubblewrap.Start": bwrapErr,
		"Container.Start": containerErr, "NewRunDir": runDirErr,
	} {
		if err == nil || !strings.Contains(err.Error(), "WSL2") {
			t.Errorf("%s = %v; want an error naming WSL2", name, err)
		}
	}
}

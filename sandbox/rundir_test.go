//go:build unix

package sandbox

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunDirHelper is the process that TestRunDirReapedAfterKill kills: it
// makes a run directory with a tmpfs workspace in it, prints its path and
// waits.
func TestRunDirHelper(t *testing.T) {
	parent := os.Getenv("COMPACTRL_RUNDIR_HELPER")
	if parent == "" {
		t.Skip("helper process only")
	}
	rd, _, err := NewRunDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := MkdirTemp(rd.Path, "ws-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DetectConfinement().MountWorkspace(ws, 1<<20); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "file"), []byte("x"), 0o644)
	os.Stdout.WriteString("READY " + rd.Path + "\n")
	time.Sleep(time.Minute)
}

// TestRunDirReapedAfterKill: a process killed with SIGKILL leaves its run
// directory (and a tmpfs workspace mounted in it); the next NewRunDir under
// the same parent removes both, and leaves a live run's directory alone.
func TestRunDirReapedAfterKill(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "runs")
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunDirHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "COMPACTRL_RUNDIR_HELPER="+parent)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dead string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
			dead = p
			break
		}
	}
	if dead == "" {
		cmd.Process.Kill()
		t.Fatal("helper did not start")
	}
	live, _, err := NewRunDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := os.Stat(dead); err != nil {
		t.Fatalf("a live run's directory was reaped: %v", err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	next, reaped, err := NewRunDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if len(reaped) != 1 || reaped[0] != dead {
		t.Fatalf("reaped %v, want [%s]", reaped, dead)
	}
	if _, err := os.Stat(dead); err == nil {
		t.Fatalf("%s still exists", dead)
	}
	if m, _ := mountsUnder(dead); len(m) > 0 {
		t.Fatalf("mounts left: %v", m)
	}
	if _, err := os.Stat(live.Path); err != nil {
		t.Fatalf("the live run's directory is gone: %v", err)
	}
}

package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeEngine writes a docker-compatible CLI that fails `run` with msg on
// stderr (exit 125), as podman does.
func fakeEngine(t *testing.T, msg string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("shell-script engine")
	}
	p := filepath.Join(t.TempDir(), "podman")
	script := "#!/bin/sh\nif [ \"$1\" = run ]; then echo '" + msg + "' >&2; exit 125; fi\nexit 0\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// An engine whose storage driver cannot apply a storage limit fails Create
// with an error that is ErrStorageQuota and keeps the engine's own text;
// any other engine failure is not.
func TestCreateStorageQuotaIsTyped(t *testing.T) {
	const quota = "Error: --storage-opt size is only supported for backingFS xfs on overlay"
	c := Container{Engine: fakeEngine(t, quota), Runtime: "runc"}
	_, err := c.Create(context.Background(), BoxSpec{Image: "img", StorageBytes: 1 << 20})
	if !errors.Is(err, ErrStorageQuota) {
		t.Fatalf("Create = %v; want ErrStorageQuota", err)
	}
	if !strings.Contains(err.Error(), quota) || strings.Contains(err.Error(), ErrStorageQuota.Error()) {
		t.Errorf("error text %q: want the engine's message unchanged", err)
	}

	other := Container{Engine: fakeEngine(t, "Error: image not known"), Runtime: "runc"}
	_, err = other.Create(context.Background(), BoxSpec{Image: "img"})
	if err == nil || errors.Is(err, ErrStorageQuota) || !strings.Contains(err.Error(), "image not known") {
		t.Fatalf("Create = %v; want a plain engine failure", err)
	}
	if classifyCreate(nil) != nil {
		t.Error("classifyCreate(nil) != nil")
	}
}

// scriptEngine writes a podman CLI that runs script (sh) with state in dir.
func scriptEngine(t *testing.T, script string) (path, dir string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("shell-script engine")
	}
	dir = t.TempDir()
	path = filepath.Join(dir, "podman")
	if err := os.WriteFile(path, []byte("#!/bin/sh\nD="+dir+"\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, dir
}

// A removal that races the container's exit fails once in podman; Remove
// removes it on a second try, and accepts a container already gone. A
// removal that keeps failing is an error naming both failures.
func TestRemoveRetriesARacedRemoval(t *testing.T) {
	const race = `echo 'Error: cannot remove container abc as it could not be stopped: sending SIGKILL to container abc: container not running' >&2; exit 2`
	for _, c := range []struct {
		name, second string
		wantErr      bool
	}{
		{"removed on retry", "exit 0", false},
		{"gone on retry", `echo 'Error: no container with name or ID "abc" found: no such container' >&2; exit 1`, false},
		{"still failing", `echo 'Error: device busy' >&2; exit 125`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng, dir := scriptEngine(t, `n=$(cat $D/n 2>/dev/null || echo 0); echo $((n+1)) > $D/n
if [ "$n" = 0 ]; then `+race+`; fi
`+c.second+"\n")
			b := &Box{c: Container{Engine: eng, Runtime: "runc"}, id: "abc"}
			err := b.Remove()
			if (err != nil) != c.wantErr {
				t.Fatalf("Remove = %v, want error %v", err, c.wantErr)
			}
			if c.wantErr && (!strings.Contains(err.Error(), "could not be stopped") || !strings.Contains(err.Error(), "device busy")) {
				t.Errorf("error %q: want both failures named", err)
			}
			if n, _ := os.ReadFile(filepath.Join(dir, "n")); strings.TrimSpace(string(n)) != "2" {
				t.Errorf("engine called %s times, want 2", n)
			}
		})
	}
}

// A command into the container that blocks (the agent made a file the
// engine reads a FIFO, or replaced a tool with a sleeping script) ends at
// the box's exec deadline with ErrExecTimeout, the engine process killed;
// the caller's own cancellation stays its context's error.
func TestRunHasItsOwnDeadline(t *testing.T) {
	path, _ := scriptEngine(t, `case "$1" in run) echo 0123456789abcdef0123456789abcdef;; exec) exec sleep 30;; esac; exit 0`+"\n")
	c := Container{Engine: path, Runtime: "runc", ExecTimeout: 300 * time.Millisecond}
	b, err := c.Create(context.Background(), BoxSpec{Image: "img"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err = b.Run(context.Background(), ExecSpec{Cmd: []string{"test", "-x", "/bin/bash"}})
	if !errors.Is(err, ErrExecTimeout) || time.Since(start) > 10*time.Second {
		t.Fatalf("Run = %v after %v; want ErrExecTimeout at the deadline", err, time.Since(start))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	c.ExecTimeout = time.Minute
	b2, err := c.Create(context.Background(), BoxSpec{Image: "img"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err = b2.Run(ctx, ExecSpec{Cmd: []string{"true"}}); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrExecTimeout) {
		t.Fatalf("Run under the caller's deadline = %v; want the caller's context error", err)
	}
}

// BuildImage asks the engine to remove intermediate containers even when
// the build fails (docker build keeps them by default).
func TestBuildForcesRemoval(t *testing.T) {
	path, dir := scriptEngine(t, `echo "$@" >> $D/calls; case "$1" in image) exit 1;; build) exit 1;; esac; exit 0`+"\n")
	ctx := t.TempDir()
	if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte("FROM scratch\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := Container{Engine: path, Runtime: "runc"}
	if _, _, err := c.BuildImage(context.Background(), ctx, "localhost/x", 0); err == nil {
		t.Fatal("a failing build succeeded")
	}
	calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
	if !strings.Contains(string(calls), "build --force-rm ") {
		t.Fatalf("engine calls:\n%s", calls)
	}
}

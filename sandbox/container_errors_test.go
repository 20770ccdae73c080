package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
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

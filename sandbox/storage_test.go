package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/internal/testenv"
)

// What the engine's storage can enforce is decided from the engine's own
// report: the driver, its backing file system, the project-quota mount
// option of the file system holding its root.
func TestJudgeStorage(t *testing.T) {
	opts := map[string][]string{"/var/lib/docker": {"rw", "relatime", "prjquota"}, "/var/lib/containers/storage": {"rw", "noquota"}}
	get := func(dir string) []string { return opts[dir] }
	for _, c := range []struct {
		s     StorageSupport
		quota bool
		why   string
	}{
		{StorageSupport{Driver: "overlay2", BackingFS: "extfs", Root: "/var/lib/docker"}, false, "backing file system is extfs"},
		{StorageSupport{Driver: "overlay", BackingFS: "xfs", Root: "/var/lib/containers/storage"}, false, "without project quotas"},
		{StorageSupport{Driver: "overlay2", BackingFS: "xfs", Root: "/var/lib/docker"}, true, ""},
		{StorageSupport{Driver: "overlay2", BackingFS: "xfs", Root: "/elsewhere"}, true, "cannot be read here"},
		{StorageSupport{Driver: "btrfs", Root: "/var/lib/docker"}, true, ""},
		{StorageSupport{Driver: "overlay2", Root: "/var/lib/docker"}, false, "not reported"},
	} {
		q, why := judgeStorage(c.s, get)
		if q != c.quota || !strings.Contains(why, c.why) || (c.why == "") != (why == "") {
			t.Errorf("%+v: quota %v %q; want %v %q", c.s, q, why, c.quota, c.why)
		}
	}
}

// Docker Engine as most users run it (overlay2 on ext4) cannot apply
// --storage-opt size: Create says so from `docker info` before running
// anything, as ErrStorageQuota with the reason (it ran `docker run`, whose
// refusal text only podman's was recognised, and the episode was an
// infra_error).
func TestCreateAsksTheEngineForStorageQuota(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("shell-script engine")
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	engine := filepath.Join(dir, "docker")
	script := "#!/bin/sh\necho \"$1\" >> " + calls + "\n" +
		"if [ \"$1\" = info ]; then echo '{\"Driver\":\"overlay2\",\"DriverStatus\":[[\"Backing Filesystem\",\"extfs\"],[\"Supports d_type\",\"true\"]],\"DockerRootDir\":\"/var/lib/docker\"}'; exit 0; fi\n" +
		"if [ \"$1\" = run ]; then echo 0123456789abcdef0123; exit 0; fi\nexit 0\n"
	if err := os.WriteFile(engine, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := Container{Engine: engine}
	_, err := c.Create(context.Background(), BoxSpec{Image: "img", StorageBytes: 1 << 30})
	if !errors.Is(err, ErrStorageQuota) || !strings.Contains(err.Error(), "backing file system is extfs") {
		t.Fatalf("Create = %v; want ErrStorageQuota naming the backing file system", err)
	}
	b, _ := os.ReadFile(calls)
	if strings.Contains(string(b), "run") {
		t.Fatalf("the engine was asked to run the container (calls %q): the refusal must come before", b)
	}
	// Without a storage limit the container is created.
	if _, err := c.Create(context.Background(), BoxSpec{Image: "img"}); err != nil {
		t.Fatal(err)
	}
}

// The real engines here (podman; Docker Engine where dockerd runs, as CI
// starts it) report their storage, and a limit they cannot apply is
// refused up front.
func TestEngineStorageSupport(t *testing.T) {
	base := testenv.MustHavePodman(t)
	engines := []string{"podman"}
	if dockerUp() {
		engines = append(engines, "docker")
	} else if strings.Contains(os.Getenv("COMPACTRL_ENGINES"), "docker") {
		t.Fatal("COMPACTRL_ENGINES names docker but dockerd does not answer")
	}
	for _, e := range engines {
		c := Container{Engine: e}
		s, err := c.StorageSupport(context.Background())
		if err != nil || s.Driver == "" || s.Root == "" {
			t.Fatalf("%s: %+v %v", e, s, err)
		}
		t.Logf("%s: %+v", e, s)
		b, err := c.Create(context.Background(), BoxSpec{Image: base, NoTmpfs: true, StorageBytes: 64 << 20})
		switch {
		case s.Quota && err != nil:
			t.Errorf("%s reports storage quotas but refused the limit: %v", e, err)
		case !s.Quota && !errors.Is(err, ErrStorageQuota):
			t.Errorf("%s cannot apply the limit (%s) but Create = %v", e, s.Why, err)
		}
		if b != nil {
			b.Remove()
		}
	}
}

// dockerUp reports whether a Docker Engine answers here.
func dockerUp() bool {
	if _, err := exec.LookPath("docker"); err != nil {
		return false
	}
	return exec.Command("docker", "info", "--format", "{{.ServerVersion}}").Run() == nil
}

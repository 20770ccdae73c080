package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/internal/testenv"
)

// guardedTempDir is a temporary directory under a GuardedDir (1 MiB),
// closed when t ends; without the guard's kernel support t is skipped as
// unavailable.
func guardedTempDir(t *testing.T) (string, *GuardedDir) {
	t.Helper()
	if err := GuardAvailable(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	dir := t.TempDir()
	g, err := OpenGuardedDir(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return dir, g
}

// The guard sees changes, not only opens: entries created, renamed,
// replaced by symlinks, deleted and written to by a process outside the
// admitted run are violations naming the process and the path, in every
// phase; the run's own changes (its processes forked and reaped before the
// host read the events) and the host's own pass.
func TestGuardSeesChanges(t *testing.T) {
	dir, g := guardedTempDir(t)
	// The host stages (its own changes pass).
	if err := os.WriteFile(filepath.Join(dir, "test.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sh := func(script string) {
		t.Helper()
		if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", script, err, out)
		}
	}
	// Closed: another process swaps test.sh for a symlink (no open). Its
	// command name is read when the event is, best effort ("?" once the
	// process is gone); its pid is the kernel's.
	sh("ln -sf /tmp/evil.sh " + dir + "/test.sh")
	g.Sync()
	v := g.Violations()
	if got := fmt.Sprintf("%+v", v); len(v) == 0 || v[0].Phase != "closed" || v[0].PID == 0 || (v[0].Comm != "ln" && v[0].Comm != "?") || !strings.Contains(got, "Path:test.sh") || !strings.Contains(got, "Op:moved in") {
		t.Fatalf("symlink swap while closed: %s", got)
	}

	// Admitted: the run is a shell held on a pipe, whose short-lived
	// children (mkdir, mv, reaped long before the events are read) change
	// the directory; an outsider renames while it runs.
	run := exec.Command("sh", "-c", "read -r _; mkdir "+dir+"/out && echo x > "+dir+"/out/a && mv "+dir+"/out/a "+dir+"/out/b && rm -r "+dir+"/out")
	in, _ := run.StdinPipe()
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	forks, err := newForkTracker(run.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer forks.close()
	before := g.ViolationCount()
	g.Admit(func(pid int) bool { return true }, func(pid int) bool { m, _ := forks.member(pid); return m })
	io.WriteString(in, "go\n")
	in.Close()
	if err := run.Wait(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the watcher has read them by now
	if n := g.ViolationCount(); n != before {
		t.Fatalf("the admitted run's own changes were violations: %+v", g.Violations()[before:])
	}
	sh("touch " + dir + "/planted; mv " + dir + "/planted " + dir + "/reward.txt")
	g.Seal()
	if n := g.ViolationCount(); n <= before {
		t.Fatal("an outsider's changes while admitted were not seen")
	}
	got := fmt.Sprint(g.Violations()[before:])
	if !strings.Contains(got, "reward.txt") || !strings.Contains(got, "admitted") {
		t.Fatalf("violations do not name the path and phase: %s", got)
	}
	// Sealed: a write through a descriptor opened earlier by the host's
	// child (the descriptor-in-flight case: no open to refuse).
	before = g.ViolationCount()
	sh("chmod 600 " + dir + "/reward.txt")
	g.Sync()
	if v := g.Violations(); g.ViolationCount() != before+1 || v[len(v)-1].Phase != "sealed" || v[len(v)-1].Op != "changed attributes of" {
		t.Fatalf("sealed chmod: %+v", v)
	}
}

// Once the guarded command has exited, nothing of the box runs: a daemon
// the agent left (which could hold a reward-file descriptor in flight in a
// unix socket, in no process's descriptor table) is dead before the caller
// reads the guarded files.
func TestRunGuardedKillsTheBox(t *testing.T) {
	base := testenv.MustHavePodman(t)
	dir, g := guardedTempDir(t)
	ctx := context.Background()
	b, err := Container{Engine: "podman"}.Create(ctx, BoxSpec{Image: base, NoTmpfs: true, Mounts: []Mount{{Host: dir, Target: "/logs/verifier", Writable: true}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove()
	if out, code, err := b.Run(ctx, ExecSpec{Cmd: []string{"sh", "-c", "setsid sleep 1000 </dev/null >/dev/null 2>&1 &"}}); err != nil || code != 0 {
		t.Fatalf("daemon: %v %d %s", err, code, out)
	}
	r, err := b.RunGuarded(ctx, ExecSpec{Cmd: []string{"sh", "-c", "echo 1 > /logs/verifier/reward.txt"}}, time.Minute, g)
	if err != nil || r.ExitCode != 0 || !r.Guarded || r.ViolationCount != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	var alive []int
	for _, pid := range allPIDs() {
		if pidNS(pid) == b.initNS && procAlive(pid) {
			alive = append(alive, pid)
		}
	}
	if len(alive) > 0 {
		t.Fatalf("processes of the box still alive after RunGuarded: %v", alive)
	}
}

// What the host keeps of a box's output is capped: a command that prints
// 20 MB is an ErrOutputCap with the first MaxExecOutputBytes kept (it was
// all buffered), and so is a guarded run's pipe.
func TestBoxOutputCapped(t *testing.T) {
	base := testenv.MustHavePodman(t)
	ctx := context.Background()
	b, err := Container{Engine: "podman"}.Create(ctx, BoxSpec{Image: base, NoTmpfs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove()
	out, code, err := b.Run(ctx, ExecSpec{Cmd: []string{"head", "-c", "20000000", "/dev/zero"}})
	if !errors.Is(err, ErrOutputCap) || code != 0 || len(out) != MaxExecOutputBytes {
		t.Fatalf("20 MB of output: %d bytes kept, exit %d, %v; want %d and ErrOutputCap", len(out), code, err, MaxExecOutputBytes)
	}
	r, err := b.RunGuarded(ctx, ExecSpec{Cmd: []string{"head", "-c", "20000000", "/dev/zero"}}, time.Minute)
	if err != nil || r.OutputBytes != 20000000 {
		t.Fatalf("guarded: %+v %v", r, err)
	}
}

// A compose project whose run died (kill -9: no down) is removed by
// ReapContainers for that run: its services' containers and its network.
func TestReapComposeProject(t *testing.T) {
	base := testenv.MustHavePodman(t)
	c := Container{Engine: "podman"}
	ctx := context.Background()
	if _, err := c.ComposeCommand(ctx); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	dir := t.TempDir()
	task := filepath.Join(dir, "docker-compose.yaml")
	if err := os.WriteFile(task, []byte("services:\n  db:\n    image: "+base+"\n    command: [\"sleep\", \"infinity\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	owner := filepath.Join(dir, "run")
	project := "compactrl-reap-" + filepath.Base(dir)
	project = strings.ToLower(strings.NewReplacer(".", "-", "_", "-").Replace(project))
	p, b, err := c.ComposeUp(ctx, ComposeSpec{Project: project, TaskFile: task, Dir: dir, Main: BoxSpec{Image: base, Owner: owner}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Down()
	if out, code, err := b.Run(ctx, ExecSpec{Cmd: []string{"getent", "hosts", "db"}}); err != nil || code != 0 {
		t.Fatalf("db not reachable by name from main: %v %d %s", err, code, out)
	}
	// The services find each other without podman's DNS server (whose
	// listeners restart whenever any network on the host changes): with the
	// resolver pointed at an address nothing answers on, db's name is still
	// its address on the project's network, and main's is found from db.
	box := func(service string) *Box {
		out, err := exec.Command("podman", "ps", "-q", "--no-trunc", "--filter", "label=com.docker.compose.project="+project, "--filter", "label=com.docker.compose.service="+service).Output()
		if err != nil {
			t.Fatal(err)
		}
		return &Box{c: c, id: strings.TrimSpace(string(out))}
	}
	addr := func(service string) string {
		ip, err := exec.Command("podman", "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", box(service).id).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(ip))
	}
	dbBox := box("db")
	for _, lookup := range []struct {
		from *Box
		name string
	}{{b, "db"}, {dbBox, MainService}} {
		if _, code, err := lookup.from.Run(ctx, ExecSpec{User: "0", Cmd: []string{"sh", "-c", "echo nameserver 127.0.0.9 > /etc/resolv.conf"}}); err != nil || code != 0 {
			t.Fatal(err, code)
		}
		out, code, err := lookup.from.Run(ctx, ExecSpec{Cmd: []string{"getent", "ahostsv4", lookup.name}})
		if want := addr(lookup.name); err != nil || code != 0 || want == "" || !strings.HasPrefix(out, want+" ") {
			t.Errorf("%s without DNS: %q exit %d %v; want %s", lookup.name, out, code, err, want)
		}
	}
	ids, err := c.ReapContainers(ctx, []string{owner})
	if err != nil || len(ids) != 2 {
		t.Fatalf("reaped %v, %v; want main's and db's containers", ids, err)
	}
	if out, _ := exec.Command("podman", "ps", "-aq", "--filter", "label=com.docker.compose.project="+project).Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("containers left: %s", out)
	}
	if out, _ := exec.Command("podman", "network", "ls", "-q", "--filter", "label="+RunLabel+"="+owner).Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("network left: %s", out)
	}
}

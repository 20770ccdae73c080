package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/internal/testenv"
)

// needBwrap skips (locally) or fails (CI) when bubblewrap cannot run here.
func needBwrap(t *testing.T) Bubblewrap {
	t.Helper()
	b := Bubblewrap{}
	if err := b.Available(); err != nil {
		testenv.Unavailable(t, "bubblewrap not usable: %v", err)
	}
	return b
}

// tempDir is a t.TempDir the unprivileged sandbox user can reach.
func tempDir(t *testing.T) string {
	t.Helper()
	d, err := MkdirTemp(t.TempDir(), "ws")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(d), 0o711)
	os.Chmod(filepath.Dir(filepath.Dir(d)), 0o711)
	return d
}

func startSession(t *testing.T, b Bubblewrap, lim Limits) (Session, string) {
	t.Helper()
	dir := tempDir(t)
	s, err := b.Start(context.Background(), Spec{Workdir: dir, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func mustExec(t *testing.T, s Session, cmd string, timeout time.Duration) Result {
	t.Helper()
	r, err := s.Exec(context.Background(), cmd, timeout)
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return r
}

func TestPersistentShellState(t *testing.T) {
	s, dir := startSession(t, needBwrap(t), Limits{})
	r := mustExec(t, s, "pwd", 10*time.Second)
	if r.Output != "/app\n" || r.ExitCode != 0 {
		t.Fatalf("pwd = %q, code %d", r.Output, r.ExitCode)
	}
	mustExec(t, s, "mkdir -p sub/dir && cd sub/dir && export FOO='it''s' && BAR=42", 10*time.Second)
	r = mustExec(t, s, `echo "$PWD $FOO $BAR"`, 10*time.Second)
	if r.Output != "/app/sub/dir its 42\n" {
		t.Fatalf("state lost: %q", r.Output)
	}
	r = mustExec(t, s, "echo -n partial; exit_code() { return 7; }; exit_code", 10*time.Second)
	if r.Output != "partial" || r.ExitCode != 7 {
		t.Fatalf("got %q code %d, want \"partial\" code 7", r.Output, r.ExitCode)
	}
	// stdin is /dev/null: cat returns at once instead of eating the protocol.
	r = mustExec(t, s, "cat; echo after-cat", 10*time.Second)
	if r.Output != "after-cat\n" {
		t.Fatalf("cat with stdin: %q", r.Output)
	}
	// A syntax error stays inside eval.
	r = mustExec(t, s, "echo 'unterminated", 10*time.Second)
	if r.ExitCode != 2 || r.Restarted {
		t.Fatalf("syntax error: code %d restarted %v out %q", r.ExitCode, r.Restarted, r.Output)
	}
	// Quotes, newlines, heredocs and stderr all pass through.
	r = mustExec(t, s, "cat <<'EOF' > /app/f.txt\nline 'one'\n\"two\" $HOME\nEOF\ncat /app/f.txt; echo err >&2", 10*time.Second)
	if r.Output != "line 'one'\n\"two\" $HOME\nerr\n" {
		t.Fatalf("heredoc: %q", r.Output)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f.txt")); err != nil || !strings.Contains(string(b), "line 'one'") {
		t.Fatalf("file written in /app not on host: %q %v", b, err)
	}
	// `exit` kills the shell: reported, and the next command gets a fresh one.
	r = mustExec(t, s, "exit 3", 10*time.Second)
	if !r.Restarted {
		t.Fatalf("exit not reported as restart: %+v", r)
	}
	r = mustExec(t, s, `echo "[$BAR]" $PWD`, 10*time.Second)
	if r.Output != "[] /app\n" {
		t.Fatalf("after restart: %q", r.Output)
	}
}

func TestNoNetwork(t *testing.T) {
	b := needBwrap(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	s, _ := startSession(t, b, Limits{})
	r := mustExec(t, s, fmt.Sprintf("echo hi > /dev/tcp/127.0.0.1/%d && echo CONNECTED", port), 10*time.Second)
	if r.ExitCode == 0 || strings.Contains(r.Output, "CONNECTED") {
		t.Fatalf("reached the host's loopback: %+v", r)
	}
	r = mustExec(t, s, "echo hi > /dev/tcp/1.1.1.1/53 && echo CONNECTED", 10*time.Second)
	if r.ExitCode == 0 || strings.Contains(r.Output, "CONNECTED") {
		t.Fatalf("reached the internet: %+v", r)
	}
	r = mustExec(t, s, "ls /sys/class/net 2>/dev/null || cat /proc/net/dev", 10*time.Second)
	if strings.Contains(r.Output, "eth") {
		t.Fatalf("a network interface is visible: %q", r.Output)
	}
	select {
	case <-accepted:
		t.Fatal("host listener accepted a connection from the sandbox")
	case <-time.After(100 * time.Millisecond):
	}
}

func TestSharedNetworkOptIn(t *testing.T) {
	b := needBwrap(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	s, err := b.Start(context.Background(), Spec{Workdir: tempDir(t), Network: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := mustExec(t, s, fmt.Sprintf("echo hi > /dev/tcp/127.0.0.1/%d && echo CONNECTED", ln.Addr().(*net.TCPAddr).Port), 10*time.Second)
	if !strings.Contains(r.Output, "CONNECTED") {
		t.Fatalf("Network: true did not reach the host: %+v", r)
	}
}

func TestCannotWriteOutside(t *testing.T) {
	b := needBwrap(t)
	outside := tempDir(t)
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, dir := startSession(t, b, Limits{})
	for _, cmd := range []string{
		"touch /usr/evil", "touch /etc/evil", "touch /evil", "mkdir /root/evil",
		"cat " + secret, "touch " + filepath.Join(outside, "evil"), "echo x > /proc/sys/kernel/hostname",
		// a hard link to a system file would let the host's chown of the workspace reach it
		"ln /usr/bin/env /app/hardlink",
	} {
		r := mustExec(t, s, cmd, 10*time.Second)
		if r.ExitCode == 0 {
			t.Errorf("%q succeeded inside the sandbox: %q", cmd, r.Output)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "evil")); err == nil {
		t.Fatal("sandbox wrote into a host directory outside /app")
	}
	for _, p := range []string{"/usr/evil", "/etc/evil", "/evil"} {
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Fatalf("sandbox wrote %s on the host", p)
		}
	}
	r := mustExec(t, s, "echo ok > /app/ok && echo tmp > /tmp/t && cat /tmp/t && id -u", 10*time.Second)
	if r.ExitCode != 0 || !strings.HasPrefix(r.Output, "tmp\n") {
		t.Fatalf("writable places failed: %+v", r)
	}
	if os.Geteuid() == 0 && strings.TrimSpace(strings.TrimPrefix(r.Output, "tmp\n")) == "0" {
		t.Fatal("sandbox runs as uid 0")
	}
	if _, err := os.Stat(filepath.Join(dir, "ok")); err != nil {
		t.Fatalf("write to /app did not reach the workspace: %v", err)
	}
}

// processesOf counts live host processes whose command line contains tag.
func processesOf(tag string) int { return countProcs("cmdline", tag) }

// countProcs counts live host processes whose /proc/PID/file contains sub.
func countProcs(file, sub string) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), file))
		if err == nil && strings.Contains(string(b), sub) {
			n++
		}
	}
	return n
}

func waitGone(t *testing.T, tag string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for processesOf(tag) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes tagged %q outlived the sandbox", processesOf(tag), tag)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestTimeoutKillsEverything(t *testing.T) {
	s, _ := startSession(t, needBwrap(t), Limits{})
	mustExec(t, s, "X=1; cd /tmp", 10*time.Second)
	seen := make(chan bool, 1)
	go func() { // the processes the timeout must kill did exist
		for deadline := time.Now().Add(900 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if processesOf("313.25") > 0 && processesOf("313.5") > 0 {
				seen <- true
				return
			}
		}
		seen <- false
	}()
	begin := time.Now()
	r := mustExec(t, s, "sleep 313.25 & sleep 313.5; echo never", time.Second)
	if !<-seen {
		t.Fatal("the command's processes were never seen running")
	}
	if el := time.Since(begin); el > 5*time.Second {
		t.Fatalf("timeout took %v", el)
	}
	if !r.TimedOut || !r.Restarted || r.ExitCode != -1 || strings.Contains(r.Output, "never") {
		t.Fatalf("not reported as a timeout: %+v", r)
	}
	waitGone(t, "313.25")
	waitGone(t, "313.5")
	r = mustExec(t, s, `echo "[$X]" $PWD`, 10*time.Second)
	if r.Output != "[] /app\n" {
		t.Fatalf("after timeout: %q", r.Output)
	}
	// Close kills background processes too.
	mustExec(t, s, "sleep 313.75 &", 10*time.Second)
	for deadline := time.Now().Add(3 * time.Second); processesOf("313.75") == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("background process did not start")
		}
	}
	s.Close()
	waitGone(t, "313.75")
	if _, err := s.Exec(context.Background(), "true", time.Second); err == nil {
		t.Fatal("exec after Close succeeded")
	}
}

func TestContextCancel(t *testing.T) {
	s, _ := startSession(t, needBwrap(t), Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := s.Exec(ctx, "sleep 314.5", 0); err == nil {
		t.Fatal("cancelled exec returned no error")
	}
	waitGone(t, "314.5")
}

func TestForkBombContained(t *testing.T) {
	b := needBwrap(t)
	b.UID, b.GID = 64999, 64999 // its own uid, so the count below sees only this test
	s, _ := startSession(t, b, Limits{Processes: 64, MemoryBytes: 256 << 20})
	// Hard bounds: at most 64 processes, 5 s, then the sandbox is killed.
	r := mustExec(t, s, "bomb() { bomb | bomb & }; bomb; sleep 1; echo survived", 5*time.Second)
	n := countUID(64999)
	if n > 64+8 {
		t.Fatalf("%d processes under the sandbox uid, limit 64", n)
	}
	if !r.TimedOut && !strings.Contains(r.Output, "Resource temporarily unavailable") {
		t.Fatalf("fork bomb neither hit the limit nor timed out: %+v", r)
	}
	s.Close()
	deadline := time.Now().Add(5 * time.Second)
	for countUID(64999) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d fork-bomb processes outlived Close", countUID(64999))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countUID counts host processes with real uid u (0 when not root: the
// sandbox then runs as the caller and the count is skipped).
func countUID(u int) int {
	if os.Geteuid() != 0 {
		return 0
	}
	return countProcs("status", fmt.Sprintf("Uid:\t%d\t", u))
}

func TestMemoryHogContained(t *testing.T) {
	s, _ := startSession(t, needBwrap(t), Limits{MemoryBytes: 256 << 20})
	r := mustExec(t, s, `python3 -c 'x = bytearray(1 << 30); print("allocated")'`, 20*time.Second)
	if r.ExitCode == 0 || strings.Contains(r.Output, "allocated") || !strings.Contains(r.Output, "MemoryError") {
		t.Fatalf("1 GiB allocation under a 256 MiB limit: %+v", r)
	}
	r = mustExec(t, s, "ulimit -v unlimited", 5*time.Second)
	if r.ExitCode == 0 {
		t.Fatal("sandboxed code raised its own memory limit")
	}
}

func TestOutputCapped(t *testing.T) {
	s, _ := startSession(t, needBwrap(t), Limits{OutputBytes: 1000})
	r := mustExec(t, s, "echo START; head -c 200000 /dev/zero | tr '\\0' a; echo; echo END", 20*time.Second)
	if !r.Truncated || !strings.HasPrefix(r.Output, "START\naaa") || !strings.HasSuffix(r.Output, "a\nEND\n") {
		t.Fatalf("bad capped output (%d bytes): %.80q ... truncated=%v", len(r.Output), r.Output, r.Truncated)
	}
	if !strings.Contains(r.Output, "bytes omitted") || len(r.Output) > 1100 {
		t.Fatalf("cap not applied: %d bytes", len(r.Output))
	}
	omitted := 200000 + 6 + 1 + 4 - 1000
	if !strings.Contains(r.Output, fmt.Sprintf("[... %d bytes omitted ...]", omitted)) {
		t.Fatalf("omitted count wrong, want %d: %q", omitted, r.Output[490:560])
	}
}

func TestCapture(t *testing.T) {
	c := newCapture(8)
	c.write([]byte("abc"))
	c.write([]byte("defg"))
	if s, cut := c.String(); s != "abcdefg" || cut {
		t.Fatalf("%q %v", s, cut)
	}
	c.write([]byte("hijklmnop")) // 16 bytes: head "abcd", tail "mnop", 8 omitted
	if s, cut := c.String(); s != "abcd\n[... 8 bytes omitted ...]\nmnop" || !cut {
		t.Fatalf("%q %v", s, cut)
	}
	// Cuts never split a rune: "é" is 2 bytes.
	c = newCapture(6)
	c.write([]byte("aaéxxxxxxxxéb"))
	s, _ := c.String()
	if !strings.HasPrefix(s, "aa\n") || !strings.HasSuffix(s, "\néb") {
		t.Fatalf("rune split: %q", s)
	}
}

func TestUnreachableWorkdirRejected(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root drops to another uid")
	}
	b := needBwrap(t)
	private := filepath.Join(t.TempDir(), "private")
	os.Mkdir(private, 0o700)
	ws := filepath.Join(private, "ws")
	os.Mkdir(ws, 0o755)
	if _, err := b.Start(context.Background(), Spec{Workdir: ws}); err == nil || !strings.Contains(err.Error(), "not searchable") {
		t.Fatalf("workspace under a 0700 directory: err = %v", err)
	}
}

func TestBwrapArgs(t *testing.T) {
	spec := Spec{
		Workdir: "/w/app",
		Mounts:  []Mount{{Host: "/w/tests", Target: "/tests"}, {Host: "/w/logs", Target: "/logs/verifier", Writable: true}},
		Env:     map[string]string{"A": "1"},
		Limits:  Limits{MemoryBytes: 1 << 30, Processes: 100, FileSizeBytes: 1 << 20},
	}
	a := strings.Join(bwrapArgs(spec, []string{"/opt/x"}, map[string]string{"/bin": "usr/bin", "/lib64": ""}), " ")
	for _, want := range []string{
		"--unshare-all --die-with-parent --new-session",
		"--ro-bind /usr /usr --symlink usr/bin /bin --ro-bind /lib64 /lib64 --ro-bind /etc /etc --ro-bind /opt/x /opt/x",
		"--bind /w/app /app --ro-bind /w/tests /tests --bind /w/logs /logs/verifier --remount-ro / --chdir /app --clearenv",
		"--setenv A 1 ",
		"ulimit -v 1048576 && ulimit -u 100 && ulimit -f 1024 || exit 97; exec /bin/bash --noprofile --norc",
	} {
		if !strings.Contains(a, want) {
			t.Errorf("bwrap args lack %q:\n%s", want, a)
		}
	}
}

func TestContainerArgs(t *testing.T) {
	c := Container{Engine: "podman", Runtime: "runc"}
	if _, err := c.boxSpec(Spec{Workdir: "/w"}); err == nil {
		t.Fatal("no image accepted")
	}
	bs, err := c.boxSpec(Spec{
		Workdir: "/w/app", Image: "debian:12",
		Mounts: []Mount{{Host: "/w/tests", Target: "/tests"}},
		Env:    map[string]string{"A": "1"},
		Limits: Limits{MemoryBytes: 1 << 30, Processes: 100, CPUs: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.createArgs(bs)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(a, " ")
	nofile, nproc := hostHardLimits()
	for _, want := range []string{
		"run -d --network none --runtime runc",
		fmt.Sprintf("--ulimit nofile=%d:%d --ulimit nproc=%d:%d", nofile, nofile, nproc, nproc),
		"--memory 1073741824 --pids-limit 100",
		"--cpus 2 -w /app -v /w/app:/app -v /w/tests:/tests:ro",
		"-e A=1 ",
		" debian:12 sh -c sleep infinity",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("run args lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "PATH=") {
		t.Error("container run overrides the image's PATH")
	}
	b := &Box{c: c, id: "abc"}
	if got := strings.Join(b.execArgs(ExecSpec{Workdir: "/app", User: "agent", Env: map[string]string{"X": "y"}, Cmd: []string{"bash"}}, true), " "); got != "exec -i -u agent -w /app -e X=y abc bash" {
		t.Errorf("exec args: %s", got)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{"": "''", "a b": "'a b'", "it's": `'it'\''s'`} {
		t.Run(strconv.Quote(in), func(t *testing.T) {
			if got := ShellQuote(in); got != want {
				t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
			}
		})
	}
}

func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, []byte("hello"), 0o644)
	if b, err := ReadRegular(file, 5); err != nil || string(b) != "hello" {
		t.Fatalf("regular file: %q %v", b, err)
	}
	if _, err := ReadRegular(file, 4); err == nil {
		t.Fatal("file over the limit read")
	}
	link := filepath.Join(dir, "l")
	os.Symlink(file, link)
	if _, err := ReadRegular(link, 100); err == nil {
		t.Fatal("symlink followed")
	}
	fifo := filepath.Join(dir, "p")
	if !mkfifo(t, fifo) {
		return // no FIFOs on this system
	}
	done := make(chan error, 1)
	go func() { _, err := ReadRegular(fifo, 100); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("FIFO read as a file")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadRegular blocked on a FIFO")
	}
}

// benchWorkdir skips b without a usable bubblewrap, else returns a
// workspace removed when b ends.
func benchWorkdir(b *testing.B) string {
	if (Bubblewrap{}).Available() != nil {
		b.Skip("bubblewrap not usable")
	}
	dir, err := MkdirTemp("", "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// BenchmarkStart measures starting a bubblewrap session and running one
// command in it (what an episode's Reset and a verifier cost).
func BenchmarkStart(b *testing.B) {
	dir := benchWorkdir(b)
	for b.Loop() {
		s, err := Bubblewrap{}.Start(context.Background(), Spec{Workdir: dir})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Exec(context.Background(), "true", 10*time.Second); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkExec measures one command's round trip in a running session.
func BenchmarkExec(b *testing.B) {
	dir := benchWorkdir(b)
	s, err := Bubblewrap{}.Start(context.Background(), Spec{Workdir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		if _, err := s.Exec(context.Background(), "echo hi", 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// The FROM images of a Dockerfile, as BuildImage adds them to its cache key.
func TestDockerfileFroms(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Dockerfile")
	os.WriteFile(p, []byte("ARG X=1\nFROM --platform=linux/amd64 golang:1.24 AS build\nRUN go build\nfrom build AS test\nFROM localhost/base:1\nCOPY --from=build /x /x\nFROM scratch\n"), 0o644)
	got := strings.Join(dockerfileFroms(p), " ")
	if got != "golang:1.24 localhost/base:1" {
		t.Fatalf("froms %q", got)
	}
}

// A base image rebuilt under the same name changes the cache key: the task
// image is built again instead of reused with the old base.
func TestBuildImageKeyFollowsBaseImage(t *testing.T) {
	base := testenv.MustHavePodman(t)
	c := Container{Engine: "podman"}
	ctx := context.Background()
	tag := "localhost/compactrl-test-base:key"
	build := func(marker string) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+base+"\nRUN echo "+marker+" > /marker\n"), 0o644)
		if out, err := exec.Command("podman", "build", "--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "-t", tag, dir).CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", tag).Run() })
	ctxDir := t.TempDir()
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte("FROM "+tag+"\n"), 0o644)
	build("one")
	ref1, _, err := c.BuildImage(ctx, ctxDir, "localhost/compactrl-test-task", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", ref1).Run() })
	if _, cached, _ := c.BuildImage(ctx, ctxDir, "localhost/compactrl-test-task", time.Minute); !cached {
		t.Fatal("an unchanged context and base were built again")
	}
	build("two")
	ref2, cached, err := c.BuildImage(ctx, ctxDir, "localhost/compactrl-test-task", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", ref2).Run() })
	if cached || ref2 == ref1 {
		t.Fatalf("base image changed, but the task image %s was reused (cached %v)", ref2, cached)
	}
}

// A container labelled with a run directory is removed by ReapContainers
// for that directory, and only for it.
func TestReapContainers(t *testing.T) {
	base := testenv.MustHavePodman(t)
	c := Container{Engine: "podman"}
	ctx := context.Background()
	dead, alive := filepath.Join(t.TempDir(), "run-dead"), filepath.Join(t.TempDir(), "run-alive")
	var boxes []*Box
	for _, owner := range []string{dead, alive} {
		b, err := c.Create(ctx, BoxSpec{Image: base, NoTmpfs: true, Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		boxes = append(boxes, b)
		t.Cleanup(func() { b.Remove() })
	}
	ids, err := c.ReapContainers(ctx, []string{dead})
	if err != nil || len(ids) != 1 || !strings.HasPrefix(boxes[0].ID(), ids[0]) && ids[0] != boxes[0].ID() {
		t.Fatalf("reaped %v, %v; want the dead run's %s", ids, err, boxes[0].ID())
	}
	if c.ContainerExists(ctx, boxes[0].ID()) || !c.ContainerExists(ctx, boxes[1].ID()) {
		t.Fatal("the wrong containers are gone")
	}
}

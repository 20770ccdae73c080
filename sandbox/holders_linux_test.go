package sandbox

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// holderEnv makes this test binary, run as a child, open the named file,
// say "ready" and wait for its stdin to close (TestHoldersSkipsOwnFork).
const holderEnv = "COMPACTRL_TEST_HOLD_FILE"

func TestMain(m *testing.M) {
	if path := os.Getenv(holderEnv); path != "" {
		f, err := os.Open(path)
		if err != nil {
			os.Exit(3)
		}
		defer f.Close()
		os.Stdout.WriteString("ready\n")
		bufio.NewReader(os.Stdin).ReadString('\n')
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestHoldersSkipsOwnFork: a process that keeps a guarded file open is a
// holder; a child of this process that still runs this process's
// executable (as a child does between fork and exec, with copies of the
// host's descriptors) is not, even holding the same file.
func TestHoldersSkipsOwnFork(t *testing.T) {
	dir, g := guardedTempDir(t)
	file := filepath.Join(dir, "reward.txt")
	if err := os.WriteFile(file, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g.Admit(func(int) bool { return true }, nil)

	own := exec.Command(os.Args[0], "-test.run=^$")
	own.Env = append(os.Environ(), holderEnv+"="+file)
	ownIn, err := own.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	ownOut, err := own.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { ownIn.Close(); own.Wait() }()
	if line, _ := bufio.NewReader(ownOut).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the re-executed test binary did not open %s: %q", file, line)
	}

	other := exec.Command("sh", "-c", "exec sleep 60 < "+file)
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()

	want := strconv.Itoa(other.Process.Pid) + " (sleep)"
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = g.Holders(); slices.Contains(got, want) {
			break
		}
	}
	if !slices.Contains(got, want) {
		t.Fatalf("holders %q, want %q among them", got, want)
	}
	ownPID := strconv.Itoa(own.Process.Pid) + " "
	for _, h := range got {
		if strings.HasPrefix(h, ownPID) {
			t.Fatalf("holders %q name this process's own child %d, which runs this executable", got, own.Process.Pid)
		}
	}
	if !ownForkBeforeExec(own.Process.Pid, os.Getpid(), mustReadlink(t, "/proc/self/exe")) || ownForkBeforeExec(other.Process.Pid, os.Getpid(), mustReadlink(t, "/proc/self/exe")) {
		t.Fatalf("ownForkBeforeExec: the test binary's child %d and sleep %d misjudged", own.Process.Pid, other.Process.Pid)
	}
}

func mustReadlink(t *testing.T, p string) string {
	t.Helper()
	s, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process StartGroup started dies with the process that started it,
// even when that one exits without running its cleanups (as a test binary
// does when go test's timeout panics).
func TestStartGroupChildDiesWithParent(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		cmd := exec.Command("sleep", "60")
		if err := StartGroup(cmd); err != nil {
			fmt.Println("start:", err)
			os.Exit(2)
		}
		fmt.Println(cmd.Process.Pid)
		os.Exit(0) // no KillGroup, no cleanup
	}
	child := exec.Command(os.Args[0], "-test.run=^TestStartGroupChildDiesWithParent$")
	child.Env = append(os.Environ(), "TESTENV_CHILD=1")
	out, err := child.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v %s", err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.Split(string(out), "\n")[0]))
	if err != nil {
		t.Fatalf("child printed %q", out)
	}
	for deadline := time.Now().Add(Deadline(t, 5*time.Second)); ; time.Sleep(20 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return // gone
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(b), ") Z ") {
			return // dead, waiting to be reaped by init
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("sleep (pid %d) outlived the process that started it", pid)
		}
	}
}

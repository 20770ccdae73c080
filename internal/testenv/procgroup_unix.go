//go:build unix

package testenv

import (
	"os/exec"
	"syscall"
)

// StartGroup starts cmd as the leader of a new process group, so that
// KillGroup reaches what it forks too (llama.cpp's run wrapper and the
// server it starts). On Linux it also gets SIGKILL as its parent-death
// signal (groupAttr): a test binary that dies without its cleanups (go
// test's timeout panics) no longer leaves a llama-server running.
func StartGroup(cmd *exec.Cmd) error {
	cmd.SysProcAttr = groupAttr()
	return cmd.Start()
}

// KillGroup SIGKILLs the process group StartGroup made and waits for cmd.
func KillGroup(cmd *exec.Cmd) {
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
}

//go:build unix && !linux

package testenv

import (
	"os/exec"
	"syscall"
)

// StartGroup starts cmd as the leader of a new process group, so that
// KillGroup reaches what it forks too (llama.cpp's run wrapper and the
// server it starts).
func StartGroup(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd.Start()
}

// KillGroup SIGKILLs the process group StartGroup made and waits for cmd.
func KillGroup(cmd *exec.Cmd) {
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
}

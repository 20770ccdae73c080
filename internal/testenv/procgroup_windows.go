package testenv

import "os/exec"

// StartGroup starts cmd. Windows has no process groups to signal: KillGroup
// kills cmd alone.
func StartGroup(cmd *exec.Cmd) error { return cmd.Start() }

// KillGroup kills cmd and waits for it.
func KillGroup(cmd *exec.Cmd) {
	cmd.Process.Kill()
	cmd.Wait()
}

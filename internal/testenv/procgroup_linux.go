package testenv

import "syscall"

// groupAttr: a new process group, and SIGKILL as the parent-death signal.
// llama.cpp's run wrapper execs the server, which keeps the signal.
func groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

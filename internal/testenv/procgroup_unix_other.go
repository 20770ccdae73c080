//go:build unix && !linux

package testenv

import "syscall"

// groupAttr: a new process group (these systems have no parent-death
// signal).
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

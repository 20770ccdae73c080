package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"syscall"
)

// No sandbox starts on Windows: Bubblewrap.Start, Container.Start and
// NewRunDir return sandboxSupported's error (run compactrl inside WSL2).
// The rest of this file only has to compile; nothing in it runs a
// sandboxed process.

func sandboxSupported() error { return noSandboxError(runtime.GOOS, runtime.GOARCH) }

func bwrapSupported() error { return sandboxSupported() }

func bwrapProcAttr(*sandboxUser) *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

func groupProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}

func useCgroupFD(attr *syscall.SysProcAttr, fd int) {}

func mountTmpfs(dir, opts string) error { return sandboxSupported() }

// unmountDetach: this package mounts nothing on Windows.
func unmountDetach(dir string) error { return nil }

// mountInfoRequired: without /proc there are no mounts of ours to list.
const mountInfoRequired = false

// killPID kills pid (or −pid: Windows has no process groups to signal).
func killPID(pid int) {
	if p, err := os.FindProcess(max(pid, -pid)); err == nil {
		p.Kill()
		p.Release()
	}
}

func fileUID(fs.FileInfo) (uid int, ok bool) { return 0, false }

func lockExclusive(*os.File) error { return sandboxSupported() }

// openNoFollow opens path for reading unless it is a symlink. Lstat then
// Open is not atomic, which matters only where sandboxed code writes
// beside the caller, and no sandbox runs on Windows.
func openNoFollow(path string) (*os.File, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s is a symlink", path)
	}
	return os.Open(path)
}

//go:build unix && !linux

package sandbox

import (
	"errors"
	"runtime"
	"syscall"
)

func bwrapSupported() error { return noBwrapError(runtime.GOOS, runtime.GOARCH) }

// bwrapProcAttr: bwrap never starts off Linux (bwrapSupported); a process
// group is all that is portable.
func bwrapProcAttr(u *sandboxUser) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: u.credential()}
}

func useCgroupFD(attr *syscall.SysProcAttr, fd int) {}

// Confinement never detects cgroups off Linux, so no tmpfs is mounted.
func mountTmpfs(dir, opts string) error {
	return errors.New("sandbox: workspace tmpfs needs Linux")
}

// unmountDetach: nothing is mounted by this package off Linux.
func unmountDetach(dir string) error { return syscall.Unmount(dir, 0) }

// mountInfoRequired: without /proc there are no mounts of ours to list.
const mountInfoRequired = false

//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
)

// errNoBwrap is what Bubblewrap says off Linux.
var errNoBwrap = fmt.Errorf("sandbox: bubblewrap needs Linux (namespaces, cgroups); this is %s/%s: run shell tasks with --runner docker or --runner podman (sandbox.Container), or on a Linux machine; the vault suite, train, rollout and bench need no sandbox", runtime.GOOS, runtime.GOARCH)

func bwrapSupported() error { return errNoBwrap }

// bwrapProcAttr: bwrap never starts off Linux (bwrapSupported); a process
// group is all that is portable.
func bwrapProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
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

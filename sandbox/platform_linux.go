package sandbox

import "syscall"

// bwrapSupported reports whether Bubblewrap can run on this system: bwrap
// and the namespaces it uses are Linux's.
func bwrapSupported() error { return nil }

// bwrapProcAttr is bwrap's process attributes: its own process group, and
// SIGKILL when this process dies (so a crashed evaluator leaves no sandbox).
func bwrapProcAttr(u *sandboxUser) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: u.credential()}
}

// useCgroupFD makes the child start inside the cgroup open as fd (clone3
// CLONE_INTO_CGROUP).
func useCgroupFD(attr *syscall.SysProcAttr, fd int) {
	attr.UseCgroupFD, attr.CgroupFD = true, fd
}

// mountTmpfs mounts a tmpfs with options opts over dir.
func mountTmpfs(dir, opts string) error {
	return syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts)
}

// unmountDetach lazily unmounts dir.
func unmountDetach(dir string) error { return syscall.Unmount(dir, syscall.MNT_DETACH) }

// mountInfoRequired: /proc/self/mountinfo must be readable to list the
// mounts under a run directory.
const mountInfoRequired = true

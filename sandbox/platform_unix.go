//go:build unix

package sandbox

import (
	"io/fs"
	"os"
	"syscall"
)

// sandboxSupported: every Unix system can start a container engine's
// sandbox (and Linux a bubblewrap one: bwrapSupported).
func sandboxSupported() error { return nil }

// credential is u as a process credential with no supplementary groups;
// nil (run as the caller) for a nil u.
func (u *sandboxUser) credential() *syscall.Credential {
	if u == nil {
		return nil
	}
	return &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: []uint32{}}
}

// groupProcAttr starts a process as the leader of its own process group,
// so that killPID(-pid) reaches everything it forks.
func groupProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killPID sends SIGKILL to pid, or to the process group −pid when pid is
// negative (kill(2)).
func killPID(pid int) { syscall.Kill(pid, syscall.SIGKILL) }

// fileUID is the owner of fi, when the system says.
func fileUID(fi fs.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// lockExclusive takes an exclusive flock on f without waiting; the kernel
// drops it when the process dies.
func lockExclusive(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

// openNoFollow opens path for reading, failing on a symlink (O_NOFOLLOW)
// and without blocking on a FIFO (O_NONBLOCK).
func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}

package sandbox

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// hostHardLimits are the nofile and nproc limits a container may ask for:
// at most 20000 and 4096, never above this process's own hard limits.
func hostHardLimits() (nofile, nproc uint64) {
	nofile, nproc = 20000, 4096
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) == nil && r.Max < nofile {
		nofile = r.Max
	}
	if syscall.Getrlimit(rlimitNproc, &r) == nil && r.Max < nproc {
		nproc = r.Max
	}
	return nofile, nproc
}

const rlimitNproc = 6 // RLIMIT_NPROC on Linux

// execLeaders are the processes of the box started by `ENGINE exec`: in the
// container's pid namespace, with a parent outside it (an orphan inside is
// re-parented to the container's init, never outside).
func (b *Box) execLeaders() map[int]bool {
	if b.initPID == 0 {
		return nil
	}
	ns := pidNS(b.initPID)
	if ns == "" {
		return nil
	}
	out := map[int]bool{}
	for _, pid := range allPIDs() {
		if pid == b.initPID || pidNS(pid) != ns {
			continue
		}
		ppid, _, ok := procStat(pid)
		if ok && pidNS(ppid) != ns {
			out[pid] = true
		}
	}
	return out
}

// newLeader waits up to 10 s for one exec leader that is not in before,
// leads its own session and runs comm, and returns its host pid (0 when
// none appeared). The runtime's own short-lived setup processes (runc
// init) pass through the container's namespace first.
func (b *Box) newLeader(before map[int]bool, comm string) int {
	if b.initPID == 0 {
		return 0
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for pid := range b.execLeaders() {
			if before[pid] {
				continue
			}
			if _, sid, ok := procStat(pid); ok && sid == pid && procComm(pid) == comm {
				return pid
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return 0
}

// sessionMembers are the host pids of the live processes (some thread not
// a zombie) whose session is sid.
func sessionMembers(sid int) []int {
	var out []int
	for _, pid := range allPIDs() {
		if _, s, ok := procStat(pid); ok && s == sid && procAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// killSession SIGKILLs every process of session sid until none is left (at
// most 10 s: a session that keeps forking faster than it dies is an error).
func (b *Box) killSession(sid int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		members := sessionMembers(sid)
		if len(members) == 0 {
			return nil
		}
		for _, pid := range members {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox: session %d in container %s still has %d processes after 10 s of SIGKILL", sid, b.id, len(members))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// killAll SIGKILLs the container's init from the host, so that the kernel
// kills every process of its pid namespace, and waits (at most 10 s) until
// none is left. Where the host cannot see the container's processes it
// asks the engine.
func (b *Box) killAll() error {
	if b.initPID == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := b.c.run(ctx, "kill", "--signal", "KILL", b.id); err != nil {
			return fmt.Errorf("sandbox: kill container %s: %w", b.id, err)
		}
		return nil
	}
	ns := b.initNS
	if ns == "" || pidNS(b.initPID) != ns {
		return nil // already gone
	}
	syscall.Kill(b.initPID, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		for _, pid := range allPIDs() {
			if pidNS(pid) == ns && procAlive(pid) {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox: container %s still has %d processes 10 s after its init was killed", b.id, left)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

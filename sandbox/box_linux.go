package sandbox

import (
	"bytes"
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

// procView is what the leader scan reads of /proc (a fake in tests).
type procView interface {
	pids() []int
	ns(pid int) string                     // pid namespace ("" when gone)
	stat(pid int) (ppid, sid int, ok bool) // ok false when gone
	comm(pid int) string
	environ(pid int) []byte
}

type liveProc struct{}

func (liveProc) pids() []int                           { return allPIDs() }
func (liveProc) ns(pid int) string                     { return pidNS(pid) }
func (liveProc) stat(pid int) (ppid, sid int, ok bool) { return procStat(pid) }
func (liveProc) comm(pid int) string                   { return procComm(pid) }
func (liveProc) environ(pid int) []byte                { return procEnviron(pid) }

// execLeaders are the processes of the box started by `ENGINE exec`: in the
// container's pid namespace, with a live parent in another (an orphan
// inside is re-parented to the container's init, never outside).
func (b *Box) execLeaders() map[int]bool { return execLeadersIn(liveProc{}, b.initPID) }

// execLeadersIn is execLeaders over v. A parent counts as outside only when
// its namespace can be read and differs, and the child still has that
// parent after the read: a parent gone mid-scan (its namespace reads as "")
// is never taken for one outside the container, which would let a process
// of the container whose parents die pose as an exec leader.
func execLeadersIn(v procView, initPID int) map[int]bool {
	if initPID == 0 {
		return nil
	}
	ns := v.ns(initPID)
	if ns == "" {
		return nil
	}
	out := map[int]bool{}
	for _, pid := range v.pids() {
		if pid == initPID || v.ns(pid) != ns {
			continue
		}
		ppid, _, ok := v.stat(pid)
		if !ok {
			continue
		}
		pns := v.ns(ppid)
		if pns == "" || pns == ns {
			continue
		}
		if again, _, ok := v.stat(pid); !ok || again != ppid {
			continue // re-parented while its parent was read
		}
		out[pid] = true
	}
	return out
}

// newLeader waits up to 10 s for one exec leader that is not in before,
// leads its own session, runs comm and carries token in its environment
// (ExecTokenEnv=token, set by the host on the exec it started: only the
// host knows it), and returns its host pid (0 when none appeared). The
// runtime's own short-lived setup processes (runc init) pass through the
// container's namespace first.
func (b *Box) newLeader(before map[int]bool, comm, token string) int {
	if b.initPID == 0 {
		return 0
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if pid := findLeader(liveProc{}, b.initPID, before, comm, token); pid != 0 {
			return pid
		}
		time.Sleep(2 * time.Millisecond)
	}
	return 0
}

// findLeader is one scan of newLeader over v.
func findLeader(v procView, initPID int, before map[int]bool, comm, token string) int {
	for pid := range execLeadersIn(v, initPID) {
		if before[pid] {
			continue
		}
		if _, sid, ok := v.stat(pid); ok && sid == pid && v.comm(pid) == comm && hasToken(v.environ(pid), token) {
			return pid
		}
	}
	return 0
}

// hasToken reports whether environ (NUL-separated) holds
// ExecTokenEnv=token; an empty token is not checked.
func hasToken(environ []byte, token string) bool {
	if token == "" {
		return true
	}
	want := []byte(ExecTokenEnv + "=" + token)
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if bytes.Equal(kv, want) {
			return true
		}
	}
	return false
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

package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// forkTracker follows, from the kernel's process events (the netlink proc
// connector), which processes descend from one exec process W: the set of
// processes the verifier's run started, including those that have since
// exited and been reaped. A change to a guarded directory is reported
// asynchronously (fanotify notification events carry only a pid), so by
// the time the host reads it the process that made it may be gone from
// /proc; its fork event, queued when it was forked and so before anything
// it did, says whose it was.
//
// A pid counts as W's when it was forked by a process that counted as W's
// (W itself to begin with); a later fork of the same pid by anyone else
// (reuse) takes that back. Processes that left W's session (setsid) still
// count: they are the verifier's run's own code.
type forkTracker struct {
	mu      sync.Mutex
	fd      int
	members map[int]bool
	lost    bool // the socket overflowed: some fork events were lost
	closed  bool
	buf     []byte
}

// Proc connector constants (linux/connector.h, linux/cn_proc.h).
const (
	cnIdxProc            = 1
	cnValProc            = 1
	procCnMcastListen    = 1
	procCnMcastIgnore    = 2
	procEventFork        = 0x1
	cnMsgLen             = 20 // struct cn_msg without data
	procEventHeaderBytes = 16 // what, cpu, timestamp_ns
)

// newForkTracker subscribes to process events and starts with leader as
// the run's only process. It fails where the proc connector is missing
// (CONFIG_PROC_EVENTS) or not permitted (not root in the initial network
// namespace).
func newForkTracker(leader int) (*forkTracker, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("proc connector socket: %w", err)
	}
	// A large receive buffer: forks host-wide arrive here between drains.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("proc connector bind: %w", err)
	}
	t := &forkTracker{fd: fd, members: map[int]bool{leader: true}}
	if err := t.send(procCnMcastListen); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("proc connector listen: %w", err)
	}
	return t, nil
}

func (t *forkTracker) send(op uint32) error {
	msg := make([]byte, unix.NLMSG_HDRLEN+cnMsgLen+4)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.NLMSG_DONE)
	binary.NativeEndian.PutUint32(msg[12:], uint32(unix.Getpid()))
	cn := msg[unix.NLMSG_HDRLEN:]
	binary.NativeEndian.PutUint32(cn[0:], cnIdxProc)
	binary.NativeEndian.PutUint32(cn[4:], cnValProc)
	binary.NativeEndian.PutUint16(cn[16:], 4)
	binary.NativeEndian.PutUint32(cn[cnMsgLen:], op)
	return unix.Sendto(t.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// drain reads every queued process event. Callers hold t.mu.
func (t *forkTracker) drain() {
	if t.closed {
		return
	}
	if t.buf == nil {
		t.buf = make([]byte, 64<<10)
	}
	buf := t.buf
	for {
		n, _, err := unix.Recvfrom(t.fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ENOBUFS) {
			t.lost = true
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			d := m.Data
			if len(d) < cnMsgLen+procEventHeaderBytes+16 {
				continue
			}
			ev := d[cnMsgLen:]
			if binary.NativeEndian.Uint32(ev[0:]) != procEventFork {
				continue
			}
			f := ev[procEventHeaderBytes:]
			parentTgid := int(binary.NativeEndian.Uint32(f[4:]))
			childPid := int(binary.NativeEndian.Uint32(f[8:]))
			childTgid := int(binary.NativeEndian.Uint32(f[12:]))
			if childPid != childTgid {
				continue // a thread: its process is already counted
			}
			if t.members[parentTgid] {
				t.members[childTgid] = true
			} else if t.members[childTgid] {
				delete(t.members, childTgid) // the pid was reused by someone else's child
			}
		}
	}
}

// member reports whether pid was forked within the run (drained first:
// a process's fork event precedes anything it does).
func (t *forkTracker) member(pid int) (yes, lost bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.drain()
	return t.members[pid], t.lost
}

// close unsubscribes and closes the socket.
func (t *forkTracker) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.send(procCnMcastIgnore)
	unix.Close(t.fd)
	t.closed = true
}

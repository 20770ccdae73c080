package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// GuardedDir is a directory only a verifier's own processes may open:
// the reward channel (/logs/verifier) and the hidden tests (/tests).
//
// The directory is a fresh tmpfs (its own superblock: nothing outside can be
// renamed or hard-linked into it, and every file in it was created by an
// open(2) inside it). A fanotify group marks the whole superblock with
// FAN_OPEN_PERM, so every open of every file in it, through any mount of
// it (the container's bind mount included), blocks in the kernel until
// this process answers. The answer depends on the channel's phase:
//
//	closed   (from OpenGuardedDir until Admit): every open is denied;
//	admitted (Admit(f) until Seal): an open is allowed iff f(pid) holds;
//	sealed   (after Seal): every open is denied.
//
// Opens by this process itself are always allowed (the host reads the
// reward). Denied opens during admitted and sealed are Violations. Writes
// through descriptors opened while admitted are not seen by fanotify, so
// after Seal the host asks Holders which processes still have a file of
// the channel open or mapped.
type GuardedDir struct {
	dir string
	// fan is the fanotify group, non-blocking, read through Go's poller:
	// closing it ends serve's Read safely (a raw descriptor closed under a
	// blocked read could be reused by the next group and read here).
	fan   *os.File
	ended chan struct{} // closed when serve returns
	dev   uint64
	self  int
	done  chan struct{}
	mu    sync.Mutex
	phase string
	admit AdmitFunc
	viol  []ChannelOpen
	// denied counts the opens refused while closed (the agent phase).
	denied int
}

// GuardAvailable reports whether this host can guard guarded dirs.
func GuardAvailable() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root (tmpfs mount and fanotify permission events)", ErrNoGuard)
	}
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC, unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("%w: fanotify_init: %v", ErrNoGuard, err)
	}
	unix.Close(fd)
	return nil
}

// OpenGuardedDir mounts a tmpfs of at most size bytes on dir (an
// existing empty directory, world-writable inside) and starts guarding it
// in the closed phase.
func OpenGuardedDir(dir string, size int64) (*GuardedDir, error) {
	if err := GuardAvailable(); err != nil {
		return nil, err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0777", size)); err != nil {
		return nil, fmt.Errorf("guarded dir %s: mount tmpfs: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		return nil, fmt.Errorf("guarded dir %s: %w", dir, err)
	}
	fan, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_LARGEFILE)
	if err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		return nil, fmt.Errorf("guarded dir %s: fanotify_init: %w", dir, err)
	}
	if err := unix.FanotifyMark(fan, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, unix.FAN_OPEN_PERM, unix.AT_FDCWD, dir); err != nil {
		unix.Close(fan)
		unix.Unmount(dir, unix.MNT_DETACH)
		return nil, fmt.Errorf("guarded dir %s: fanotify_mark: %w", dir, err)
	}
	c := &GuardedDir{dir: dir, fan: os.NewFile(uintptr(fan), "fanotify"), ended: make(chan struct{}), dev: uint64(st.Dev), self: os.Getpid(), done: make(chan struct{}), phase: "closed"}
	go c.serve()
	return c, nil
}

// Admit opens the directory to the processes f admits.
func (c *GuardedDir) Admit(f AdmitFunc) {
	c.mu.Lock()
	c.phase, c.admit = "admitted", f
	c.mu.Unlock()
}

// Seal closes the channel to every process but this one.
func (c *GuardedDir) Seal() {
	c.mu.Lock()
	c.phase, c.admit = "sealed", nil
	c.mu.Unlock()
}

// Violations are the denied opens while admitted or sealed.
func (c *GuardedDir) Violations() []ChannelOpen {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ChannelOpen(nil), c.viol...)
}

// DeniedWhileClosed counts the opens refused before Admit.
func (c *GuardedDir) DeniedWhileClosed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.denied
}

// Close stops the guard and unmounts the tmpfs (lazily: a container that
// still binds it keeps its copy until it is removed).
func (c *GuardedDir) Close() error {
	select {
	case <-c.done:
		return nil
	default:
	}
	close(c.done)
	// Closing the group answers every pending permission event with allow;
	// nothing may open the directory from here on, so unmount first.
	err := unix.Unmount(c.dir, unix.MNT_DETACH)
	c.fan.Close()
	<-c.ended
	if err != nil {
		return fmt.Errorf("guarded dir %s: unmount: %w", c.dir, err)
	}
	return nil
}

// serve answers permission events until Close.
func (c *GuardedDir) serve() {
	defer close(c.ended)
	buf := make([]byte, 64<<10)
	for {
		n, err := c.fan.Read(buf)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		for off := 0; off+int(unsafe.Sizeof(unix.FanotifyEventMetadata{})) <= n; {
			m := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
			if m.Event_len == 0 {
				break
			}
			c.answer(m)
			off += int(m.Event_len)
		}
	}
}

func (c *GuardedDir) answer(m *unix.FanotifyEventMetadata) {
	if m.Fd < 0 {
		return
	}
	defer unix.Close(int(m.Fd))
	pid := int(m.Pid)
	allow := pid == c.self
	if !allow {
		c.mu.Lock()
		phase, admit := c.phase, c.admit
		c.mu.Unlock()
		if phase == "admitted" && admit != nil && admit(pid) {
			allow = true
		} else {
			// The path as the opener's mount namespace names it when the
			// open came through a container's bind mount.
			path, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(m.Fd)))
			rel := path
			if r, ok := strings.CutPrefix(path, c.dir+"/"); ok {
				rel = r
			}
			c.mu.Lock()
			if phase == "closed" {
				c.denied++
			} else {
				c.viol = append(c.viol, ChannelOpen{PID: pid, Comm: procComm(pid), Path: rel, Phase: phase})
			}
			c.mu.Unlock()
		}
	}
	resp := unix.FanotifyResponse{Fd: m.Fd, Response: unix.FAN_DENY}
	if allow {
		resp.Response = unix.FAN_ALLOW
	}
	c.fan.Write((*[unsafe.Sizeof(resp)]byte)(unsafe.Pointer(&resp))[:])
}

// Holders lists the processes (other than this one) that have a file of
// the channel open or memory-mapped, as "pid (comm)".
func (c *GuardedDir) Holders() []string {
	var out []string
	for _, pid := range allPIDs() {
		if pid == c.self {
			continue
		}
		if c.holds(pid) {
			out = append(out, fmt.Sprintf("%d (%s)", pid, procComm(pid)))
		}
	}
	return out
}

func (c *GuardedDir) holds(pid int) bool {
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, _ := os.ReadDir(fdDir)
	for _, e := range ents {
		var st unix.Stat_t
		if unix.Stat(fdDir+"/"+e.Name(), &st) == nil && uint64(st.Dev) == c.dev {
			return true
		}
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return false
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x", unix.Major(c.dev), unix.Minor(c.dev))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 4 && fs[3] == want {
			return true
		}
	}
	return false
}

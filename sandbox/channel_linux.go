package sandbox

import (
	"bufio"
	"cmp"
	"encoding/binary"
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
	// fan is the permission group, non-blocking, read through Go's poller:
	// closing it ends serve's Read safely (a raw descriptor closed under a
	// blocked read could be reused by the next group and read here).
	fan   *os.File
	ended chan struct{} // closed when serve returns
	// notif is the change group (FAN_CLASS_NOTIF, FAN_REPORT_DFID_NAME):
	// creates, deletes, moves, attribute changes and writes, each with the
	// acting pid, read only under mu (watch and the phase changes), so
	// that every event is judged under the phase it happened in.
	notif      int
	rootFD     int // the tmpfs root, open, for open_by_handle_at (which refuses O_PATH)
	watchEnded chan struct{}
	dev        uint64
	self       int
	done       chan struct{}
	mu         sync.Mutex
	phase      string
	admit      AdmitFunc
	change     AdmitFunc
	viol       []ChannelOpen
	nviol      int // every violation, also those past maxViolations
	comms      map[int]string
	nbuf       []byte // readChanges's buffer
	// denied counts the opens refused while closed (the agent phase).
	denied int
}

// maxViolations bounds the violations a GuardedDir keeps (the count goes
// on): a process can make millions of changes, and the host's memory is
// not the episode's.
const maxViolations = 32

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
	// Changes are judged by who forked whom (see forkTracker).
	t, err := newForkTracker(0)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoGuard, err)
	}
	t.close()
	return nil
}

// changeMask are the changes the notification group reports: entries
// created, deleted or moved in a directory, attributes (mode, owner,
// times, links) and contents changed, the directory itself deleted or
// moved; for directories as well as files.
const changeMask = unix.FAN_CREATE | unix.FAN_DELETE | unix.FAN_MOVED_FROM | unix.FAN_MOVED_TO |
	unix.FAN_ATTRIB | unix.FAN_MODIFY | unix.FAN_DELETE_SELF | unix.FAN_MOVE_SELF | unix.FAN_ONDIR

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
	fail := func(err error, fds ...int) (*GuardedDir, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		unix.Unmount(dir, unix.MNT_DETACH)
		return nil, fmt.Errorf("guarded dir %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fail(err)
	}
	rootFD, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("open: %w", err))
	}
	// O_CLOEXEC on the event descriptors too: an engine CLI forked at the
	// moment an event is answered must not inherit the opened file (it
	// would be listed as a holder).
	fan, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		return fail(fmt.Errorf("fanotify_init: %w", err), rootFD)
	}
	if err := unix.FanotifyMark(fan, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, unix.FAN_OPEN_PERM, unix.AT_FDCWD, dir); err != nil {
		return fail(fmt.Errorf("fanotify_mark: %w", err), rootFD, fan)
	}
	// The change group's queue is unlimited (an overflow would lose
	// events); watch drains it every few milliseconds.
	notif, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|unix.FAN_UNLIMITED_QUEUE|unix.FAN_REPORT_DFID_NAME, unix.O_RDONLY|unix.O_LARGEFILE)
	if err != nil {
		return fail(fmt.Errorf("fanotify_init (changes): %w", err), rootFD, fan)
	}
	if err := unix.FanotifyMark(notif, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, changeMask, unix.AT_FDCWD, dir); err != nil {
		return fail(fmt.Errorf("fanotify_mark (changes): %w", err), rootFD, fan, notif)
	}
	c := &GuardedDir{dir: dir, fan: os.NewFile(uintptr(fan), "fanotify"), ended: make(chan struct{}),
		notif: notif, rootFD: rootFD, watchEnded: make(chan struct{}),
		dev: uint64(st.Dev), self: os.Getpid(), done: make(chan struct{}), phase: "closed"}
	go c.serve()
	go c.watch()
	return c, nil
}

// Admit opens the directory to the processes open admits; changes (see
// GuardedDir) are admitted when change(pid) holds (nil: open decides).
// Changes made before Admit are judged first, as made while closed.
func (c *GuardedDir) Admit(open, change AdmitFunc) {
	c.mu.Lock()
	c.readChanges()
	c.phase, c.admit, c.change = "admitted", open, change
	if change == nil {
		c.change = open
	}
	c.mu.Unlock()
}

// Seal closes the channel to every process but this one. Changes made
// before Seal are judged first, as made while admitted.
func (c *GuardedDir) Seal() {
	c.mu.Lock()
	c.readChanges()
	c.phase, c.admit, c.change = "sealed", nil, nil
	c.mu.Unlock()
}

// Sync judges every change made so far (they are reported asynchronously):
// call it after the last process that could change the directory is gone
// and before reading Violations.
func (c *GuardedDir) Sync() {
	c.mu.Lock()
	c.readChanges()
	c.mu.Unlock()
}

// Violations are the opens refused while admitted or sealed and the
// changes by processes outside the admitted run in any phase (the first
// maxViolations; ViolationCount counts them all).
func (c *GuardedDir) Violations() []ChannelOpen {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ChannelOpen(nil), c.viol...)
}

// ViolationCount counts every violation, also those Violations leaves out.
func (c *GuardedDir) ViolationCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nviol
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
	<-c.watchEnded
	unix.Close(c.notif)
	unix.Close(c.rootFD)
	if err != nil {
		return fmt.Errorf("guarded dir %s: unmount: %w", c.dir, err)
	}
	return nil
}

// addViolation records v. Callers hold mu.
func (c *GuardedDir) addViolation(v ChannelOpen) {
	c.nviol++
	if len(c.viol) < maxViolations {
		c.viol = append(c.viol, v)
	}
}

// watch drains the change group until Close: the events are judged under
// mu, as the phase changes judge what is left.
func (c *GuardedDir) watch() {
	defer close(c.watchEnded)
	for {
		select {
		case <-c.done:
			return
		default:
		}
		fds := []unix.PollFd{{Fd: int32(c.notif), Events: unix.POLLIN}}
		unix.Poll(fds, 50)
		c.mu.Lock()
		c.readChanges()
		c.mu.Unlock()
	}
}

// readChanges reads every queued change event and judges it under the
// current phase: this process's own changes (staging the tests, clearing
// the directories) pass; while admitted, those change admits pass; every
// other change is a violation. Callers hold mu.
func (c *GuardedDir) readChanges() {
	if c.nbuf == nil {
		c.nbuf = make([]byte, 64<<10)
	}
	buf := c.nbuf
	for {
		n, err := unix.Read(c.notif, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		meta := int(unsafe.Sizeof(unix.FanotifyEventMetadata{}))
		for off := 0; off+meta <= n; {
			m := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
			if m.Event_len < uint32(meta) || off+int(m.Event_len) > n {
				break
			}
			c.judgeChange(m, buf[off+int(m.Metadata_len):off+int(m.Event_len)])
			off += int(m.Event_len)
		}
	}
}

func (c *GuardedDir) judgeChange(m *unix.FanotifyEventMetadata, info []byte) {
	if m.Fd >= 0 {
		unix.Close(int(m.Fd))
	}
	pid := int(m.Pid)
	if m.Mask&unix.FAN_Q_OVERFLOW != 0 {
		c.addViolation(ChannelOpen{Op: "lost track of changes (event queue overflow)", Phase: c.phase})
		return
	}
	if pid == c.self {
		return
	}
	if c.phase == "admitted" && c.change != nil && c.change(pid) {
		return
	}
	if len(c.viol) >= maxViolations {
		c.nviol++ // counted; naming it would cost a lookup per event
		return
	}
	c.addViolation(ChannelOpen{PID: pid, Comm: c.comm(pid), Path: c.eventPath(info), Phase: c.phase, Op: changeOp(m.Mask)})
}

// comm is pid's command name, remembered from an earlier event when the
// process is gone by now (a short-lived process makes several changes).
// Callers hold mu.
func (c *GuardedDir) comm(pid int) string {
	name := procComm(pid)
	if name != "?" {
		if c.comms == nil || len(c.comms) > 1024 {
			c.comms = map[int]string{}
		}
		c.comms[pid] = name
	} else if n, ok := c.comms[pid]; ok {
		name = n
	}
	return name
}

// changeOp names a change event's kind.
func changeOp(mask uint64) string {
	for _, k := range []struct {
		bit  uint64
		name string
	}{
		{unix.FAN_CREATE, "created"}, {unix.FAN_DELETE, "deleted"}, {unix.FAN_MOVED_FROM, "moved away"},
		{unix.FAN_MOVED_TO, "moved in"}, {unix.FAN_MODIFY, "wrote"}, {unix.FAN_ATTRIB, "changed attributes of"},
		{unix.FAN_DELETE_SELF, "deleted"}, {unix.FAN_MOVE_SELF, "moved"},
	} {
		if mask&k.bit != 0 {
			return k.name
		}
	}
	return fmt.Sprintf("changed (mask %#x)", mask)
}

// eventPath is the path, relative to the guarded directory, that a
// change event's directory handle and name give ("?" if it cannot be
// resolved: the directory may be gone).
func (c *GuardedDir) eventPath(info []byte) string {
	for len(info) >= 4 {
		typ, ln := info[0], int(binary.NativeEndian.Uint16(info[2:]))
		if ln < 4 || ln > len(info) {
			break
		}
		rec := info[4:ln]
		info = info[ln:]
		if typ != unix.FAN_EVENT_INFO_TYPE_DFID_NAME && typ != unix.FAN_EVENT_INFO_TYPE_DFID && typ != unix.FAN_EVENT_INFO_TYPE_FID {
			continue
		}
		// fsid (8 bytes), then struct file_handle, then (DFID_NAME) the name.
		if len(rec) < 16 {
			continue
		}
		hb := int(binary.NativeEndian.Uint32(rec[8:]))
		ht := int32(binary.NativeEndian.Uint32(rec[12:]))
		if 16+hb > len(rec) {
			continue
		}
		handle := unix.NewFileHandle(ht, rec[16:16+hb])
		name := ""
		if typ == unix.FAN_EVENT_INFO_TYPE_DFID_NAME {
			name, _, _ = strings.Cut(string(rec[16+hb:]), "\x00")
		}
		dir := "?"
		fd, err := unix.OpenByHandleAt(c.rootFD, handle, unix.O_PATH|unix.O_CLOEXEC)
		if err == nil {
			if p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil {
				dir = p
				if p == c.dir {
					dir = ""
				} else if r, ok := strings.CutPrefix(p, c.dir+"/"); ok {
					dir = r
				}
			}
			unix.Close(fd)
		}
		switch {
		case name == "" || name == ".":
			return cmp.Or(dir, ".")
		case dir == "":
			return name
		}
		return dir + "/" + name
	}
	return "?"
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
				c.addViolation(ChannelOpen{PID: pid, Comm: procComm(pid), Path: rel, Phase: phase, Op: "opened"})
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

// Holders lists the processes (other than this one and its children that
// have not yet called exec) that have a file of the channel open or
// memory-mapped, as "pid (comm)".
func (c *GuardedDir) Holders() []string {
	var out []string
	selfExe, _ := os.Readlink("/proc/self/exe")
	for _, pid := range allPIDs() {
		if pid == c.self || ownForkBeforeExec(pid, c.self, selfExe) {
			continue
		}
		if c.holds(pid) {
			out = append(out, fmt.Sprintf("%d (%s)", pid, procComm(pid)))
		}
	}
	return out
}

// ownForkBeforeExec reports whether pid is a child of self still running
// self's executable: a process another goroutine of self has forked to
// start a command and that has not reached exec yet. Until then it holds
// copies of all of self's descriptors, the guarded directory's root among
// them, and would read as a holder (a harbor test failed so: "10702
// (harbor.test)"). A container's processes are children of its runtime,
// never of the host process, so none is passed over.
func ownForkBeforeExec(pid, self int, selfExe string) bool {
	ppid, _, ok := procStat(pid)
	if !ok || ppid != self || selfExe == "" {
		return false
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return err == nil && exe == selfExe
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

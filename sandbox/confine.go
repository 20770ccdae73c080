package sandbox

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Confinement is what this host lets the sandbox enforce per session (one
// episode's agent phase, or its verifier) rather than per process: memory,
// process count and CPU through a cgroup per session, and disk through a
// size-limited tmpfs mounted over the episode's workspace. Rlimits (address
// space, processes per user namespace, file size) are set in every sandbox
// regardless; they bound one process, not the session, so nine processes of
// 0.9 GB each pass a 1 GB RLIMIT_AS.
//
// DetectConfinement probes the host once; Describe says in one line what is
// enforced and why the rest is not. A nil *Confinement enforces nothing
// beyond the rlimits.
type Confinement struct {
	version int               // 1 or 2; 0 when no cgroup hierarchy is usable
	dirs    map[string]string // controller ("memory", "pids", "cpu") → parent of session cgroups (v1: per controller; v2: the same for all)
	disk    bool              // size-limited tmpfs workspaces can be mounted (root)
	notes   []string          // why something is not enforced
}

// cgroupControllers are the controllers a session cgroup uses.
var cgroupControllers = []string{"memory", "pids", "cpu"}

// DetectConfinement looks at /sys/fs/cgroup (cgroup v2 unified, or v1 with
// separate memory, pids and cpu hierarchies) and creates, under this
// process's own cgroup of each usable controller, a "compactrl" directory
// that will hold the session cgroups. A controller that is missing or not
// writable is left out, with the reason in Describe.
func DetectConfinement() *Confinement {
	return detectConfinement("/sys/fs/cgroup", "/proc/self/cgroup")
}

func detectConfinement(root, selfCgroup string) *Confinement {
	c := &Confinement{dirs: map[string]string{}}
	if os.Geteuid() == 0 {
		c.disk = true
	} else {
		c.notes = append(c.notes, "workspace disk limit needs root (tmpfs mount)")
	}
	own, err := ownCgroups(selfCgroup)
	if err != nil {
		c.notes = append(c.notes, "cgroups: "+err.Error())
		return c
	}
	if ctrl, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		c.detectV2(root, own[""], strings.Fields(string(ctrl)))
		return c
	}
	c.version = 1
	for _, name := range cgroupControllers {
		base := filepath.Join(root, name)
		if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
			c.notes = append(c.notes, fmt.Sprintf("cgroup v1 %s controller not mounted at %s", name, base))
			continue
		}
		rel, ok := own[name]
		if !ok {
			c.notes = append(c.notes, fmt.Sprintf("cgroup v1 %s: this process's cgroup is not listed in %s", name, selfCgroup))
			continue
		}
		parent := filepath.Join(base, rel, "compactrl")
		if err := probeCgroupDir(parent); err != nil {
			c.notes = append(c.notes, fmt.Sprintf("cgroup v1 %s: %v", name, err))
			continue
		}
		c.dirs[name] = parent
	}
	if len(c.dirs) == 0 {
		c.version = 0
	}
	return c
}

// detectV2 enables memory, pids and cpu for a "compactrl" child of this
// process's cgroup. That needs them enabled in the own cgroup's
// cgroup.subtree_control, which the kernel refuses while the own cgroup
// holds processes unless a delegating manager did it already.
func (c *Confinement) detectV2(root, rel string, available []string) {
	c.version = 2
	own := filepath.Join(root, rel)
	parent := filepath.Join(own, "compactrl")
	if err := probeCgroupDir(parent); err != nil {
		c.notes = append(c.notes, "cgroup v2: "+err.Error())
		c.version = 0
		return
	}
	avail := map[string]bool{}
	for _, a := range available {
		avail[a] = true
	}
	for _, name := range cgroupControllers {
		if !avail[name] {
			c.notes = append(c.notes, "cgroup v2: controller "+name+" not available")
			continue
		}
		os.WriteFile(filepath.Join(own, "cgroup.subtree_control"), []byte("+"+name), 0)
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+"+name), 0); err != nil {
			c.notes = append(c.notes, fmt.Sprintf("cgroup v2: cannot enable %s below %s: %v", name, parent, err))
			continue
		}
		c.dirs[name] = parent
	}
	if len(c.dirs) == 0 {
		c.version = 0
	}
}

// ownCgroups parses /proc/self/cgroup: controller → path ("" is the v2
// unified hierarchy).
func ownCgroups(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			out[ctl] = parts[2]
		}
	}
	return out, sc.Err()
}

// probeCgroupDir creates dir and checks that a child cgroup can be made
// and removed in it.
func probeCgroupDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cannot create %s: %w", dir, err)
	}
	probe := filepath.Join(dir, "probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cannot create a cgroup in %s: %w", dir, err)
	}
	if err := os.Remove(probe); err != nil {
		return fmt.Errorf("cannot remove cgroup %s: %w", probe, err)
	}
	return nil
}

// Enforced reports which per-session limits hold: memory, processes, CPU
// (cgroups) and disk (workspace tmpfs).
func (c *Confinement) Enforced() (memory, processes, cpu, disk bool) {
	if c == nil {
		return false, false, false, false
	}
	return c.dirs["memory"] != "", c.dirs["pids"] != "", c.dirs["cpu"] != "", c.disk
}

// Describe is the startup line: what is enforced per session and, for the
// rest, that it is not and why.
func (c *Confinement) Describe() string {
	mem, pids, cpu, disk := c.Enforced()
	var on, off []string
	add := func(ok bool, name string) {
		if ok {
			on = append(on, name)
		} else {
			off = append(off, name)
		}
	}
	add(mem, "memory")
	add(pids, "processes")
	add(cpu, "cpu")
	add(disk, "workspace disk")
	var b strings.Builder
	b.WriteString("sandbox limits per session: ")
	if len(on) == 0 {
		b.WriteString("none enforced")
	} else {
		b.WriteString(strings.Join(on, ", ") + " enforced")
		if c != nil && c.version > 0 {
			fmt.Fprintf(&b, " (cgroup v%d)", c.version)
		}
	}
	if len(off) > 0 {
		b.WriteString("; NOT enforced: " + strings.Join(off, ", ") + " (only per-process rlimits apply to them")
		if c == nil {
			b.WriteString("; confinement was not set up")
		} else if len(c.notes) > 0 {
			b.WriteString(": " + strings.Join(c.notes, "; "))
		}
		b.WriteString(")")
	}
	return b.String()
}

// cgroup is one session's cgroup: one directory per controller (v1) or a
// single one (v2).
type cgroup struct {
	version int
	dirs    []string
}

// newCgroup creates a session cgroup with l's limits. uid, when ≥ 0, is
// given the cgroup.procs files so that a process already running as that
// uid can move itself in (cgroup v1).
func (c *Confinement) newCgroup(l Limits, uid int) (*cgroup, error) {
	if c == nil || c.version == 0 || len(c.dirs) == 0 {
		return nil, nil
	}
	var b [6]byte
	rand.Read(b[:])
	name := fmt.Sprintf("s%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
	g := &cgroup{version: c.version}
	seen := map[string]bool{}
	for _, ctl := range cgroupControllers {
		parent := c.dirs[ctl]
		if parent == "" {
			continue
		}
		dir := filepath.Join(parent, name)
		if !seen[dir] {
			if err := os.Mkdir(dir, 0o755); err != nil {
				g.remove()
				return nil, fmt.Errorf("sandbox: create cgroup %s: %w", dir, err)
			}
			seen[dir] = true
			g.dirs = append(g.dirs, dir)
			if uid >= 0 && c.version == 1 {
				if err := os.Chown(filepath.Join(dir, "cgroup.procs"), uid, -1); err != nil {
					g.remove()
					return nil, fmt.Errorf("sandbox: cgroup %s: %w", dir, err)
				}
			}
		}
		if err := setCgroupLimit(c.version, ctl, dir, l); err != nil {
			g.remove()
			return nil, err
		}
	}
	return g, nil
}

// setCgroupLimit writes controller ctl's limit from l into dir.
func setCgroupLimit(version int, ctl, dir string, l Limits) error {
	type kv struct{ file, value string }
	var w []kv
	switch {
	case ctl == "memory" && version == 1:
		w = []kv{{"memory.limit_in_bytes", strconv.FormatInt(l.SessionMemoryBytes, 10)}}
		if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
			w = append(w, kv{"memory.memsw.limit_in_bytes", strconv.FormatInt(l.SessionMemoryBytes, 10)})
		}
	case ctl == "memory":
		w = []kv{{"memory.max", strconv.FormatInt(l.SessionMemoryBytes, 10)}, {"memory.swap.max", "0"}}
	case ctl == "pids":
		w = []kv{{"pids.max", strconv.Itoa(l.Processes)}}
	case ctl == "cpu" && l.CPUs > 0 && version == 1:
		w = []kv{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", strconv.FormatInt(int64(l.CPUs*100000), 10)}}
	case ctl == "cpu" && l.CPUs > 0:
		w = []kv{{"cpu.max", fmt.Sprintf("%d 100000", int64(l.CPUs*100000))}}
	}
	for _, x := range w {
		p := filepath.Join(dir, x.file)
		if err := os.WriteFile(p, []byte(x.value), 0); err != nil {
			if x.file == "memory.swap.max" && errors.Is(err, os.ErrNotExist) {
				continue // no swap accounting: nothing to forbid
			}
			return fmt.Errorf("sandbox: set %s = %s: %w", p, x.value, err)
		}
	}
	return nil
}

// procsFiles are the cgroup.procs files a process writes its pid to.
func (g *cgroup) procsFiles() []string {
	out := make([]string, len(g.dirs))
	for i, d := range g.dirs {
		out[i] = filepath.Join(d, "cgroup.procs")
	}
	return out
}

// pids lists the processes in the cgroup (the union over controllers).
func (g *cgroup) pids() []int {
	seen := map[int]bool{}
	var out []int
	for _, f := range g.procsFiles() {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(s); err == nil && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// killAll SIGKILLs every process in the cgroup until none is left (a
// process forked meanwhile is caught on the next pass) or the deadline.
func (g *cgroup) killAll(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		ps := g.pids()
		if len(ps) == 0 {
			return nil
		}
		for _, p := range ps {
			killPID(p)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox: %d processes still alive in cgroup %s after SIGKILL for %v: %v", len(ps), g.dirs[0], wait, ps)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// remove deletes the cgroup directories (they must be empty of processes).
func (g *cgroup) remove() error {
	var errs []error
	for _, d := range g.dirs {
		var err error
		for i := 0; i < 100; i++ {
			if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sandbox: remove cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// MountWorkspace mounts a tmpfs of limit bytes over dir (mode 0711) so that
// everything an episode writes to its workspace, whichever process writes
// it, counts against one limit. It returns the function that unmounts it.
// Without root (or with limit ≤ 0) it mounts nothing and returns a no-op.
func (c *Confinement) MountWorkspace(dir string, limit int64) (unmount func() error, err error) {
	if c == nil || !c.disk || limit <= 0 {
		return func() error { return nil }, nil
	}
	opts := fmt.Sprintf("size=%d,mode=0711", limit)
	if err := mountTmpfs(dir, opts); err != nil {
		return nil, fmt.Errorf("sandbox: mount a %d-byte tmpfs on workspace %s: %w", limit, dir, err)
	}
	return func() error {
		if err := unmountDetach(dir); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("sandbox: unmount workspace %s: %w", dir, err)
		}
		return nil
	}, nil
}

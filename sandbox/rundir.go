package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// RunDir is a directory that one running process owns, for the workspaces
// of its episodes: it holds an exclusive flock on RunDir/.lock for its whole
// life. The kernel drops the lock when the process dies, however it dies
// (kill -9 included), so the next NewRunDir under the same parent finds the
// run directories whose owner is gone and removes them, tmpfs workspaces
// unmounted first.
type RunDir struct {
	Path string
	lock *os.File
}

// NewRunDir reaps the dead runs under parent (created 0711 if missing) and
// makes a new run directory there. reaped lists what was removed.
func NewRunDir(parent string) (rd *RunDir, reaped []string, err error) {
	if err := sandboxSupported(); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return nil, nil, fmt.Errorf("run directory %s: %w", parent, err)
	}
	reaped, err = ReapRunDirs(parent)
	if err != nil {
		return nil, reaped, err
	}
	dir, err := MkdirTemp(parent, "run-")
	if err != nil {
		return nil, reaped, fmt.Errorf("run directory in %s: %w", parent, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = lockExclusive(f)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, reaped, fmt.Errorf("run directory %s: lock: %w", dir, err)
	}
	return &RunDir{Path: dir, lock: f}, reaped, nil
}

// Close unmounts what is still mounted in the run directory, removes it and
// releases the lock.
func (r *RunDir) Close() error {
	err := removeTree(r.Path)
	r.lock.Close()
	return err
}

// ReapRunDirs removes every run directory under parent whose owner is gone
// (its lock can be taken) and returns their paths.
func ReapRunDirs(parent string) ([]string, error) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return nil, fmt.Errorf("reap %s: %w", parent, err)
	}
	var reaped []string
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "run-") {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR, 0)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				continue
			}
			// Killed between creating the directory and its lock.
		} else {
			busy := lockExclusive(f) != nil
			if busy {
				f.Close()
				continue // a live run
			}
		}
		err = removeTree(dir)
		if f != nil {
			f.Close()
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		reaped = append(reaped, dir)
	}
	return reaped, errors.Join(errs...)
}

// removeTree unmounts every mount at or below dir (deepest first), then
// removes dir.
func removeTree(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := unmountDetach(m); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("remove %s: unmount %s: %w", dir, m, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		if !mountInfoRequired && os.IsNotExist(err) {
			return nil, nil // no /proc: this package mounted nothing (platform_other.go)
		}
		return nil, fmt.Errorf("list mounts: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == abs || strings.HasPrefix(mp, abs+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

// unescapeMount decodes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Reap removes the session cgroups left by processes that died without
// closing their sessions (kill -9), killing anything still in them, and
// returns their paths.
func (c *Confinement) Reap() []string {
	if c == nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, parent := range c.dirs {
		if seen[parent] {
			continue
		}
		seen[parent] = true
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			pidStr, _, ok := strings.Cut(strings.TrimPrefix(name, "s"), "-")
			if !e.IsDir() || !strings.HasPrefix(name, "s") || !ok {
				continue
			}
			pid, err := strconv.Atoi(pidStr)
			if err != nil || pid == os.Getpid() || processAlive(pid) {
				continue
			}
			g := &cgroup{version: c.version, dirs: []string{filepath.Join(parent, name)}}
			if g.killAll(5e9) == nil && g.remove() == nil {
				out = append(out, g.dirs[0])
			}
		}
	}
	return out
}

func processAlive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

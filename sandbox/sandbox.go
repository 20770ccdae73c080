// Package sandbox runs an agent's shell commands confined: no network, a
// read-only system, one writable task directory seen as /app, a wall-clock
// timeout per command, memory / process-count / file-size limits, and output
// capped to a head and a tail.
//
// Data flow: an environment (env/harbor, env/swebench) asks a Runner to Start
// a Session for a Spec (the host directory to expose as /app, extra mounts,
// environment variables, limits). The Session keeps one bash process alive
// inside the sandbox for the whole episode, so `cd`, shell variables and
// exported environment survive between actions. Exec sends one command to
// that shell, framed by a per-session random sentinel that carries the exit
// status back, and returns the (capped) interleaved stdout+stderr. A command
// that outlives its timeout kills the whole sandbox; the shell is restarted
// (files under /app survive, shell state does not) and the Result says so.
//
// Two Runners share the Session protocol: Bubblewrap (bwrap, the default,
// works without a container engine) and Container (docker / podman CLI, for
// tasks that need an image). A Container also hands out Boxes: one running
// container an episode lives in, with shells and one-off commands exec'd
// into it, and RunGuarded for a verifier. GuardedDir (Linux, root) is a
// tmpfs directory that fanotify permission events close to every process
// but the ones a verifier's session admits: the reward channel and the
// hidden tests of a container episode. Bubblewrap needs Linux and Container a Unix
// system; elsewhere Start returns an error saying what to use instead
// (platform.go).
package sandbox

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Mount exposes a host path inside the sandbox.
type Mount struct {
	Host     string // host path (file or directory)
	Target   string // absolute path inside the sandbox
	Writable bool
}

// Limits bound what one session may consume. Zero fields take the defaults
// of DefaultLimits.
type Limits struct {
	MemoryBytes int64 // address-space limit per process (RLIMIT_AS)
	// SessionMemoryBytes bounds the memory of all the session's processes
	// together (a cgroup, where Confinement enforces it); default
	// MemoryBytes.
	SessionMemoryBytes int64
	// Processes bounds processes+threads: per sandbox user namespace
	// (RLIMIT_NPROC) and per session (pids cgroup, where enforced).
	Processes     int
	FileSizeBytes int64 // largest file a process may write (RLIMIT_FSIZE)
	TmpBytes      int64 // size of the tmpfs mounted at /tmp (bwrap)
	// DiskBytes bounds the episode's workspace (a tmpfs mounted over it,
	// where Confinement enforces it): every file of every process counts.
	DiskBytes   int64
	OutputBytes int     // output kept per command: half from the head, half from the tail
	CPUs        float64 // CPU quota of the session (cgroup cpu controller), 0: none
}

// DefaultLimits returns the limits used for every zero field of a Spec's
// Limits.
func DefaultLimits() Limits {
	return Limits{
		MemoryBytes:   4 << 30,
		Processes:     1024, // threads count too: a parallel `go build` on many cores needs hundreds
		FileSizeBytes: 1 << 30,
		TmpBytes:      512 << 20,
		DiskBytes:     4 << 30,
		OutputBytes:   16 << 10,
	}
}

// withDefaults returns l with zero fields replaced from DefaultLimits;
// SessionMemoryBytes defaults to the resulting MemoryBytes.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	d.MemoryBytes = positiveOr(l.MemoryBytes, d.MemoryBytes)
	d.SessionMemoryBytes = positiveOr(l.SessionMemoryBytes, d.MemoryBytes)
	d.Processes = positiveOr(l.Processes, d.Processes)
	d.FileSizeBytes = positiveOr(l.FileSizeBytes, d.FileSizeBytes)
	d.TmpBytes = positiveOr(l.TmpBytes, d.TmpBytes)
	d.DiskBytes = positiveOr(l.DiskBytes, d.DiskBytes)
	d.OutputBytes = positiveOr(l.OutputBytes, d.OutputBytes)
	d.CPUs = positiveOr(l.CPUs, d.CPUs)
	return d
}

// positiveOr is v if it is set (positive), else def.
func positiveOr[T int | int64 | float64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// Spec describes one session's sandbox.
type Spec struct {
	// Workdir is the host directory exposed writable at /app, the shell's
	// working directory. Required.
	Workdir string
	Mounts  []Mount
	// Env is added to the sandbox's minimal environment (PATH, HOME=/tmp,
	// LANG, TERM=dumb, GOTOOLCHAIN=local, GOPROXY=off, GOFLAGS=-mod=mod).
	Env    map[string]string
	Limits Limits
	// Image is the container image (Container runner only; Bubblewrap
	// ignores it and runs on the host's read-only system).
	Image string
	// Network shares the host's network (bwrap --share-net; a container's
	// default network). Off by default: no network at all.
	Network bool
}

// AppDir is where Spec.Workdir appears inside the sandbox.
const AppDir = "/app"

// Result is the outcome of one command.
type Result struct {
	Output    string // interleaved stdout+stderr, capped (see Truncated)
	ExitCode  int    // the command's exit status; -1 when it timed out or the shell died
	TimedOut  bool   // the command outlived its timeout and was killed
	Truncated bool   // the output was longer than Limits.OutputBytes; the middle was cut
	// Restarted reports that the shell was restarted after this command
	// (timeout, or the command exited the shell): shell state (cwd,
	// variables) was lost, files under /app were not.
	Restarted bool
	Duration  time.Duration
}

// Session is one episode's persistent shell.
type Session interface {
	// Exec runs cmd in the persistent shell with stdin from /dev/null and
	// waits at most timeout (≤ 0: no limit beyond ctx). An error means the
	// sandbox itself failed (infrastructure), never that the command did.
	Exec(ctx context.Context, cmd string, timeout time.Duration) (Result, error)
	// Close kills everything the session started. Safe to call twice.
	Close() error
}

// Runner starts sessions.
type Runner interface {
	Start(ctx context.Context, spec Spec) (Session, error)
}

// WorkspaceMounter is a Runner that bounds the disk use of the host
// directory its sessions work in (Bubblewrap: a size-limited tmpfs where
// its Confinement allows one). A workspace limit is refused for a runner
// that does not implement it, never dropped: a Runner that wraps another
// delegates MountWorkspace to it, or states its own answer.
type WorkspaceMounter interface {
	// MountWorkspace bounds dir to limit bytes and returns the function
	// that undoes it.
	MountWorkspace(dir string, limit int64) (unmount func() error, err error)
}

func (s Spec) validate() error {
	if s.Workdir == "" {
		return fmt.Errorf("sandbox spec: Workdir is empty")
	}
	for _, m := range s.Mounts {
		if m.Host == "" || len(m.Target) == 0 || m.Target[0] != '/' {
			return fmt.Errorf("sandbox spec: mount %q -> %q: host must be set and target absolute", m.Host, m.Target)
		}
	}
	return nil
}

// baseEnv is the environment every sandboxed shell starts from.
func baseEnv(extra map[string]string) map[string]string {
	env := map[string]string{
		"PATH":                    "/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME":                    "/tmp",
		"LANG":                    "C.UTF-8",
		"TERM":                    "dumb",
		"GOTOOLCHAIN":             "local",
		"GOPROXY":                 "off",
		"GOFLAGS":                 "-mod=mod",
		"PYTHONDONTWRITEBYTECODE": "1",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// ReadRegular reads a file that sandboxed code may have written: only if
// path is a regular file (not a symlink planted to make the host read
// something else, not a FIFO that would block) of at most max bytes.
func ReadRegular(path string, max int64) ([]byte, error) {
	f, err := openNoFollow(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s has %d bytes, limit %d", path, fi.Size(), max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// Bubblewrap runs sessions under bwrap (https://github.com/containers/bubblewrap):
//
//   - namespaces: every one bwrap can unshare (user, pid, net, ipc, uts,
//     cgroup): only a loopback interface, no route out (Spec.Network
//     shares the host's network instead);
//   - filesystem: a fresh root (remounted read-only) holding /usr and /etc bound read-only
//     (the /bin, /lib, /lib64, /sbin symlinks of a merged-/usr system are
//     recreated; non-symlink ones are bound read-only), ROBinds, /dev, /proc,
//     a size-limited tmpfs /tmp, Spec.Workdir read-write at /app, Spec.Mounts;
//   - identity: when the caller is root, bwrap itself runs as the
//     unprivileged UID:GID (default 65534, "nobody"), because the kernel never
//     applies RLIMIT_NPROC to real uid 0: as root a fork bomb is not contained.
//     The writable mounts are chowned to that uid. As a non-root caller the
//     sandbox runs as the caller;
//   - limits: inside, before the persistent shell starts, `ulimit` sets
//     RLIMIT_AS (memory), RLIMIT_NPROC (processes, counted per user
//     namespace, so sessions do not share the budget) and RLIMIT_FSIZE,
//     soft and hard, so sandboxed code cannot raise them;
//   - lifetime: bwrap runs in its own process group with --die-with-parent
//     and --new-session; killing the group kills bwrap, whose pid-namespace
//     init then takes every sandboxed process with it.
//
// With Confine set, each session also gets its own cgroup (memory, pids and
// cpu, as far as the host allows: see Confinement), which the sandbox
// enters before bwrap starts; Close then kills every process in it and
// waits until none is left. Without cgroups, Close waits for the sandbox's
// pid-namespace init (reported by bwrap --info-fd) to be gone, which the
// kernel allows only once every process of the namespace has died. Either
// way, when Close returns nothing the session started still runs: a
// verifier started next cannot meet a process of the agent.
type Bubblewrap struct {
	Path    string   // bwrap binary; default /usr/bin/bwrap
	ROBinds []string // extra host paths bound read-only at the same place (e.g. /opt/tool)
	UID     int      // uid to run as when the caller is root; 0 means 65534
	GID     int      // gid to run as when the caller is root; 0 means 65534
	// Confine enforces per-session limits (cgroups, workspace tmpfs);
	// nil: per-process rlimits only.
	Confine *Confinement
}

// MountWorkspace mounts a size-limited tmpfs over an episode's workspace
// directory when b.Confine allows it (see Confinement.MountWorkspace).
func (b Bubblewrap) MountWorkspace(dir string, limit int64) (func() error, error) {
	return b.Confine.MountWorkspace(dir, limit)
}

// Start implements Runner.
func (b Bubblewrap) Start(ctx context.Context, spec Spec) (Session, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if err := bwrapSupported(); err != nil {
		return nil, err
	}
	l, err := b.newLauncher(spec)
	if err != nil {
		return nil, err
	}
	sess, err := newShellSession(l, spec.Limits)
	if err != nil {
		l.close()
		return nil, err
	}
	return sess, nil
}

func (b Bubblewrap) path() string {
	if b.Path != "" {
		return b.Path
	}
	return "/usr/bin/bwrap"
}

// Available reports whether the bwrap binary exists and can start a
// sandbox on this machine.
func (b Bubblewrap) Available() error {
	if err := bwrapSupported(); err != nil {
		return err
	}
	p := b.path()
	if _, err := os.Stat(p); err != nil {
		return fmt.Errorf("bubblewrap: %w", err)
	}
	// The probe binds what a sandbox binds, never the host's whole / (a
	// recursive bind of / copies every mount under it, and fails when one
	// vanishes meanwhile, such as a container's overlay being torn down).
	args := append(append([]string{"--unshare-all", "--die-with-parent"}, systemBinds(hostRootLinks())...), "/usr/bin/true")
	out, err := exec.Command(p, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bubblewrap: %s cannot create a sandbox here: %v: %s", p, err, out)
	}
	return nil
}

// systemBinds are the bubblewrap arguments that give a sandbox the host's
// system directories read-only: /usr, the root directories that are links
// into it (or real directories) and /etc.
func systemBinds(rootLinks map[string]string) []string {
	a := []string{"--ro-bind", "/usr", "/usr"}
	dirs := make([]string, 0, len(rootLinks))
	for d := range rootLinks {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		if t := rootLinks[d]; t != "" {
			a = append(a, "--symlink", t, d)
		} else {
			a = append(a, "--ro-bind", d, d)
		}
	}
	return append(a, "--ro-bind", "/etc", "/etc")
}

type bwrapLauncher struct {
	path string
	args []string
	user *sandboxUser // nil: bwrap runs as the caller
	cg   *cgroup      // nil without cgroups

	afterStart func() // closes the child's ends of pipes once it runs

	// nsInit is the pid (in this namespace) of the running sandbox's
	// pid-namespace init, read from bwrap's --info-fd; 0 until known.
	nsInit chan int
}

// sandboxUser is the unprivileged identity bwrap runs as when the caller
// is root (platform_unix.go turns it into a process credential).
type sandboxUser struct{ uid, gid int }

func (b Bubblewrap) newLauncher(spec Spec) (*bwrapLauncher, error) {
	var user *sandboxUser
	if os.Geteuid() == 0 {
		uid, gid := b.UID, b.GID
		if uid == 0 {
			uid = 65534
		}
		if gid == 0 {
			gid = 65534
		}
		user = &sandboxUser{uid: uid, gid: gid}
		if err := chownTree(spec.Workdir, uid, gid); err != nil {
			return nil, err
		}
		for _, m := range spec.Mounts {
			if m.Writable {
				if err := chownTree(m.Host, uid, gid); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, m := range append([]Mount{{Host: spec.Workdir, Target: AppDir}}, spec.Mounts...) {
		if _, err := os.Stat(m.Host); err != nil {
			return nil, fmt.Errorf("sandbox: mount %s: %w", m.Target, err)
		}
		if user != nil {
			if err := searchable(m.Host, user.uid); err != nil {
				return nil, fmt.Errorf("sandbox: mount %s: %w", m.Target, err)
			}
		}
	}
	uid := -1
	if user != nil {
		uid = user.uid
	}
	cg, err := b.Confine.newCgroup(spec.Limits.withDefaults(), uid)
	if err != nil {
		return nil, err
	}
	return &bwrapLauncher{path: b.path(), args: bwrapArgs(spec, b.ROBinds, hostRootLinks()), user: user, cg: cg}, nil
}

// hostRootLinks maps each of /bin, /lib, /lib64, /sbin, /lib32, /libx32 to
// its symlink target on the host ("" when it is a real directory, absent
// when missing).
func hostRootLinks() map[string]string {
	links := map[string]string{}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"} {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if t, err := os.Readlink(d); err == nil {
				links[d] = t
				continue
			}
		}
		links[d] = ""
	}
	return links
}

// bwrapArgs builds bwrap's command line for spec (pure, for tests).
func bwrapArgs(spec Spec, roBinds []string, rootLinks map[string]string) []string {
	lim := spec.Limits.withDefaults()
	a := []string{
		"--unshare-all", "--die-with-parent", "--new-session",
	}
	if spec.Network {
		a = append(a, "--share-net")
	}
	a = append(a, "--hostname", "sandbox")
	a = append(a, systemBinds(rootLinks)...)
	for _, p := range roBinds {
		a = append(a, "--ro-bind", p, p)
	}
	a = append(a,
		"--dev", "/dev",
		"--proc", "/proc",
		"--size", fmt.Sprint(lim.TmpBytes), "--tmpfs", "/tmp",
		"--bind", spec.Workdir, AppDir,
	)
	for _, m := range spec.Mounts {
		if m.Writable {
			a = append(a, "--bind", m.Host, m.Target)
		} else {
			a = append(a, "--ro-bind", m.Host, m.Target)
		}
	}
	a = append(a, "--remount-ro", "/", "--chdir", AppDir, "--clearenv")
	env := baseEnv(spec.Env)
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		a = append(a, "--setenv", k, env[k])
	}
	a = append(a, "--", "/bin/bash", "--noprofile", "--norc", "-c", limitScript(lim)+"exec /bin/bash --noprofile --norc")
	return a
}

// limitScript sets the per-process limits (soft and hard) in a shell.
func limitScript(l Limits) string {
	return fmt.Sprintf("ulimit -v %d && ulimit -u %d && ulimit -f %d || exit 97; ",
		l.MemoryBytes/1024, l.Processes, l.FileSizeBytes/1024)
}

// infoFD is the descriptor bwrap writes its --info-fd JSON to (the first
// of exec.Cmd.ExtraFiles).
const infoFD = 3

func (l *bwrapLauncher) command() (*exec.Cmd, error) {
	args := append([]string{"--info-fd", strconv.Itoa(infoFD)}, l.args...)
	path := l.path
	attr := bwrapProcAttr(l.user) // Setpgid, Pdeathsig SIGKILL (platform_linux.go)
	var cgFD *os.File
	switch {
	case l.cg != nil && l.cg.version == 1:
		// Enter the session cgroup before bwrap forks anything: a shell
		// (already running as the sandbox uid, which owns cgroup.procs)
		// moves itself in and execs bwrap.
		script := ""
		for _, f := range l.cg.procsFiles() {
			script += "echo $$ > " + ShellQuote(f) + " || exit 96; "
		}
		args = append([]string{"-c", script + `exec "$0" "$@"`, l.path}, args...)
		path = "/bin/sh"
	case l.cg != nil:
		f, err := os.Open(l.cg.dirs[0])
		if err != nil {
			return nil, fmt.Errorf("sandbox: open cgroup %s: %w", l.cg.dirs[0], err)
		}
		cgFD = f
		useCgroupFD(attr, int(f.Fd()))
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: info pipe: %w", err)
	}
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = attr
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.ExtraFiles = []*os.File{pw}
	nsInit := make(chan int, 1)
	l.nsInit = nsInit
	go func() {
		defer pr.Close()
		var info struct {
			ChildPid int `json:"child-pid"`
		}
		if err := json.NewDecoder(pr).Decode(&info); err == nil && info.ChildPid > 0 {
			nsInit <- info.ChildPid
		}
		close(nsInit)
	}()
	l.afterStart = func() {
		pw.Close()
		if cgFD != nil {
			cgFD.Close()
		}
	}
	return cmd, nil
}

// started releases what command kept open for the child.
func (l *bwrapLauncher) started() {
	if l.afterStart != nil {
		l.afterStart()
		l.afterStart = nil
	}
}

// kill stops the sandbox and waits until every process it started is gone:
// with a cgroup, until the cgroup is empty; without, until the pid
// namespace's init has exited (the kernel kills and reaps every other
// process of the namespace first).
func (l *bwrapLauncher) kill(cmd *exec.Cmd) error {
	l.started()
	if cmd.Process == nil {
		return nil
	}
	killPID(-cmd.Process.Pid)
	cmd.Process.Kill()
	if l.cg != nil {
		return l.cg.killAll(10 * time.Second)
	}
	var pid int
	select {
	case pid = <-l.nsInit:
	case <-time.After(time.Second):
	}
	if pid <= 0 {
		return nil // bwrap died before starting the namespace
	}
	return waitExited(pid, 10*time.Second)
}

// waitExited waits until pid has exited (gone or a zombie).
func waitExited(pid int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return nil
		}
		// The state follows the parenthesised command name.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox: pid-namespace init %d still alive %v after SIGKILL", pid, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (l *bwrapLauncher) close() error {
	if l.cg == nil {
		return nil
	}
	if err := l.cg.killAll(10 * time.Second); err != nil {
		return err
	}
	return l.cg.remove()
}

// searchable checks that uid can reach p: every ancestor directory must be
// searchable by others (or owned by uid), since bwrap opens the mount
// sources as the sandbox user. MkdirTemp makes such directories.
func searchable(p string, uid int) error {
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		owner, ok := fileUID(fi)
		if fi.Mode().Perm()&0o001 == 0 && !(ok && owner == uid) {
			return fmt.Errorf("%s (mode %v) is not searchable by the sandbox uid %d: create workspaces with sandbox.MkdirTemp or chmod o+x", d, fi.Mode().Perm(), uid)
		}
		if d == "/" {
			return nil
		}
	}
}

// MkdirTemp is os.MkdirTemp with mode 0711, so that the unprivileged
// sandbox user can reach mounts below it.
func MkdirTemp(dir, pattern string) (string, error) {
	d, err := os.MkdirTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(d, 0o711); err != nil {
		os.RemoveAll(d)
		return "", err
	}
	return d, nil
}

// chownTree gives uid:gid every file under root (symlinks themselves, not
// their targets).
func chownTree(root string, uid, gid int) error {
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("sandbox: chown %s to %d:%d: %w", root, uid, gid, err)
	}
	return nil
}

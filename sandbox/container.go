package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Container runs task environments in containers through a
// docker-compatible CLI (docker or podman), the way Harbor runs them: one
// long-lived container per episode (a Box) from the task's image, started
// as `sh -c "sleep infinity"`; the agent's persistent shell and the
// verifier are `ENGINE exec` processes inside it, so files, services and
// processes the agent leaves are what the verifier sees.
//
// Host quirks are set, not assumed: podman gets the runc runtime when runc
// is installed (crun refuses hybrid cgroup layouts), and every container
// gets nofile/nproc ulimits within this process's own hard limits (podman's
// default nofile of 1048576 fails where the hard limit is lower).
//
// Start (the Runner interface) keeps the older shape for callers that only
// need a shell in an image: a Box from Spec.Image with Spec.Workdir bound at
// /app.
type Container struct {
	Engine       string // CLI name or path; default "docker"
	Runtime      string // OCI runtime (--runtime); "" picks runc for podman when it is installed
	DefaultImage string // used when Spec.Image is empty
	ExtraArgs    []string
	// ExecTimeout bounds each Box.Run (a host check, a copy's mkdir): the
	// container's files are the agent's, and a command through them can
	// block (a FIFO at /etc/passwd that the engine reads for the user, a
	// sleeping script in place of a tool). 0: DefaultExecTimeout.
	ExecTimeout time.Duration
}

// DefaultExecTimeout is Container.ExecTimeout's default.
const DefaultExecTimeout = 2 * time.Minute

// ErrExecTimeout marks a Box.Run cut off by Container.ExecTimeout (not by
// its caller's context).
var ErrExecTimeout = errors.New("container command did not finish within its deadline")

func (c Container) engine() string { return cmp.Or(c.Engine, "docker") }

// Name is the engine's CLI name ("podman", "docker").
func (c Container) Name() string { return filepath.Base(c.engine()) }

func (c Container) runtimeArgs() []string {
	if c.Runtime != "" {
		return []string{"--runtime", c.Runtime}
	}
	if c.Name() == "podman" {
		if p, err := exec.LookPath("runc"); err == nil {
			return []string{"--runtime", p}
		}
	}
	return nil
}

// Available reports whether the engine answers.
func (c Container) Available(ctx context.Context) error {
	if err := sandboxSupported(); err != nil {
		return err
	}
	if _, err := c.run(ctx, "version", "--format", "{{.Client.Version}}"); err != nil {
		return fmt.Errorf("container engine %s: %w", c.engine(), err)
	}
	return nil
}

// run runs the engine CLI and returns its stdout; a failure carries stderr.
// Standard output past MaxEngineOutputBytes is an error (ErrOutputCap).
func (c Container) run(ctx context.Context, args ...string) ([]byte, error) {
	stdout, stderr := newCapWriter(MaxEngineOutputBytes), newCapWriter(MaxEngineErrorBytes)
	cmd := exec.CommandContext(ctx, c.engine(), args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	out := stdout.Bytes()
	if err != nil {
		if ctx.Err() != nil {
			return out, fmt.Errorf("%s %s: %w", c.Name(), args[0], ctx.Err())
		}
		return out, fmt.Errorf("%s %s: %w: %s", c.Name(), args[0], err, tailString(strings.TrimSpace(stderr.String()), 4000))
	}
	if stdout.Over() {
		return out, fmt.Errorf("%s %s: %w: %d bytes of standard output (cap %d)", c.Name(), args[0], ErrOutputCap, stdout.Total(), MaxEngineOutputBytes)
	}
	return out, nil
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// ErrStorageQuota marks a container the engine refused to create because
// its storage driver cannot apply a storage limit (podman's overlay driver
// needs an XFS backing file system with project quotas: "… only supported
// for backingFS xfs …"). Callers that can run without the limit test for
// it with errors.Is and retry without it.
var ErrStorageQuota = errors.New("storage limit not supported by the engine's storage driver")

// storageQuotaError is an engine failure recognised as ErrStorageQuota; its
// text is the engine's own.
type storageQuotaError struct{ err error }

func (e *storageQuotaError) Error() string        { return e.err.Error() }
func (e *storageQuotaError) Unwrap() error        { return e.err }
func (e *storageQuotaError) Is(target error) bool { return target == ErrStorageQuota }

// classifyCreate recognises the engine failures of `ENGINE run` that
// callers branch on, where StorageSupport could not tell beforehand
// (podman's and Docker's texts). The engine is an external CLI whose
// failures are text, so this is the one place that reads it.
func classifyCreate(err error) error {
	if err != nil && (strings.Contains(err.Error(), "only supported for backingFS") || strings.Contains(err.Error(), "--storage-opt is supported only for")) {
		return &storageQuotaError{err}
	}
	return err
}

// ErrBuildTimeout marks an image build that outlived its timeout.
var ErrBuildTimeout = errors.New("image build timed out")

// BuildImage builds contextDir (its Dockerfile) as repo:HASH, where HASH
// covers every file of the context (names, modes, contents, symlink
// targets): an unchanged context is built once and then found by tag
// (cached reports that). The build may take at most timeout (≤ 0: none).
func (c Container) BuildImage(ctx context.Context, contextDir, repo string, timeout time.Duration) (ref string, cached bool, err error) {
	h, err := hashTree(contextDir)
	if err != nil {
		return "", false, fmt.Errorf("build %s: %w", contextDir, err)
	}
	// The base images count too: a FROM image rebuilt or re-pulled under
	// the same name must not leave the old build in use.
	for _, from := range dockerfileFroms(filepath.Join(contextDir, "Dockerfile")) {
		id := from
		if out, err := c.run(ctx, "image", "inspect", "--format", "{{.Id}}", from); err == nil {
			id = strings.TrimSpace(string(out))
		}
		h = hashStrings(h, from, id)
	}
	ref = repo + ":" + h[:16]
	if _, err := c.run(ctx, "image", "inspect", "--format", "{{.Id}}", ref); err == nil {
		return ref, true, nil
	}
	bctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		bctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// --force-rm: a failed build leaves no stopped intermediate containers
	// (docker keeps them by default; podman removes them either way).
	args := []string{"build", "--force-rm", "-t", ref, "-f", filepath.Join(contextDir, "Dockerfile")}
	if c.Name() == "podman" {
		args = append(args, c.runtimeArgs()...)
		args = append(args, c.ulimitArgs()...)
	}
	args = append(args, contextDir)
	if _, err := c.run(bctx, args...); err != nil {
		if bctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			return "", false, fmt.Errorf("build %s: %w after %v", contextDir, ErrBuildTimeout, timeout)
		}
		return "", false, fmt.Errorf("build %s: %w", contextDir, err)
	}
	return ref, false, nil
}

// dockerfileFroms lists the images a Dockerfile's FROM lines name (flags
// such as --platform skipped; a stage name after AS, and stages that name
// an earlier stage, left out). Unreadable files give none.
func dockerfileFroms(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	stages := map[string]bool{}
	var froms []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.EqualFold(f[0], "FROM") {
			continue
		}
		f = f[1:]
		for len(f) > 0 && strings.HasPrefix(f[0], "--") {
			f = f[1:]
		}
		if len(f) == 0 {
			continue
		}
		if !stages[strings.ToLower(f[0])] && f[0] != "scratch" {
			froms = append(froms, f[0])
		}
		if len(f) >= 3 && strings.EqualFold(f[1], "AS") {
			stages[strings.ToLower(f[2])] = true
		}
	}
	return froms
}

// hashStrings extends the hex digest h with more strings.
func hashStrings(h string, more ...string) string {
	d := sha256.New()
	io.WriteString(d, h)
	for _, m := range more {
		io.WriteString(d, "\x00"+m)
	}
	return hex.EncodeToString(d.Sum(nil))
}

// hashTree is a SHA-256 over every entry of dir, in path order.
func hashTree(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%o\x00", filepath.ToSlash(rel), info.Mode())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			io.WriteString(h, t)
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
		}
		h.Write([]byte{0})
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ImageConfig is what an image says about how to run it.
type ImageConfig struct {
	User       string
	Env        []string
	WorkingDir string
}

// InspectImage reads ref's configuration.
func (c Container) InspectImage(ctx context.Context, ref string) (ImageConfig, error) {
	out, err := c.run(ctx, "image", "inspect", "--format", "{{json .Config}}", ref)
	if err != nil {
		return ImageConfig{}, err
	}
	var cfg ImageConfig
	if err := json.Unmarshal(bytes.TrimSpace(out), &cfg); err != nil {
		return ImageConfig{}, fmt.Errorf("inspect %s: %w", ref, err)
	}
	return cfg, nil
}

// BoxSpec describes one episode's container.
type BoxSpec struct {
	Image   string
	Env     map[string]string // added to the image's ENV
	Workdir string            // "" keeps the image's WORKDIR
	Mounts  []Mount
	Limits  Limits
	Network bool // the engine's default network; otherwise none
	// NoTmpfs keeps the image's /tmp (Harbor's containers have no tmpfs);
	// otherwise /tmp is a tmpfs of Limits.TmpBytes.
	NoTmpfs bool
	// StorageBytes limits the container's writable layer (--storage-opt
	// size; engines refuse it on storage drivers without quotas); 0: none.
	StorageBytes int64
	// Owner labels the container (RunLabel) with the directory of the run
	// that made it, so that ReapContainers can remove what a killed run
	// left; "" for none.
	Owner string
}

// RunLabel is the container label naming the run directory that owns it.
const RunLabel = "io.compactrl.run"

// ulimitArgs are nofile/nproc limits within this process's hard limits.
func (c Container) ulimitArgs() []string {
	nofile, nproc := hostHardLimits()
	return []string{"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile, nofile), "--ulimit", fmt.Sprintf("nproc=%d:%d", nproc, nproc)}
}

// createArgs builds `ENGINE run` arguments (pure, for tests).
func (c Container) createArgs(spec BoxSpec) ([]string, error) {
	if spec.Image == "" {
		return nil, errors.New("sandbox: container runner needs an image")
	}
	lim := spec.Limits.withDefaults()
	network := "none"
	if spec.Network {
		network = "bridge"
	}
	a := []string{"run", "-d", "--network", network}
	a = append(a, c.runtimeArgs()...)
	a = append(a, c.ulimitArgs()...)
	a = append(a,
		"--memory", fmt.Sprint(lim.SessionMemoryBytes),
		"--pids-limit", fmt.Sprint(lim.Processes),
		"--ulimit", fmt.Sprintf("fsize=%d:%d", lim.FileSizeBytes, lim.FileSizeBytes),
	)
	if !spec.NoTmpfs {
		a = append(a, "--tmpfs", fmt.Sprintf("/tmp:rw,size=%d", lim.TmpBytes))
	}
	if lim.CPUs > 0 {
		a = append(a, "--cpus", fmt.Sprint(lim.CPUs))
	}
	if spec.StorageBytes > 0 {
		a = append(a, "--storage-opt", fmt.Sprintf("size=%dm", (spec.StorageBytes+(1<<20)-1)>>20))
	}
	if spec.Workdir != "" {
		a = append(a, "-w", spec.Workdir)
	}
	if spec.Owner != "" {
		a = append(a, "--label", RunLabel+"="+spec.Owner)
	}
	for _, m := range spec.Mounts {
		v := m.Host + ":" + m.Target
		if !m.Writable {
			v += ":ro"
		}
		a = append(a, "-v", v)
	}
	a = append(a, envArgs(spec.Env)...)
	a = append(a, c.ExtraArgs...)
	a = append(a, spec.Image, "sh", "-c", "sleep infinity")
	return a, nil
}

func envArgs(env map[string]string) []string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var a []string
	for _, k := range keys {
		a = append(a, "-e", k+"="+env[k])
	}
	return a
}

// Box is one running container.
type Box struct {
	c       Container
	id      string
	initPID int    // host pid of the container's init; 0 where the host cannot see it
	initNS  string // its pid namespace, as /proc names it
	mu      sync.Mutex
	removed bool
}

// Create starts a container for spec. An engine that cannot apply the
// storage limit (StorageSupport, asked before anything is created; or the
// engine's refusal where it could not be told) fails with an error that is
// ErrStorageQuota.
func (c Container) Create(ctx context.Context, spec BoxSpec) (*Box, error) {
	if err := sandboxSupported(); err != nil {
		return nil, err
	}
	if spec.StorageBytes > 0 {
		// Asked of the engine up front, not read from its error text.
		if ss, err := c.StorageSupport(ctx); err == nil && !ss.Quota {
			return nil, fmt.Errorf("sandbox: %w", &storageQuotaError{errors.New(ss.Why)})
		}
	}
	args, err := c.createArgs(spec)
	if err != nil {
		return nil, err
	}
	out, err := c.run(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", classifyCreate(err))
	}
	id := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(id, '\n'); i >= 0 {
		id = id[i+1:]
	}
	if id == "" {
		return nil, fmt.Errorf("sandbox: %s run printed no container id", c.Name())
	}
	b := &Box{c: c, id: id}
	if out, err := c.run(ctx, "inspect", "--format", "{{.State.Pid}}", id); err == nil {
		fmt.Sscanf(strings.TrimSpace(string(out)), "%d", &b.initPID)
		b.initNS = pidNS(b.initPID)
	}
	return b, nil
}

// ID is the container's id.
func (b *Box) ID() string { return b.id }

// ExecSpec is one process started in a Box.
type ExecSpec struct {
	User    string // "" : the image's USER
	Workdir string // "" : the container's working directory
	Env     map[string]string
	Cmd     []string
}

func (b *Box) execArgs(s ExecSpec, interactive bool) []string {
	a := []string{"exec"}
	if interactive {
		a = append(a, "-i")
	}
	if s.User != "" {
		a = append(a, "-u", s.User)
	}
	if s.Workdir != "" {
		a = append(a, "-w", s.Workdir)
	}
	a = append(a, envArgs(s.Env)...)
	a = append(a, b.id)
	return append(a, s.Cmd...)
}

// Run runs one command to completion and returns its combined output and
// exit status. err is an engine failure (or ctx), not the command's, or
// output past MaxExecOutputBytes (ErrOutputCap: out holds the first
// MaxExecOutputBytes, code the command's status).
//
// Each Run has its own deadline, Container.ExecTimeout: past it the engine
// process is killed and err is ErrExecTimeout.
func (b *Box) Run(parent context.Context, s ExecSpec) (out string, code int, err error) {
	limit := cmp.Or(b.c.ExecTimeout, DefaultExecTimeout)
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.c.engine(), b.execArgs(s, false)...)
	buf := newCapWriter(MaxExecOutputBytes)
	cmd.Stdout, cmd.Stderr = buf, buf
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case parent.Err() != nil:
		return buf.String(), -1, parent.Err()
	case ctx.Err() != nil:
		return buf.String(), -1, fmt.Errorf("%s exec %s: %w (%v)", b.c.Name(), strings.Join(s.Cmd, " "), ErrExecTimeout, limit)
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil:
		code = cmd.ProcessState.ExitCode() // exited; something else held its output open
	default:
		return buf.String(), -1, fmt.Errorf("%s exec: %w", b.c.Name(), err)
	}
	if buf.Over() {
		return buf.String(), code, fmt.Errorf("%s exec %s: %w: %d bytes (cap %d)", b.c.Name(), strings.Join(s.Cmd, " "), ErrOutputCap, buf.Total(), MaxExecOutputBytes)
	}
	return buf.String(), code, nil
}

// CopyIn copies the contents of the host directory src into target (made
// if missing) inside the container, owned by the container's root.
func (b *Box) CopyIn(ctx context.Context, src, target string) error {
	if _, code, err := b.Run(ctx, ExecSpec{User: "0", Cmd: []string{"mkdir", "-p", target}}); err != nil || code != 0 {
		return fmt.Errorf("copy into %s: mkdir -p %s failed (exit %d): %v", b.id[:12], target, code, err)
	}
	if _, err := b.c.run(ctx, "cp", src+"/.", b.id+":"+target); err != nil {
		return fmt.Errorf("copy %s into %s:%s: %w", src, b.id[:12], target, err)
	}
	return nil
}

// Remove kills every process of the container and removes it.
func (b *Box) Remove() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.removed {
		return nil
	}
	b.removed = true
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"rm", "-f", b.id} // docker's -f kills with SIGKILL
	if b.c.Name() == "podman" {
		args = []string{"rm", "-f", "-t", "0", b.id} // podman's waits 10 s for SIGTERM unless told not to
	}
	_, err := b.c.run(ctx, args...)
	if err == nil {
		return nil
	}
	// A removal that races the container's own exit can fail in podman
	// ("container not running … could not be stopped: sending SIGKILL");
	// the container is stopped by then, and a second removal completes it,
	// or finds it already gone.
	select {
	case <-time.After(250 * time.Millisecond):
	case <-ctx.Done():
		return fmt.Errorf("sandbox: %w", err)
	}
	_, err2 := b.c.run(ctx, args...)
	if err2 == nil || noSuchContainer(err2) {
		return nil
	}
	return fmt.Errorf("sandbox: %w (and again: %v)", err, err2)
}

// noSuchContainer reports whether err is an engine's answer that the
// container does not exist (podman: "no container with name or ID", docker:
// "No such container").
func noSuchContainer(err error) bool {
	m := strings.ToLower(err.Error())
	return strings.Contains(m, "no container with name or id") || strings.Contains(m, "no such container")
}

// Shell starts a persistent shell (`ENGINE exec -i … bash`) in the box with
// the Session protocol. Closing it ends the shell (its input closes) and
// leaves running whatever its commands started in the background, as a
// Harbor agent's exec'd commands leave theirs. A command's timeout kills
// every process of the shell's session (background jobs of that shell
// too; processes detached with setsid survive) and restarts the shell.
func (b *Box) Shell(ctx context.Context, s ExecSpec, limits Limits) (Session, error) {
	s.Cmd = []string{"bash", "--noprofile", "--norc"}
	token := newExecToken()
	s.Env = withToken(s.Env, token)
	return newShellSession(&boxLauncher{box: b, args: b.execArgs(s, true), token: token}, limits)
}

// ExecTokenEnv carries a random token, known only to the host, in the
// environment of each exec the host must find among the container's
// processes (a shell, the verifier): the host takes a process for its exec
// only when its initial environment (/proc/PID/environ) holds the token,
// never by inference alone (a process of the container may pose as an
// exec's leader).
const ExecTokenEnv = "COMPACTRL_EXEC_TOKEN"

func newExecToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // Read never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// withToken is env with ExecTokenEnv=token added (env is not changed).
func withToken(env map[string]string, token string) map[string]string {
	out := make(map[string]string, len(env)+1)
	maps.Copy(out, env)
	out[ExecTokenEnv] = token
	return out
}

type boxLauncher struct {
	box    *Box
	args   []string
	token  string       // ExecTokenEnv of this shell's exec
	before map[int]bool // exec leaders alive before this shell started
	leader int          // host pid of this shell (its session id); 0 unknown
}

func (l *boxLauncher) command() (*exec.Cmd, error) {
	l.before = l.box.execLeaders()
	l.leader = 0
	cmd := exec.Command(l.box.c.engine(), l.args...)
	cmd.SysProcAttr = groupProcAttr()
	return cmd, nil
}

func (l *boxLauncher) started() {}

// kill stops the shell: every process of its session in the container
// (found from the host), then the exec client.
func (l *boxLauncher) kill(cmd *exec.Cmd) error {
	if l.leader == 0 {
		l.leader = l.box.newLeader(l.before, "bash", l.token)
	}
	var err error
	if l.leader > 0 {
		err = l.box.killSession(l.leader)
	} else if l.box.initPID == 0 {
		// The host cannot see the container's processes (a VM-backed
		// engine): restarting the container is the only way to kill them.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		_, err = l.box.c.run(ctx, "restart", "-t", "0", l.box.id)
		cancel()
	}
	if cmd.Process != nil {
		killPID(-cmd.Process.Pid)
	}
	return err
}

func (l *boxLauncher) close() error { return nil }

// release marks boxLauncher's Close as ending the shell only.
func (l *boxLauncher) release() {}

// Start implements Runner: a Box from spec.Image (or DefaultImage) with
// spec.Workdir bound at /app and the sandbox's base environment, and one
// persistent shell in /app. Closing the session removes the container.
func (c Container) Start(ctx context.Context, spec Spec) (Session, error) {
	if err := cmp.Or(spec.validate(), sandboxSupported()); err != nil {
		return nil, err
	}
	bs, err := c.boxSpec(spec)
	if err != nil {
		return nil, err
	}
	box, err := c.Create(ctx, bs)
	if err != nil {
		return nil, err
	}
	sess, err := box.Shell(ctx, ExecSpec{Workdir: AppDir}, spec.Limits)
	if err != nil {
		box.Remove()
		return nil, err
	}
	return &boxSession{Session: sess, box: box}, nil
}

// boxSpec is Start's container (pure, for tests).
func (c Container) boxSpec(spec Spec) (BoxSpec, error) {
	image := cmp.Or(spec.Image, c.DefaultImage)
	if image == "" {
		return BoxSpec{}, fmt.Errorf("sandbox: container runner needs an image (Spec.Image or Container.DefaultImage)")
	}
	env := baseEnv(spec.Env)
	delete(env, "PATH") // the image knows its own PATH
	return BoxSpec{
		Image: image, Env: env, Workdir: AppDir, Limits: spec.Limits, Network: spec.Network,
		Mounts: append([]Mount{{Host: spec.Workdir, Target: AppDir, Writable: true}}, spec.Mounts...),
	}, nil
}

// boxSession is a shell whose Close also removes its container.
type boxSession struct {
	Session
	box *Box
}

func (s *boxSession) Close() error { return errors.Join(s.Session.Close(), s.box.Remove()) }

// ErrNotStarted means a guarded command's exec process never showed up in
// the container: the engine failed, or processes already in the container
// kept it from starting (they can lower its limits, or stop it).
var ErrNotStarted = errors.New("the exec process did not start")

// GuardedResult is the outcome of Box.RunGuarded.
type GuardedResult struct {
	ExitCode int  // the command's exit status (128+N: killed by signal N); -1 on timeout
	TimedOut bool // killed at the timeout
	Duration time.Duration
	// Leftovers counts the processes of the command's session still alive
	// when it exited (then killed): any of them could have written the
	// guarded files after it.
	Leftovers int
	// Holders are the processes that still had a file of a guarded
	// directory open or mapped when the command exited.
	Holders []string
	// Violations are opens of the guarded directories by processes
	// outside the command's session while it ran, or by anyone after it
	// exited, and changes to them by any process outside the command's
	// run (its session and what it forked), from the directories' creation
	// on: the first few of ViolationCount.
	Violations     []ChannelOpen
	ViolationCount int
	// Traced reports a process of the command's session that was being
	// ptraced when it opened a guarded file (refused) or when the command
	// ended (a tracer can stop it, or make it do anything).
	Traced bool
	// Guarded reports that a GuardedDir guarded the run.
	Guarded bool
	// OutputBytes counts what the exec process's output pipe carried
	// (only the first MaxExecOutputBytes are kept); more than that means
	// a process wrote into it without end.
	OutputBytes int64
}

// RunGuarded runs s.Cmd in the box as a fresh exec process W (its own
// session, as runc and crun start exec processes) and opens the guarded
// directories bound into the box to W's session only: W is held on a pipe
// until the host has found it among the box's processes and admitted its
// session, then runs. An open is admitted only while W is alive: once it
// exits (or at timeout) the directories are sealed, their holders listed,
// and what is left of W's session counted and killed.
// With no guards, or where the host cannot see the box's processes, the
// command runs unguarded (Guarded false).
func (b *Box) RunGuarded(ctx context.Context, s ExecSpec, timeout time.Duration, guards ...*GuardedDir) (GuardedResult, error) {
	s.Cmd = append([]string{"bash", "-c", `read -r _ || exit 97; unset ` + ExecTokenEnv + `; exec "$@"`, "compactrl-verifier"}, s.Cmd...)
	token := newExecToken()
	s.Env = withToken(s.Env, token)
	before := b.execLeaders()
	cmd := exec.Command(b.c.engine(), b.execArgs(s, true)...)
	cmd.SysProcAttr = groupProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return GuardedResult{}, err
	}
	out := newCapWriter(MaxExecOutputBytes)
	cmd.Stdout, cmd.Stderr = out, out
	// A process of the box that reopened the exec's output pipe
	// (/proc/PID/fd/1) keeps it open after the command exits: Wait
	// returns 2 s after the exit regardless.
	cmd.WaitDelay = 2 * time.Second
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		return GuardedResult{}, fmt.Errorf("%s exec: %w", b.c.Name(), err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	res := GuardedResult{}
	var traced atomic.Bool
	leader := 0
	if len(guards) > 0 && b.initPID != 0 {
		leader = b.newLeader(before, "bash", token)
		if leader == 0 {
			killPID(-cmd.Process.Pid)
			werr := <-waited
			return res, fmt.Errorf("sandbox: container %s: %w (exit %d): %s", b.id, ErrNotStarted, exitCode(werr), tailString(out.String(), 2000))
		}
		if _, sid, ok := procStat(leader); !ok || sid != leader {
			b.killSession(sid)
			killPID(-cmd.Process.Pid)
			<-waited
			return res, fmt.Errorf("sandbox: %s started the exec process %d in session %d, not its own: the guarded dir cannot tell the verifier's processes from others", b.c.Name(), leader, sid)
		}
		admit := func(pid int) bool {
			_, sid, ok := procStat(pid)
			if !ok || sid != leader || !procAlive(leader) {
				return false
			}
			if threadsTraced(pid) {
				traced.Store(true)
				return false
			}
			return true
		}
		// Changes are reported after the fact, when the process that made
		// one may be gone: the kernel's fork events say whose it was.
		forks, err := newForkTracker(leader)
		if err != nil {
			b.killSession(leader)
			killPID(-cmd.Process.Pid)
			<-waited
			return res, fmt.Errorf("sandbox: guarded run in container %s: %w", b.id, err)
		}
		defer forks.close()
		change := func(pid int) bool {
			if m, _ := forks.member(pid); m {
				return true
			}
			_, sid, ok := procStat(pid)
			return ok && sid == leader
		}
		for _, g := range guards {
			g.Admit(admit, change)
		}
		res.Guarded = true
	}
	io.WriteString(stdin, "go\n")
	stdin.Close()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	var werr error
	select {
	case werr = <-waited:
		res.ExitCode = exitCode(werr)
		if errors.Is(werr, exec.ErrWaitDelay) && cmd.ProcessState != nil {
			res.ExitCode = cmd.ProcessState.ExitCode()
		}
	case <-timer:
		res.TimedOut, res.ExitCode = true, -1
	case <-ctx.Done():
		res.ExitCode = -1
	}
	res.Duration = time.Since(begin)
	for _, g := range guards {
		g.Seal()
	}
	res.Traced = traced.Load()
	for _, g := range guards {
		res.Holders = append(res.Holders, g.Holders()...)
	}
	if leader > 0 {
		for _, pid := range sessionMembers(leader) {
			if threadsTraced(pid) {
				traced.Store(true)
			}
			if pid != leader {
				res.Leftovers++
			}
		}
		res.Traced = traced.Load()
		if err := b.killSession(leader); err != nil {
			return res, err
		}
	}
	if len(guards) > 0 {
		// Nothing in the box may write the guarded files once the command
		// is done: a descriptor passed over a unix socket and kept in
		// flight is in no process's table, so no holder scan finds it.
		// Every process of the box dies before the caller reads them.
		if err := b.killAll(); err != nil {
			return res, err
		}
	}
	if res.ExitCode == -1 {
		killPID(-cmd.Process.Pid)
		<-waited
	}
	for _, g := range guards {
		g.Sync()
		res.Violations = append(res.Violations, g.Violations()...)
		res.ViolationCount += g.ViolationCount()
	}
	res.OutputBytes = out.Total()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if res.ExitCode == -1 && !res.TimedOut {
		return res, fmt.Errorf("%s exec: %v: %s", b.c.Name(), werr, tailString(out.String(), 2000))
	}
	return res, nil
}

// exitCode is a finished command's exit status (-1 if it did not run).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// ContainerExists reports whether the engine still knows container id.
func (c Container) ContainerExists(ctx context.Context, id string) bool {
	_, err := c.run(ctx, "container", "inspect", "--format", "{{.Id}}", id)
	return err == nil
}

// ReapContainers removes every container labelled as owned by one of the
// run directories dirs (runs that died without removing their containers,
// as ReapRunDirs reports them) and returns their ids; the networks of
// their compose projects (labelled the same) go with them.
func (c Container) ReapContainers(ctx context.Context, dirs []string) ([]string, error) {
	var removed []string
	for _, d := range dirs {
		out, err := c.run(ctx, "ps", "-aq", "--filter", "label="+RunLabel+"="+d)
		if err != nil {
			return removed, fmt.Errorf("reap containers of %s: %w", d, err)
		}
		for _, id := range strings.Fields(string(out)) {
			b := &Box{c: c, id: id}
			if err := b.Remove(); err != nil {
				return removed, err
			}
			removed = append(removed, id)
		}
		// A compose project's network (ComposeUp labels it too).
		out, err = c.run(ctx, "network", "ls", "-q", "--filter", "label="+RunLabel+"="+d)
		if err != nil {
			return removed, fmt.Errorf("reap networks of %s: %w", d, err)
		}
		for _, id := range strings.Fields(string(out)) {
			if _, err := c.run(ctx, "network", "rm", id); err != nil {
				return removed, fmt.Errorf("reap network %s of %s: %w", id, d, err)
			}
		}
	}
	return removed, nil
}

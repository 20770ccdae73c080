package harbor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/sandbox"
)

// Container paths of Harbor's environment layout.
const (
	testsDir    = "/tests"
	verifierDir = "/logs/verifier"
	agentLogDir = "/logs/agent"
	solutionDir = "/solution"
)

// guardedDirBytes bounds each guarded tmpfs (/tests, /logs/verifier).
const guardedDirBytes = 512 << 20

// ErrBuild marks a task whose environment image could not be built.
var ErrBuild = errors.New("environment build failed")

// boxBackend runs episodes the way Harbor runs them: the task's image,
// one container for the whole episode, the agent's shell and then the
// verifier inside it.
type boxBackend struct {
	e  *Env
	c  sandbox.Container
	ep *boxEpisode // the current episode's container; nil between episodes
}

// boxEpisode is one episode's container and what the verifier needs of it.
type boxEpisode struct {
	c       sandbox.Container
	task    *Task
	box     *sandbox.Box
	image   string
	user    string // the agent's user ("" : the image's USER)
	workdir string // [environment] workdir, else the image's WORKDIR
	tests   *sandbox.GuardedDir
	logs    *sandbox.GuardedDir
	project *sandbox.ComposeProject // compose tasks: the main service is box
	notes   *[]string               // the Env's: what the episode could not apply
}

// admit builds or finds the task's image once, before any episode: a task
// whose image cannot be built is refused.
func (b *boxBackend) admit(ctx context.Context, note func(string)) string {
	t := b.e.task
	begin := time.Now()
	ref, cached, err := ImageRef(ctx, t, b.c, b.c.DefaultImage)
	if err != nil {
		return err.Error()
	}
	if !cached {
		note(fmt.Sprintf("task %s: image %s built in %.1fs", t.Name, ref, time.Since(begin).Seconds()))
	}
	return ""
}

// stageSolution copies solution/ into the episode's container at
// /solution (solve.sh executable).
func (b *boxBackend) stageSolution(ctx context.Context) error {
	e := b.e
	if b.ep == nil {
		return errors.New("no container: the episode has ended")
	}
	sol := filepath.Join(e.sh.Workspace(), "solution")
	if err := copyDir(filepath.Join(e.task.Dir, "solution"), sol); err != nil {
		return fmt.Errorf("copy solution: %w", err)
	}
	if err := os.Chmod(filepath.Join(sol, "solve.sh"), 0o755); err != nil {
		return err
	}
	return b.ep.box.CopyIn(ctx, sol, solutionDir)
}

// close removes the episode's container and guarded directories.
func (b *boxBackend) close() error {
	if b.ep == nil {
		return nil
	}
	err := b.ep.close()
	b.ep = nil
	return err
}

// ImageRef is the image the task's episodes run in: [environment]
// docker_image, else environment/Dockerfile built (and cached by the
// content hash of environment/) as localhost/compactrl-task-NAME:HASH,
// else fallback (the runner's default image, for environment/app/ tasks).
// cached reports a build found in the engine's store.
func ImageRef(ctx context.Context, t *Task, c sandbox.Container, fallback string) (ref string, cached bool, err error) {
	if img := t.Config.Environment.DockerImage; img != "" {
		return img, true, nil
	}
	envDir := filepath.Join(t.Dir, "environment")
	if t.composeFile() != "" {
		// Harbor's main service: environment/Dockerfile or docker_image;
		// the task's other services are the compose implementation's.
		if _, err := c.ComposeCommand(ctx); err != nil {
			return "", false, fmt.Errorf("task %s: environment/docker-compose.yaml: %w", t.Name, err)
		}
	}
	// Harbor reads environment/docker-compose.yaml only; a task that ships
	// a compose file under another name means it for its services.
	for _, f := range []string{"docker-compose.yml", "compose.yaml", "compose.yml"} {
		if _, err := os.Stat(filepath.Join(envDir, f)); err == nil && t.composeFile() == "" {
			return "", false, fmt.Errorf("task %s: environment/%s: Harbor runs a task's services from environment/docker-compose.yaml only", t.Name, f)
		}
	}
	if _, err := os.Stat(filepath.Join(envDir, "Dockerfile")); err == nil {
		timeout := time.Duration(t.Config.Environment.BuildTimeoutSec * float64(time.Second))
		if timeout <= 0 {
			timeout = DefaultBuildTimeout
		}
		ref, cached, err := c.BuildImage(ctx, envDir, "localhost/compactrl-task-"+imageName(t.Name), timeout)
		if err != nil {
			return "", false, fmt.Errorf("task %s: %w: %w", t.Name, ErrBuild, err)
		}
		return ref, cached, nil
	}
	if fallback == "" {
		return "", false, fmt.Errorf("task %s: no [environment] docker_image, no environment/Dockerfile, and no default image (--image)", t.Name)
	}
	return fallback, true, nil
}

// DefaultBuildTimeout is Harbor's build_timeout_sec default.
const DefaultBuildTimeout = 600 * time.Second

var nonImageChars = regexp.MustCompile(`[^a-z0-9._-]+`)

func imageName(task string) string {
	s := strings.Trim(nonImageChars.ReplaceAllString(strings.ToLower(task), "-"), "-._")
	if s == "" {
		s = "task"
	}
	return s
}

// start starts the episode's container: the image (built if needed),
// the task's [environment] env and workdir, its limits and network, two
// guarded directories bound at /tests and /logs/verifier (closed to
// everything in the container until the verifier runs), environment/app/
// copied to /app when the task has no Dockerfile, and the agent's shell.
func (bb *boxBackend) start(ctx context.Context) error {
	e, c, t := bb.e, bb.c, bb.e.task
	ws, err := e.sh.MakeWorkspace(e.opts.WorkRoot, "harbor-"+t.Name+"-", 0)
	if err != nil {
		return err
	}
	b := &boxEpisode{c: c, task: t, user: t.Config.Agent.User, notes: &e.notes}
	bb.ep = b
	begin := time.Now()
	ref, cached, err := ImageRef(ctx, t, c, c.DefaultImage)
	if err != nil {
		return err
	}
	b.image = ref
	// Measured before the agent's shell starts, which resets the metrics.
	pending := map[shelltask.Metric]float64{
		metricImageBuildSeconds: time.Since(begin).Seconds(),
		metricImageCached:       boolMetric(cached),
	}
	cfg, err := c.InspectImage(ctx, ref)
	if err != nil {
		return fmt.Errorf("task %s: %w", t.Name, err)
	}
	b.workdir = t.Config.Environment.Workdir
	if b.workdir == "" {
		b.workdir = cfg.WorkingDir
	}
	if b.workdir == "" {
		b.workdir = "/"
	}
	if err := b.openGuards(ws, e.opts.RequireGuard); err != nil {
		return fmt.Errorf("task %s: %w", t.Name, err)
	}
	begin = time.Now()
	if err := b.create(ctx, e); err != nil {
		return fmt.Errorf("task %s: %w", t.Name, err)
	}
	if src := t.AppDir(); src != "" && !t.hasDockerfile() {
		if err := b.box.CopyIn(ctx, src, "/app"); err != nil {
			return fmt.Errorf("task %s: %w", t.Name, err)
		}
	}
	sess, err := b.box.Shell(ctx, sandbox.ExecSpec{User: b.user, Workdir: b.workdir}, e.limits())
	if err != nil {
		return fmt.Errorf("task %s: agent shell: %w", t.Name, err)
	}
	pending[metricContainerStartSeconds] = time.Since(begin).Seconds()
	e.sh.StartSession(sess, e.agentTimeout())
	for k, v := range pending {
		e.sh.SetMetric(k, v)
	}
	return nil
}

// composeFile is the task's environment/docker-compose.yaml ("" when it
// has none): its services run beside the main one, as in Harbor.
func (t *Task) composeFile() string {
	p := filepath.Join(t.Dir, "environment", "docker-compose.yaml")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

func (t *Task) hasDockerfile() bool {
	_, err := os.Stat(filepath.Join(t.Dir, "environment", "Dockerfile"))
	return err == nil
}

func boolMetric(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// openGuards mounts the guarded /tests and /logs/verifier directories
// under ws. Without a guard (not root, not Linux) they are plain
// directories, unless required.
func (b *boxEpisode) openGuards(ws string, require bool) error {
	tests, logs := filepath.Join(ws, "tests"), filepath.Join(ws, "logs-verifier")
	for _, d := range []string{tests, logs} {
		if err := os.Mkdir(d, 0o777); err != nil {
			return err
		}
		os.Chmod(d, 0o777)
	}
	if err := sandbox.GuardAvailable(); err != nil {
		if require {
			return err
		}
		*b.notes = append(*b.notes, "verdict not guarded: "+err.Error())
		return nil
	}
	var err error
	if b.tests, err = sandbox.OpenGuardedDir(tests, guardedDirBytes); err != nil {
		return err
	}
	b.logs, err = sandbox.OpenGuardedDir(logs, guardedDirBytes)
	return err
}

func (b *boxEpisode) testsHost(ws string) string { return filepath.Join(ws, "tests") }
func (b *boxEpisode) logsHost(ws string) string  { return filepath.Join(ws, "logs-verifier") }

// create starts the container. A storage limit the engine's storage
// driver cannot apply is dropped with a note, never silently.
func (b *boxEpisode) create(ctx context.Context, e *Env) error {
	ws := e.sh.Workspace()
	// [environment] storage_mb bounds the container's writable layer where
	// the storage driver has quotas; without it no default applies (the
	// engine's layer has no size to set on such hosts).
	storage := e.task.Config.Environment.StorageBytes()
	spec := sandbox.BoxSpec{
		Image: b.image, Env: e.taskEnv(nil), Workdir: e.task.Config.Environment.Workdir,
		Limits: e.limits(), Network: e.network(), NoTmpfs: true, StorageBytes: storage, Owner: e.opts.WorkRoot,
		Mounts: []sandbox.Mount{
			{Host: b.testsHost(ws), Target: testsDir, Writable: true},
			{Host: b.logsHost(ws), Target: verifierDir, Writable: true},
		},
	}
	if file := e.task.composeFile(); file != "" {
		if storage > 0 {
			*b.notes = append(*b.notes, "storage_mb not enforced: compose tasks' services get no storage limit (nor do Harbor's)")
		}
		spec.StorageBytes = 0
		project, box, err := b.c.ComposeUp(ctx, sandbox.ComposeSpec{Project: composeProject(filepath.Base(ws)), TaskFile: file, Dir: ws, Main: spec,
			Vars: e.composeVars(b.image)})
		if err != nil {
			return err
		}
		b.project, b.box = project, box
		return b.mkAgentLogDir(ctx)
	}
	box, note, err := createBox(spec, func(s sandbox.BoxSpec) (*sandbox.Box, error) { return b.c.Create(ctx, s) })
	if note != "" {
		*b.notes = append(*b.notes, note)
	}
	if err != nil {
		return err
	}
	b.box = box
	return b.mkAgentLogDir(ctx)
}

func (b *boxEpisode) mkAgentLogDir(ctx context.Context) error {
	if _, code, err := b.box.Run(ctx, sandbox.ExecSpec{User: "0", Cmd: []string{"mkdir", "-p", agentLogDir}}); err != nil || code != 0 {
		return fmt.Errorf("mkdir %s in the container failed (exit %d): %v", agentLogDir, code, err)
	}
	return nil
}

// createBox creates the container with create; when the engine's storage
// driver cannot apply the storage limit (sandbox.ErrStorageQuota), it
// drops the limit, says so in note, and creates it once more.
func createBox(spec sandbox.BoxSpec, create func(sandbox.BoxSpec) (*sandbox.Box, error)) (box *sandbox.Box, note string, err error) {
	box, err = create(spec)
	if err != nil && spec.StorageBytes > 0 && errors.Is(err, sandbox.ErrStorageQuota) {
		note = "storage_mb not enforced: " + strings.TrimPrefix(err.Error(), "sandbox: ")
		spec.StorageBytes = 0
		box, err = create(spec)
	}
	return box, note, err
}

// close removes the container and the guarded directories.
func (b *boxEpisode) close() error {
	var errs []error
	if b.project != nil {
		errs = append(errs, b.project.Down())
		b.project, b.box = nil, nil
	}
	if b.box != nil {
		errs = append(errs, b.box.Remove())
	}
	for _, g := range []*sandbox.GuardedDir{b.tests, b.logs} {
		if g != nil {
			errs = append(errs, g.Close())
		}
	}
	return errors.Join(errs...)
}

// Verifier outcomes that are neither a reward nor the attempt's failure.
var (
	// ErrVerifier marks a verifier that could not run or finish: its
	// interpreter is missing, test.sh does not parse, or it timed out.
	ErrVerifier = agent.ErrVerifier
)

// stageTests empties the guarded /tests and /logs/verifier and copies the
// task's tests/ into /tests (test.sh made executable, as Harbor does).
// Both directories are bound into the agent's container, whose processes
// may have planted symbolic links there: every step goes through an
// os.Root (nothing resolves outside the directory), files are created
// with O_EXCL (never through an existing entry) and modes are set on the
// open descriptor, never by a path a container process can redirect.
func (b *boxEpisode) stageTests(ws string, t *Task) error {
	for _, d := range []string{b.testsHost(ws), b.logsHost(ws)} {
		if err := clearDir(d); err != nil {
			return err
		}
	}
	return stageInto(filepath.Join(t.Dir, "tests"), b.testsHost(ws))
}

// stageInto copies the tree src into the existing directory dst through
// an os.Root of dst: directories, symbolic links as links, regular files
// created exclusively, with their permission bits (test.sh 0755) set on
// the open file.
func stageInto(src, dst string) error {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return root.Mkdir(rel, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return root.Symlink(link, rel)
		case info.Mode().IsRegular():
			perm := info.Mode().Perm()
			if rel == "test.sh" {
				perm = 0o755
			}
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, in)
			if err == nil {
				err = out.Chmod(perm) // the descriptor's file, whatever the umask
			}
			return errors.Join(err, out.Close())
		}
		return fmt.Errorf("copy %s: unsupported file type %v", p, info.Mode().Type())
	})
}

// precheck finds what would keep test.sh from running at all: an
// interpreter (its #! line) missing from the image, or shell syntax errors
// (checked with the host's bash -n). It returns "" when test.sh can run.
func (b *boxEpisode) precheck(ctx context.Context, t *Task, user string) (string, error) {
	// The task's own copy: the staged one is in a guarded directory that
	// no other host process may open.
	script := filepath.Join(t.Dir, "tests", "test.sh")
	src, err := os.ReadFile(script)
	if err != nil {
		return "", err
	}
	interp, args := shebang(string(src))
	if interp != "" {
		probe := []string{"test", "-x", interp}
		if filepath.Base(interp) == "env" && len(args) > 0 {
			probe = []string{interp, "sh", "-c", `command -v "$1" >/dev/null`, "probe", args[0]}
		}
		_, code, err := b.box.Run(ctx, sandbox.ExecSpec{User: user, Cmd: probe})
		if err != nil {
			return "", err
		}
		if code != 0 {
			// Missing here: the image's fault, or the agent's (it may
			// have deleted it)? Ask a fresh container of the image.
			fresh, err := b.probeFresh(ctx, user, probe)
			if err != nil {
				return "", err
			}
			what := strings.Join(append([]string{interp}, args...), " ")
			if fresh != 0 {
				return fmt.Sprintf("test.sh's interpreter %s is not in the image", what), nil
			}
			return "", &agentBrokeVerifier{fmt.Sprintf("test.sh's interpreter %s is in the image but the agent's container lost it", what)}
		}
	}
	shell := filepath.Base(interp)
	if len(args) > 0 && filepath.Base(interp) == "env" {
		shell = args[0]
	}
	if shell == "" || shell == "bash" || shell == "sh" || shell == "dash" {
		if bash, err := lookBash(); err == nil {
			if out, err := runHost(ctx, bash, "-n", script); err != nil {
				return "test.sh does not parse: " + strings.TrimSpace(strings.ReplaceAll(out, script, testsDir+"/test.sh")), nil
			}
		}
	}
	return "", nil
}

// composeVars are the variables Harbor sets for a task's compose file
// (harbor/environments/docker/compose_env.py, ComposeInfraEnvVars):
// MAIN_IMAGE_NAME (here the image compactrl built), CONTEXT_DIR (the
// task's environment/ directory), and CPUS and MEMORY ("<MB>M") when the
// task sets them; PREBUILT_IMAGE_NAME for a task with docker_image.
func (e *Env) composeVars(image string) map[string]string {
	env := e.task.Config.Environment
	v := map[string]string{"MAIN_IMAGE_NAME": image, "CONTEXT_DIR": filepath.Join(e.task.Dir, "environment")}
	if abs, err := filepath.Abs(v["CONTEXT_DIR"]); err == nil {
		v["CONTEXT_DIR"] = abs
	}
	if env.CPUs > 0 {
		v["CPUS"] = strconv.FormatFloat(env.CPUs, 'f', -1, 64)
	}
	if mb := env.MemoryMB; mb > 0 {
		v["MEMORY"] = strconv.FormatInt(mb, 10) + "M"
	}
	if env.DockerImage != "" {
		v["PREBUILT_IMAGE_NAME"] = env.DockerImage
	}
	return v
}

// agentBrokeVerifier is a verifier that cannot run because of what the
// agent did: the attempt's failure (0 with a note), never verifier_error.
type agentBrokeVerifier struct{ why string }

func (e *agentBrokeVerifier) Error() string { return e.why }

// probeFresh runs probe in a new container of the episode's image and
// returns its exit status.
func (b *boxEpisode) probeFresh(ctx context.Context, user string, probe []string) (int, error) {
	box, err := b.c.Create(ctx, sandbox.BoxSpec{Image: b.image, NoTmpfs: true})
	if err != nil {
		return 0, err
	}
	defer box.Remove()
	_, code, err := box.Run(ctx, sandbox.ExecSpec{User: user, Cmd: probe})
	return code, err
}

// shebang splits a script's #! line into its interpreter and arguments.
func shebang(src string) (string, []string) {
	line, _, _ := strings.Cut(src, "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return "", nil
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil
	}
	return f[0], f[1:]
}

// runVerifier runs tests/test.sh the way Harbor does, in the episode's
// container after the agent phase: /tests and /logs/verifier are emptied,
// the tests copied in, and `/tests/test.sh > /logs/verifier/test-stdout.txt
// 2>&1` runs as [verifier] user (else the image's USER) in the working
// directory with [verifier.env], under [verifier] timeout_sec, while
// everything the agent left keeps running. Only the verifier's own session
// may open /tests and /logs/verifier while it runs, nobody after
// (sandbox.Box.RunGuarded): a process outside that session that opened
// either, one still holding the reward channel after test.sh's session was
// killed, a verifier process being traced, or a process writing into the
// exec's own pipe is tampering. A test.sh that cannot run at all (its
// interpreter missing from the image, a syntax error) is ErrVerifier.
func (bb *boxBackend) runVerifier(ctx context.Context) (verifierRun, error) {
	e, b := bb.e, bb.ep
	ws, t := e.sh.Workspace(), e.task
	acted := e.sh.Commands() > 0
	e.sh.SetMetric(metricVerifierGuarded, boolMetric(b.logs != nil))
	if err := b.stageTests(ws, t); err != nil {
		return b.stageFailed(err, acted)
	}
	user := t.Config.Verifier.User
	var broke *agentBrokeVerifier
	if why, err := b.precheck(ctx, t, user); errors.As(err, &broke) {
		return verifierRun{refused: broke.why}, nil
	} else if errors.Is(err, sandbox.ErrOutputCap) && acted {
		return verifierRun{refused: fmt.Sprintf("a check of the agent's container printed past the host's cap: %v", err)}, nil
	} else if errors.Is(err, sandbox.ErrExecTimeout) && acted {
		return verifierRun{refused: fmt.Sprintf("a check of the agent's container did not finish (something the agent left blocks it: a FIFO where the engine reads, a replaced tool): %v", err)}, nil
	} else if errors.Is(err, sandbox.ErrExecTimeout) {
		return verifierRun{}, fmt.Errorf("task %s: %w: test.sh's interpreter check did not finish in the untouched container: %v", t.Name, ErrVerifier, err)
	} else if err != nil {
		return verifierRun{}, fmt.Errorf("task %s: verifier precheck: %w", t.Name, err)
	} else if why != "" {
		return verifierRun{}, fmt.Errorf("task %s: %w: %s", t.Name, ErrVerifier, why)
	}
	probe := "cd \"$1\" || exit 0; shift; for n; do [ -e \"$n.py\" ] && { echo \"$n.py\"; exit; }; [ -e \"$n\" ] && { echo \"$n\"; exit; }; done"
	out, _, err := b.box.Run(ctx, sandbox.ExecSpec{User: "0", Cmd: append([]string{"sh", "-c", probe, "probe", b.workdir}, shadowNames...)})
	if errors.Is(err, sandbox.ErrOutputCap) && acted {
		return verifierRun{refused: fmt.Sprintf("a check of the agent's container printed past the host's cap: %v", err)}, nil
	}
	if errors.Is(err, sandbox.ErrExecTimeout) && acted {
		return verifierRun{refused: fmt.Sprintf("a check of the agent's container did not finish (something the agent left blocks it): %v", err)}, nil
	}
	if err == nil && strings.TrimSpace(out) != "" && acted {
		return verifierRun{refused: fmt.Sprintf("the agent left %s in %s, where it would shadow the test tooling's own module", strings.TrimSpace(out), b.workdir)}, nil
	}
	var guards []*sandbox.GuardedDir
	if b.logs != nil {
		guards = []*sandbox.GuardedDir{b.logs, b.tests}
		// Opens the agent phase tried on the verifier's directories (all
		// refused): a signal of a policy probing for the reward channel.
		e.sh.SetMetric(metricDirsRefusedToAgent, float64(b.logs.DeniedWhileClosed()+b.tests.DeniedWhileClosed()))
	}
	cmd := "exec " + testsDir + "/test.sh > " + verifierDir + "/test-stdout.txt 2>&1"
	r, err := b.box.RunGuarded(ctx, sandbox.ExecSpec{User: user, Workdir: b.workdir, Env: e.envs.verifier, Cmd: []string{"sh", "-c", cmd}},
		e.verifierTimeout(), guards...)
	e.sh.SetMetric(metricVerifierSeconds, r.Duration.Seconds())
	e.sh.SetMetric(metricVerifierPipeBytes, float64(r.OutputBytes))
	if err == nil {
		e.sh.SetMetric(metricVerifierGuarded, boolMetric(r.Guarded))
	}
	if errors.Is(err, sandbox.ErrNotStarted) && acted {
		// The container is the agent's: what it left can keep the
		// verifier from starting. That is the attempt's failure.
		return verifierRun{tampered: fmt.Sprintf("the verifier could not start in the agent's container: %v", err)}, nil
	}
	if err != nil {
		return verifierRun{}, fmt.Errorf("task %s: verifier: %w", t.Name, err)
	}
	stdout, _ := sandbox.ReadRegular(filepath.Join(b.logsHost(ws), "test-stdout.txt"), 1<<20)
	run := verifierRun{
		logs: b.logsHost(ws), output: fmt.Sprintf("%s[test.sh exit %d]", tail(string(stdout), 4000), r.ExitCode),
		exit: r.ExitCode, timedOut: r.TimedOut, stragglers: r.Leftovers, agentSandbox: true,
	}
	if len(r.Violations) > 0 {
		run.violated = violation(r.Violations, r.ViolationCount)
	}
	if len(r.Holders) > 0 {
		run.held = "processes still held the verifier's files open when test.sh exited: " + strings.Join(r.Holders, ", ")
	}
	switch {
	case r.OutputBytes > sandbox.MaxExecOutputBytes:
		// test.sh's output goes to test-stdout.txt: the exec's own pipe
		// carries nothing but the wrapper's errors, unless a process of
		// the container reopened it and wrote.
		run.tampered = fmt.Sprintf("the verifier's exec pipe carried %d bytes, past the host's cap of %d (a process of the container wrote into it)", r.OutputBytes, sandbox.MaxExecOutputBytes)
	case r.Traced:
		run.tampered = "a process of the verifier's run was being traced (ptrace) by another process"
	}
	return run, nil
}

// clearDir removes everything inside dir, through an os.Root of it (a
// symbolic link planted there is removed, never followed).
func clearDir(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, en := range ents {
		if err := root.RemoveAll(en.Name()); err != nil {
			return err
		}
	}
	return nil
}

func lookBash() (string, error) { return exec.LookPath("bash") }

// runHost runs a host command briefly and returns its combined output.
func runHost(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// phaseWords says when a guarded directory's phase was.
func phaseWords(phase string) string {
	switch phase {
	case "closed":
		return "closed (staging, or the agent's phase)"
	case "admitted":
		return "the verifier ran"
	case "sealed":
		return "sealed (after test.sh)"
	}
	return phase
}

// violation describes opens or changes of the guarded directories by
// processes outside the verifier's run, naming the first.
func violation(vs []sandbox.ChannelOpen, n int) string {
	v := vs[0]
	return fmt.Sprintf("%d opens or changes of the verifier's files by processes outside its run (first: pid %d (%s) %s %s while %s)", n, v.PID, v.Comm, v.Op, v.Path, phaseWords(v.Phase))
}

// stageFailed attributes a failure to stage the tests into the guarded
// directories. They are bound into the agent's container: when a process
// there changed them, that is tampering; when the task's tests/ cannot be
// staged into a fresh directory either, the task is at fault
// (ErrVerifier); otherwise, once the agent ran a command (acted), the
// failure is the attempt's (0 with a note: a policy must not learn to turn
// its failures into masked episodes), and with no command run the
// harness's.
func (b *boxEpisode) stageFailed(err error, acted bool) (verifierRun, error) {
	var vs []sandbox.ChannelOpen
	n := 0
	for _, g := range []*sandbox.GuardedDir{b.tests, b.logs} {
		if g != nil {
			g.Sync()
			vs = append(vs, g.Violations()...)
			n += g.ViolationCount()
		}
	}
	if len(vs) > 0 {
		return verifierRun{violated: violation(vs, n)}, nil
	}
	if ferr := stageFresh(b.task); ferr != nil {
		return verifierRun{}, fmt.Errorf("task %s: %w: its tests/ cannot be staged: %v", b.task.Name, ErrVerifier, ferr)
	}
	if acted {
		return verifierRun{refused: fmt.Sprintf("the tests could not be staged into the agent's container: %v", err)}, nil
	}
	return verifierRun{}, fmt.Errorf("task %s: stage the tests: %w", b.task.Name, err)
}

// stageFresh stages the task's tests/ into a new directory of the host's
// temporary directory (not the episode's workspace, which the agent may
// have filled) and removes it: whether the task's own files can be staged
// at all.
func stageFresh(t *Task) error {
	dir, err := os.MkdirTemp("", "compactrl-stage-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	return stageInto(filepath.Join(t.Dir, "tests"), dir)
}

// composeProject is a compose project name for an episode's workspace:
// lowercase letters, digits, dashes and underscores.
func composeProject(ws string) string {
	return "compactrl-" + strings.ReplaceAll(imageName(ws), ".", "-")
}

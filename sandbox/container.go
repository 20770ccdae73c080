package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// Container runs sessions in a container through a docker-compatible CLI
// (docker or podman): `ENGINE run -d --network none ... IMAGE sleep infinity`
// once, then one long-lived `ENGINE exec -i ID bash` as the persistent shell.
// A command that times out restarts the container (`ENGINE restart -t 0`),
// which kills every process in it; /app is a bind mount and survives.
// Close removes the container.
//
// Limits map to --memory, --pids-limit, --cpus, --ulimit fsize and a
// --tmpfs /tmp size. The engine is not available on the machines this was
// built on: only the command lines are tested.
type Container struct {
	Engine       string // CLI name or path; default "docker"
	DefaultImage string // used when Spec.Image is empty
	ExtraArgs    []string
}

func (c Container) engine() string {
	if c.Engine != "" {
		return c.Engine
	}
	return "docker"
}

// Start implements Runner.
func (c Container) Start(ctx context.Context, spec Spec) (Session, error) {
	if err := cmp.Or(spec.validate(), sandboxSupported()); err != nil {
		return nil, err
	}
	args, err := c.runArgs(spec)
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.engine(), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s run: %w: %s", c.engine(), err, strings.TrimSpace(stderr.String()))
	}
	id := strings.TrimSpace(string(out))
	if id == "" {
		return nil, fmt.Errorf("sandbox: %s run printed no container id", c.engine())
	}
	return newShellSession(&containerLauncher{engine: c.engine(), id: id}, spec.Limits)
}

// runArgs builds `ENGINE run` arguments for spec (pure, for tests).
func (c Container) runArgs(spec Spec) ([]string, error) {
	image := spec.Image
	if image == "" {
		image = c.DefaultImage
	}
	if image == "" {
		return nil, fmt.Errorf("sandbox: container runner needs an image (Spec.Image or Container.DefaultImage)")
	}
	lim := spec.Limits.withDefaults()
	network := "none"
	if spec.Network {
		network = "bridge"
	}
	a := []string{"run", "-d", "--init", "--network", network,
		"--memory", fmt.Sprint(lim.MemoryBytes),
		"--pids-limit", fmt.Sprint(lim.Processes),
		"--ulimit", fmt.Sprintf("fsize=%d:%d", lim.FileSizeBytes, lim.FileSizeBytes),
		"--tmpfs", fmt.Sprintf("/tmp:rw,size=%d", lim.TmpBytes),
		"-v", spec.Workdir + ":" + AppDir,
		"-w", AppDir,
	}
	if lim.CPUs > 0 {
		a = append(a, "--cpus", fmt.Sprint(lim.CPUs))
	}
	for _, m := range spec.Mounts {
		v := m.Host + ":" + m.Target
		if !m.Writable {
			v += ":ro"
		}
		a = append(a, "-v", v)
	}
	env := baseEnv(spec.Env)
	delete(env, "PATH") // the image knows its own PATH
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		a = append(a, "-e", k+"="+env[k])
	}
	a = append(a, c.ExtraArgs...)
	a = append(a, image, "sleep", "infinity")
	return a, nil
}

type containerLauncher struct {
	engine string
	id     string
}

// execArgs are the arguments of the persistent shell's `ENGINE exec`.
func (l *containerLauncher) execArgs() []string {
	return []string{"exec", "-i", "-w", AppDir, l.id, "bash", "--noprofile", "--norc"}
}

func (l *containerLauncher) command() (*exec.Cmd, error) {
	cmd := exec.Command(l.engine, l.execArgs()...)
	cmd.SysProcAttr = groupProcAttr()
	return cmd, nil
}

func (l *containerLauncher) started() {}

// kill restarts the container, which kills every process in it.
func (l *containerLauncher) kill(cmd *exec.Cmd) error {
	if cmd.Process != nil {
		killPID(-cmd.Process.Pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, l.engine, "restart", "-t", "0", l.id).CombinedOutput(); err != nil {
		return fmt.Errorf("sandbox: %s restart %s: %w: %s", l.engine, l.id, err, out)
	}
	return nil
}

func (l *containerLauncher) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, l.engine, "rm", "-f", l.id).CombinedOutput(); err != nil {
		return fmt.Errorf("sandbox: %s rm -f %s: %w: %s", l.engine, l.id, err, out)
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/sandbox"
)

// taskFlags are eval's and serve's flags for real tasks (any registered
// env/tasks source: Harbor task directories, SWE-bench JSONL) and the
// sandbox they run in; load turns them into tasks.Options.
type taskFlags struct {
	tasks                 string
	runner, image         string
	cache                 string
	cmdTimeout            time.Duration
	agentTimeout          time.Duration
	episodeTimeout        time.Duration
	memMB                 int64
	procs                 int
	network, keep, noHint bool
	binds                 stringList
	// settings are the registered sources' own flags (tasks.AllSettings).
	settings map[string]*string
}

func (f *taskFlags) register(fs *flag.FlagSet, tasksHelp string) {
	fs.StringVar(&f.tasks, "tasks", "", tasksHelp)
	fs.BoolVar(&f.noHint, "no-format-hint", false, "do not append the action-format hint to each task")
	fs.StringVar(&f.runner, "runner", "bwrap", "sandbox: bwrap, docker or podman")
	fs.StringVar(&f.image, "image", "", "docker/podman: image for tasks without [environment] docker_image")
	fs.DurationVar(&f.cmdTimeout, "command-timeout", 120*time.Second, "limit of one command")
	fs.DurationVar(&f.agentTimeout, "agent-timeout", 0, "agent phase limit (0: the task's [agent] timeout_sec; SWE-bench 30m)")
	fs.DurationVar(&f.episodeTimeout, "episode-timeout", 0, "wall-clock limit of a whole episode, past it infra_error (0: none)")
	fs.Int64Var(&f.memMB, "memory-mb", 0, "memory limit in MiB: bwrap applies it to each process's address space (RLIMIT_AS) and, where cgroups allow, to the sandbox as a whole; docker/podman to the container (0: the task's [environment] memory_mb, else 4096)")
	fs.IntVar(&f.procs, "max-procs", 0, "processes+threads per sandbox (0: 1024)")
	fs.BoolVar(&f.network, "network", false, "give sandboxes the host's network (Harbor: only tasks with allow_internet; default: no network)")
	fs.Var(&f.binds, "bind", "host path to expose read-only at the same place in bwrap sandboxes (repeatable), e.g. a toolchain outside /usr")
	fs.StringVar(&f.cache, "cache", "", "host directory shared by all sandboxes as a build cache (/cache: GOCACHE, PIP_CACHE_DIR)")
	fs.BoolVar(&f.keep, "keep-workspaces", false, "leave episode workspaces on disk")
	f.settings = map[string]*string{}
	for _, s := range tasks.AllSettings() {
		f.settings[s.Name] = fs.String(s.Name, s.Default, s.Usage)
	}
}

// values are the sources' settings as given.
func (f *taskFlags) values() tasks.Settings {
	v := tasks.Settings{}
	for name, p := range f.settings {
		v[name] = *p
	}
	return v
}

func (f *taskFlags) validate() error {
	switch {
	case f.memMB < 0 || f.procs < 0:
		return errors.New("--memory-mb and --max-procs must be ≥ 0")
	case f.episodeTimeout < 0:
		return errors.New("--episode-timeout must be ≥ 0")
	}
	return tasks.CheckSettings(f.values())
}

// backend is the --runner: exactly one of host (bubblewrap) and engine
// (docker, podman) is set. It is chosen once, here; nothing downstream
// asks a runner for its type.
type backend struct {
	host   *sandbox.Bubblewrap
	engine *sandbox.Container
}

// sandbox is the --runner, with per-session confinement for bwrap when
// confine is set, and the --cache directory made. bwrap's Available is
// the caller's to check, after the other flags are known to be good.
func (f *taskFlags) sandbox(confine bool) (backend, error) {
	var b backend
	switch f.runner {
	case "bwrap":
		b.host = &sandbox.Bubblewrap{ROBinds: f.binds}
		if confine {
			b.host.Confine = sandbox.DetectConfinement()
		}
	case "docker", "podman":
		b.engine = &sandbox.Container{Engine: f.runner, DefaultImage: f.image}
	default:
		return backend{}, fmt.Errorf("--runner %q: want bwrap, docker or podman", f.runner)
	}
	if f.cache != "" {
		if err := os.MkdirAll(f.cache, 0o755); err != nil {
			return backend{}, fmt.Errorf("--cache: %w", err)
		}
	}
	return b, nil
}

// load reads --tasks for backend b with the task source that takes it
// (env/tasks), reporting on stderr (as cmd) each task skipped (one that
// does not load, or cannot run here) and each task's load warnings
// (task.toml keys Harbor ignores, deprecated fields); no runnable task is
// an error. Episode workspaces go under *workRoot (nil: the system's
// temporary directory), read when each episode's environment is made.
func (f *taskFlags) load(ctx context.Context, e env, cmd string, b backend, limits sandbox.Limits, workRoot *string) ([]tasks.Task, []tasks.Skipped, error) {
	o := tasks.Options{Sandboxing: tasks.Sandboxing{Engine: b.engine, Limits: limits, CommandTimeout: f.cmdTimeout, AgentTimeout: f.agentTimeout, CacheDir: f.cache, KeepWorkspace: f.keep, NoFormatHint: f.noHint, Network: f.network}, Settings: f.values(), Warn: func(w string) { fmt.Fprintf(e.stderr, "%s: warning: %s\n", cmd, w) }, Info: func(m string) { fmt.Fprintf(e.stderr, "%s: %s\n", cmd, m) }}
	if workRoot != nil {
		o.WorkRoot = func() string { return *workRoot }
	}
	if b.host != nil {
		o.Runner = *b.host
	}
	_, runnable, skipped, err := tasks.Open(ctx, f.tasks, o)
	if err != nil {
		return nil, nil, fmt.Errorf("--tasks: %w", err)
	}
	for _, s := range skipped {
		fmt.Fprintf(e.stderr, "%s: skipping %s: %s\n", cmd, s.Task, s.Reason)
	}
	if len(runnable) == 0 {
		return nil, skipped, &noRunnableTask{fmt.Sprintf("--tasks %s: no task can run here (%d skipped)", f.tasks, len(skipped))}
	}
	return runnable, skipped, nil
}

// limits are the per-sandbox limits of --memory-mb and --max-procs.
func (f *taskFlags) limits() sandbox.Limits {
	return sandbox.Limits{MemoryBytes: f.memMB << 20, Processes: f.procs}
}

// noRunnableTask is load's error when every task was skipped; load still
// returns the skipped tasks with it, for eval's results.json.
type noRunnableTask struct{ msg string }

func (e *noRunnableTask) Error() string { return e.msg }

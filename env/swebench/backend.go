package swebench

import (
	"context"

	"github.com/compactrl/compactrl/env/shelltask"
	"github.com/compactrl/compactrl/sandbox"
)

// backend is where an Env's episodes run, chosen once, by New: the
// local-repository mode (localBackend: a checkout of a local repository in
// a host sandbox, each test id run and judged by its exit status) or, with
// Options.Engine, container mode (containerBackend: the instance's image,
// graded by the harness's eval script and log parser). Env keeps what both
// share — the task text, the agent's steps, the verdict's reward and
// observation — and asks its backend only for what differs.
type backend interface {
	// admit says why the instance cannot run here (nil when it can),
	// before any episode; it may complete o (the image container mode
	// found).
	admit(ctx context.Context, o *Options) error
	// start makes the episode's workspace and starts the agent's shell;
	// workdir is where the agent finds the repository.
	start(ctx context.Context) (workdir string, err error)
	// grade is the verdict on patch once the agent's shell is closed ("":
	// the agent's changes).
	grade(ctx context.Context, patch string) (Report, error)
	// close removes what start made beyond the workspace (a container);
	// safe to call again.
	close() error
}

// newBackend is the backend Options choose for e: container mode when an
// engine is set, else the local-repository mode on the host runner
// (shelltask's default filled in).
func newBackend(e *Env) backend {
	if e.opts.Engine != nil {
		return &containerBackend{e: e, c: *e.opts.Engine}
	}
	return &localBackend{e: e, runner: e.sh.Runner()}
}

// localBackend runs episodes in the local-repository mode.
type localBackend struct {
	e      *Env
	runner sandbox.Runner
	src    string // the local repository, found by start
}

// admit refuses an instance the mode cannot grade (LocalRefusal) or whose
// repository is not under o.ReposDir.
func (l *localBackend) admit(_ context.Context, o *Options) error {
	if err := LocalRefusal(&l.e.inst); err != nil {
		return err
	}
	_, err := RepoDir(&l.e.inst, o.ReposDir)
	return err
}

func (l *localBackend) close() error { return nil }

// The metrics SWE-bench episodes add to shelltask's.
const (
	metricPatchError            shelltask.Metric = "patch_error"   // the agent's changes could not be taken as a patch
	metricPatchApplied          shelltask.Metric = "patch_applied" // the patch applied
	metricTestPatchConflict     shelltask.Metric = "test_patch_conflict"
	metricToolingShadowed       shelltask.Metric = "tooling_shadowed" // local mode: a module at the root shadowed the test tooling
	metricTestSeconds           shelltask.Metric = "test_seconds"
	metricF2PPassed             shelltask.Metric = "f2p_passed"
	metricF2PTotal              shelltask.Metric = "f2p_total"
	metricP2PPassed             shelltask.Metric = "p2p_passed"
	metricP2PTotal              shelltask.Metric = "p2p_total"
	metricResolved              shelltask.Metric = "resolved"
	metricBinaryFilesExcluded   shelltask.Metric = "binary_files_excluded"
	metricContainerStartSeconds shelltask.Metric = "container_start_seconds"
)

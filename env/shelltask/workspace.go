package shelltask

import (
	"errors"
	"fmt"
	"os"

	"github.com/compactrl/compactrl/sandbox"
)

// NewWorkspace makes an episode's workspace under root (os.TempDir() when
// ""), bounded to limit bytes (> 0) by the runner's MountWorkspace;
// RemoveWorkspace undoes it. A limit with a runner that is not a
// sandbox.WorkspaceMounter is an error, not a silently unbounded workspace.
func NewWorkspace(r sandbox.Runner, root, pattern string, limit int64) (ws string, unmount func() error, err error) {
	noop := func() error { return nil }
	m, ok := r.(sandbox.WorkspaceMounter)
	if limit > 0 && !ok {
		return "", nil, fmt.Errorf("bound the workspace to %d bytes: runner %T cannot (it is not a sandbox.WorkspaceMounter; a runner wrapping Bubblewrap must delegate MountWorkspace)", limit, r)
	}
	ws, err = sandbox.MkdirTemp(root, pattern)
	if err != nil {
		return "", nil, err
	}
	if limit <= 0 {
		return ws, noop, nil
	}
	if unmount, err = m.MountWorkspace(ws, limit); err != nil {
		os.RemoveAll(ws)
		return "", nil, err
	}
	return ws, unmount, nil
}

// RemoveWorkspace unmounts a workspace made by NewWorkspace (unmount may be
// nil) and removes it, reporting both failures.
func RemoveWorkspace(ws string, unmount func() error) error {
	var errs []error
	if unmount != nil {
		errs = append(errs, unmount())
	}
	if err := os.RemoveAll(ws); err != nil {
		errs = append(errs, fmt.Errorf("remove workspace: %w", err))
	}
	return errors.Join(errs...)
}

// CacheTarget is where a build cache shared by the episodes' sandboxes is
// mounted (see CacheMounts).
const CacheTarget = "/cache"

// CacheMounts mounts the host directory dir writable at CacheTarget; none
// when dir is "". Builds in later episodes then reuse earlier ones, so one
// episode can affect another: environments leave it off by default.
func CacheMounts(dir string) []sandbox.Mount {
	if dir == "" {
		return nil
	}
	return []sandbox.Mount{{Host: dir, Target: CacheTarget, Writable: true}}
}

// CacheEnv points Go's and pip's caches into CacheTarget when dir is not "":
// it sets GOCACHE=/cache/go-build and PIP_CACHE_DIR=/cache/pip in env
// (allocated when nil) and returns it; with dir "" it returns env as is.
func CacheEnv(dir string, env map[string]string) map[string]string {
	if dir == "" {
		return env
	}
	if env == nil {
		env = map[string]string{}
	}
	env["GOCACHE"] = CacheTarget + "/go-build"
	env["PIP_CACHE_DIR"] = CacheTarget + "/pip"
	return env
}

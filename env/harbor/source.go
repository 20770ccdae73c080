package harbor

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/tasks"
)

// Harbor task directories are the task source "harbor": --tasks names a
// directory (one task, or a directory of them).
func init() { tasks.Register("harbor", isTaskDir, tasks.SourceFunc(LoadTasks)) }

// isTaskDir: a directory with a task.toml, or with one a level down, is
// Harbor's; any other directory is too unless another source claims it
// (LoadAll says what is wrong with it).
func isTaskDir(path string, fi fs.FileInfo) tasks.Match {
	if !fi.IsDir() {
		return tasks.No
	}
	if _, err := os.Stat(filepath.Join(path, "task.toml")); err == nil {
		return tasks.Yes
	}
	if m, _ := filepath.Glob(filepath.Join(path, "*", "task.toml")); len(m) > 0 {
		return tasks.Yes
	}
	return tasks.Fallback
}

var (
	_ tasks.Oracle      = (*Env)(nil)
	_ tasks.RewardNoter = (*Env)(nil)
	_ tasks.Closer      = (*Env)(nil)
)

// LoadTasks is the "harbor" task source: the tasks under dir (LoadAll) that
// can run here. A bad reward choice (--reward-key, --reward-agg) is an error. A
// task.toml that does not load, a task Harbor cannot run (Unsupported), a
// task that cannot produce the chosen reward key (CheckRewardChoice), one that needs its container image under
// bubblewrap and one whose image cannot be built (container engines build
// or find every image once, here, before any episode) are skipped with the
// reason; each task's load warnings go to o.Warn.
func LoadTasks(ctx context.Context, dir string, o tasks.Options) ([]tasks.Task, []tasks.Skipped, error) {
	hts, failed, err := LoadAll(dir)
	if err != nil {
		return nil, nil, err
	}
	choice, err := rewardChoice(o.Settings)
	if err != nil {
		return nil, nil, err
	}
	var ts []tasks.Task
	var skipped []tasks.Skipped
	for _, f := range failed {
		skipped = append(skipped, tasks.Skipped{Task: f.Task, Reason: "does not load: " + f.Reason})
	}
	opts := Options{Sandboxing: o.Sandboxing, Reward: choice}
	for _, t := range hts {
		for _, w := range t.Warnings {
			o.Warning("task " + t.Name + ": " + w)
		}
		if why := t.Unsupported(); why != "" {
			skipped = append(skipped, tasks.Skipped{Task: t.Name, Reason: why})
			continue
		}
		if err := t.CheckRewardChoice(choice); err != nil {
			skipped = append(skipped, tasks.Skipped{Task: t.Name, Reason: err.Error()})
			continue
		}
		why := New(t, opts).back.admit(ctx, o.Note)
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("task %s: %w", t.Name, err)
		}
		if why != "" {
			skipped = append(skipped, tasks.Skipped{Task: t.Name, Reason: why})
			continue
		}
		ts = append(ts, tasks.Task{Name: t.Name, New: func(oracle bool) agent.Environment {
			eo := opts
			eo.ExposeSolution, eo.WorkRoot = oracle, o.Root()
			return New(t, eo)
		}})
	}
	return ts, skipped, nil
}

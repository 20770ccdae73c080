package swebench

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/tasks"
)

// SWE-bench instance files are the task source "swebench": --tasks names
// a file (JSONL of instances, see LoadInstances).
func init() { tasks.Register("swebench", isInstanceFile, tasks.SourceFunc(LoadTasks)) }

// isInstanceFile: a .jsonl file is SWE-bench's; any other file is too
// unless another source claims it (LoadInstances says what is wrong with it).
func isInstanceFile(path string, fi fs.FileInfo) tasks.Match {
	switch {
	case fi.IsDir():
		return tasks.No
	case strings.HasSuffix(path, ".jsonl"):
		return tasks.Yes
	}
	return tasks.Fallback
}

var (
	_ tasks.Oracle = (*Env)(nil)
	_ tasks.Closer = (*Env)(nil)
)

// Oracle submits the instance's gold patch (OracleReply): the oracle
// policy's action.
func (e *Env) Oracle(ctx context.Context) (agent.Step, error) {
	return e.Step(ctx, OracleReply(&e.inst))
}

// LoadTasks is the "swebench" task source: the instances in path
// (LoadInstances) that can run here. In container mode (o.Engine) an
// instance without a harness spec (EvalScript) or whose image cannot be
// found (ResolveImage, with its --image-map entry and --swebench-namespace) is
// skipped with the reason (the images tried), never scored; in the
// local-repository mode one the mode refuses (LocalRefusal) or whose
// repository is not under --repos (default: path's directory) is.
func LoadTasks(ctx context.Context, path string, o tasks.Options) ([]tasks.Task, []tasks.Skipped, error) {
	insts, err := LoadInstances(path)
	if err != nil {
		return nil, nil, err
	}
	images, err := imageMap(o.Settings)
	if err != nil {
		return nil, nil, err
	}
	repos := o.Settings.Get(settingRepos)
	if repos == "" {
		repos = filepath.Dir(path)
	}
	var ts []tasks.Task
	var skipped []tasks.Skipped
	for _, in := range insts {
		opts := Options{Sandboxing: o.Sandboxing, ReposDir: repos,
			Namespace: o.Settings.Get(settingNamespace), Image: images[in.InstanceID]}
		err := New(in, opts).back.admit(ctx, &opts)
		if cerr := ctx.Err(); cerr != nil {
			return nil, nil, fmt.Errorf("instance %s: %w", in.InstanceID, cerr)
		}
		if err != nil {
			skipped = append(skipped, tasks.Skipped{Task: in.InstanceID, Reason: err.Error()})
			continue
		}
		ts = append(ts, tasks.Task{Name: in.InstanceID, New: func(bool) agent.Environment {
			eo := opts
			eo.WorkRoot = o.Root()
			return New(in, eo)
		}})
	}
	return ts, skipped, nil
}

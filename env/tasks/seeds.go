package tasks

import (
	"context"
	"fmt"
	"strconv"

	"github.com/compactrl/compactrl/agent"
)

// SeedIDs are the task ids of count seeds from the start of the split
// named split of a generated suite (SeedSplitter): strconv of start,
// start+1, …; an error when the suite has no such split or the split has
// fewer seeds.
func SeedIDs(s Suite, split string, count int) ([]string, error) {
	sp, ok := s.(SeedSplitter)
	if !ok {
		return nil, fmt.Errorf("the suite's task ids are not seeds in splits (tasks.SeedSplitter)")
	}
	if count < 1 {
		return nil, fmt.Errorf("count %d: want ≥ 1", count)
	}
	start, end, err := sp.Split(split)
	if err != nil {
		return nil, fmt.Errorf("split: %w", err)
	}
	if int64(count) > end-start {
		return nil, fmt.Errorf("count %d: split %s has %d seeds", count, split, end-start)
	}
	ids := make([]string, count)
	for i := range ids {
		ids[i] = strconv.FormatInt(start+int64(i), 10)
	}
	return ids, nil
}

// SuiteTasks are the tasks of a generated suite named by ids: each makes
// the suite's environment for its id, or, when the suite cannot make it,
// one whose Reset fails with the reason (its episode is an infra_error
// naming why).
func SuiteTasks(s Suite, ids []string) []Task {
	out := make([]Task, len(ids))
	for i, id := range ids {
		out[i] = Task{Name: id, New: func(bool) agent.Environment {
			env, err := s.Env(id)
			if err != nil {
				return failedEnv{err}
			}
			return env
		}}
	}
	return out
}

type failedEnv struct{ err error }

func (f failedEnv) Reset(context.Context) (string, error) { return "", f.err }

func (f failedEnv) Step(context.Context, string) (agent.Step, error) { return agent.Step{}, f.err }

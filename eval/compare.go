package eval

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compactrl/compactrl/report"
	"github.com/compactrl/compactrl/train"
)

// ReadRuns reads the evaluations that paths name, one per run, for a
// paired comparison: a run directory (its final outcomes), an outcomes
// file (.json), an episode file of compactrl rollout (.jsonl, consecutive
// task seeds), or a directory of runs (DIR/seed-*, in seed order). It
// returns the evaluations and the file each was read from.
func ReadRuns(paths []string) ([]train.EvalResult, []string, error) {
	var evals []train.EvalResult
	var files []string
	for _, p := range paths {
		fs, err := outcomeFiles(p)
		if err != nil {
			return nil, nil, err
		}
		for _, f := range fs {
			var ev train.EvalResult
			if strings.HasSuffix(f, ".jsonl") {
				ev, err = episodeOutcomes(f)
			} else {
				ev, err = train.ReadOutcomes(f)
			}
			if err != nil {
				return nil, nil, err
			}
			evals, files = append(evals, ev), append(files, f)
		}
	}
	return evals, files, nil
}

// episodeOutcomes reads an episode JSONL file (compactrl rollout's, whose
// ids are NAME-SEED) as an evaluation: the episodes in task-seed order
// (rollout writes them as they finish), which must be consecutive seeds,
// so that two files of the same seeds pair task by task.
func episodeOutcomes(path string) (train.EvalResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return train.EvalResult{}, err
	}
	defer f.Close()
	eps, err := report.ReadEpisodes(f)
	if err != nil {
		return train.EvalResult{}, fmt.Errorf("%s: %w", path, err)
	}
	ev := train.EvalResult{Episodes: len(eps), Range: "episodes"}
	seeds := make([]int64, len(eps))
	for i := range eps {
		if _, err := fmt.Sscanf(eps[i].ID[strings.LastIndex(eps[i].ID, "-")+1:], "%d", &seeds[i]); err != nil {
			return ev, fmt.Errorf("%s: episode id %q does not end in its task seed", path, eps[i].ID)
		}
	}
	order := make([]int, len(eps))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return seeds[order[a]] < seeds[order[b]] })
	passed, scored := 0, 0
	for j, i := range order {
		e := &eps[i]
		if j == 0 {
			ev.FirstSeed = seeds[i]
		} else if seeds[i] != ev.FirstSeed+int64(j) {
			return ev, fmt.Errorf("%s: the episodes' task seeds are not consecutive (%d follows %d)", path, seeds[i], ev.FirstSeed+int64(j)-1)
		}
		o := train.Outcome{TaskSeed: seeds[i], Status: e.Status, Scored: e.Status.Scored(), Reward: e.Reward}
		if o.Scored {
			scored++
			if e.Succeeded() {
				o.Pass = 1
				passed++
			}
		}
		ev.Outcomes = append(ev.Outcomes, o)
	}
	if scored > 0 {
		ev.Pass1Compact = float64(passed) / float64(scored)
	}
	return ev, nil
}

// outcomeFiles are the outcomes files path names: the file itself, a run
// directory's final outcomes, or those of the runs DIR/seed-* in seed
// order.
func outcomeFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	if _, err := os.Stat(train.FinalOutcomes(path)); err == nil {
		return []string{train.FinalOutcomes(path)}, nil
	}
	runs, err := filepath.Glob(filepath.Join(path, "seed-*"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []string
	for _, r := range runs {
		if _, err := os.Stat(train.FinalOutcomes(r)); err == nil {
			out = append(out, train.FinalOutcomes(r))
		}
	}
	sort.Slice(out, func(i, j int) bool { return seedOf(out[i]) < seedOf(out[j]) })
	if len(out) == 0 {
		return nil, errors.New(path + " holds no finished run (outcomes/final.json, or seed-*/outcomes/final.json)")
	}
	return out, nil
}

// seedOf is the S of a path …/seed-S/outcomes/final.json (0 if none).
func seedOf(path string) int64 {
	var s int64
	fmt.Sscanf(filepath.Base(filepath.Dir(filepath.Dir(path))), "seed-%d", &s)
	return s
}

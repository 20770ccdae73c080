package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compactrl/compactrl/experiment"
	"github.com/compactrl/compactrl/report"
	"github.com/compactrl/compactrl/train"
)

// runEvalCompare is `compactrl eval compare`: paired comparisons of arms
// from their runs' per-task outcomes (written by every run's final
// evaluation, by `eval checkpoint --outcomes`, or by an experiment), the
// first arm the reference.
func runEvalCompare(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("eval compare", "eval compare [LABEL=]PATH[,PATH…] [LABEL=]PATH[,PATH…] …")
	fs.about = "Each argument is an arm: its runs, comma-separated. A PATH is a run directory (its outcomes/final.json), an outcomes file\n" +
		"(.json), an episode file of compactrl rollout (.jsonl, consecutive task seeds), or a directory of runs (DIR/seed-*, as an experiment's DIR/ARM). Every run must have been evaluated on the same tasks.\n" +
		"Prints each arm's pass@1 with a 95% bootstrap interval over runs and tasks, and its paired difference against the first arm."
	fs.examples = []string{"compactrl eval compare masked=runs/dev-masked/compactionrl unmasked=runs/dev-unmasked/compactionrl base=runs/dev-unmasked/base"}
	fs.maxArgs = -1
	pos, err := fs.parse(e, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return fs.usageErr("need at least two arms (the first is the reference)")
	}
	var arms []experiment.ArmResult
	for _, a := range pos {
		r, err := loadArm(a)
		if err != nil {
			return err
		}
		arms = append(arms, r)
	}
	fmt.Fprint(e.stdout, experiment.Markdown(experiment.CompareTable(arms)))
	return nil
}

// loadArm reads one [LABEL=]PATH[,PATH…] argument of eval compare.
func loadArm(arg string) (experiment.ArmResult, error) {
	label, list, ok := strings.Cut(arg, "=")
	if !ok {
		label, list = arg, arg
	}
	r := experiment.ArmResult{Arm: experiment.Arm{Name: label, Label: label}}
	for _, p := range strings.Split(list, ",") {
		files, err := outcomeFiles(p)
		if err != nil {
			return r, err
		}
		for _, f := range files {
			var ev train.EvalResult
			if strings.HasSuffix(f, ".jsonl") {
				ev, err = episodeOutcomes(f)
			} else {
				ev, err = train.ReadOutcomes(f)
			}
			if err != nil {
				return r, err
			}
			r.Evals = append(r.Evals, ev)
			r.Seeds = append(r.Seeds, int64(len(r.Seeds)+1))
			r.Runs = append(r.Runs, f)
		}
	}
	if len(r.Evals) == 0 {
		return r, fmt.Errorf("arm %s: no runs", label)
	}
	return r, nil
}

// episodeOutcomes reads an episode JSONL file (compactrl rollout's, whose
// ids are NAME-SEED) as an evaluation: the episodes in task-seed order
// (rollout writes them as they finish), which must be consecutive seeds,
// so that two files of the same seeds pair task by task.
func episodeOutcomes(path string) (train.EvalResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return train.EvalResult{}, fmt.Errorf("eval compare: %w", err)
	}
	defer f.Close()
	eps, err := report.ReadEpisodes(f)
	if err != nil {
		return train.EvalResult{}, fmt.Errorf("eval compare %s: %w", path, err)
	}
	ev := train.EvalResult{Episodes: len(eps), Range: "episodes"}
	seeds := make([]int64, len(eps))
	for i := range eps {
		if _, err := fmt.Sscanf(eps[i].ID[strings.LastIndex(eps[i].ID, "-")+1:], "%d", &seeds[i]); err != nil {
			return ev, fmt.Errorf("eval compare %s: episode id %q does not end in its task seed", path, eps[i].ID)
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
			return ev, fmt.Errorf("eval compare %s: the episodes' task seeds are not consecutive (%d follows %d)", path, seeds[i], ev.FirstSeed+int64(j)-1)
		}
		o := train.Outcome{TaskSeed: seeds[i], Status: string(e.Status), Scored: e.Status.Scored(), Reward: e.Reward}
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

// outcomeFiles are the outcomes files a PATH of eval compare names: the
// file itself, a run directory's final outcomes, or those of the runs
// DIR/seed-* in seed order.
func outcomeFiles(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("eval compare: %w", err)
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	if _, err := os.Stat(train.FinalOutcomes(p)); err == nil {
		return []string{train.FinalOutcomes(p)}, nil
	}
	runs, err := filepath.Glob(filepath.Join(p, "seed-*"))
	if err != nil {
		return nil, fmt.Errorf("eval compare: %w", err)
	}
	var out []string
	for _, r := range runs {
		if _, err := os.Stat(train.FinalOutcomes(r)); err == nil {
			out = append(out, train.FinalOutcomes(r))
		}
	}
	sort.Slice(out, func(i, j int) bool { return seedOf(out[i]) < seedOf(out[j]) })
	if len(out) == 0 {
		return nil, errors.New("eval compare: " + p + " holds no finished run (outcomes/final.json, or seed-*/outcomes/final.json)")
	}
	return out, nil
}

// seedOf is the S of a path …/seed-S/outcomes/final.json (0 if none).
func seedOf(path string) int64 {
	var s int64
	fmt.Sscanf(filepath.Base(filepath.Dir(filepath.Dir(path))), "seed-%d", &s)
	return s
}

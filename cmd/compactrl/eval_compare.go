package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/compactrl/compactrl/eval"
	"github.com/compactrl/compactrl/experiment"
)

// runEvalCompare is `compactrl eval compare`: paired comparisons of arms
// from their runs' per-task outcomes (written by every run's final
// evaluation, by `eval checkpoint --outcomes`, or by an experiment), the
// first arm the reference.
func runEvalCompare(ctx context.Context, e env, args []string) error {
	fs := newCmdLine("eval compare", "eval compare [LABEL=]PATH[,PATH…] [LABEL=]PATH[,PATH…] …")
	fs.about = "Each argument is an arm: its runs, comma-separated. A PATH is a run directory (its outcomes/final.json), an outcomes file\n" +
		"(.json), an episode file of compactrl rollout (.jsonl, consecutive task seeds), or a directory of runs (DIR/seed-*, as an experiment's DIR/ARM). Every run must have been evaluated on the same tasks.\n" +
		"Prints each arm's pass@1 with a 95% interval (one run: Wilson over its tasks; several: bootstrap over runs and tasks), and its paired difference against the first arm."
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

// loadArm reads one [LABEL=]PATH[,PATH…] argument of eval compare: the
// arm's runs, numbered 1… as its seeds.
func loadArm(arg string) (experiment.ArmResult, error) {
	label, list, ok := strings.Cut(arg, "=")
	if !ok {
		label, list = arg, arg
	}
	r := experiment.ArmResult{Arm: experiment.Arm{Name: label, Label: label}}
	evals, files, err := eval.ReadRuns(strings.Split(list, ","))
	if err != nil {
		return r, fmt.Errorf("eval compare: %w", err)
	}
	if len(evals) == 0 {
		return r, fmt.Errorf("arm %s: no runs", label)
	}
	r.Evals, r.Runs = evals, files
	for i := range evals {
		r.Seeds = append(r.Seeds, int64(i+1))
	}
	return r, nil
}

package experiment

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/compactrl/compactrl/kernel"
	"github.com/compactrl/compactrl/recipe"
	"github.com/compactrl/compactrl/report"
	"github.com/compactrl/compactrl/train"
)

// FinishedRun is the final evaluation of a run directory that an earlier
// experiment finished with the same settings (config.yaml as cfg's) on
// the same tasks (range, first task seed and count), if there is one. A
// run without RL iterations (the base arm) never reads the rl section or
// run.episodes, so those may differ: an experiment that changes only RL
// settings reuses its base evaluations.
func FinishedRun(cfg recipe.Config) (train.EvalResult, bool) {
	ev, err := train.ReadOutcomes(train.FinalOutcomes(cfg.Run.Dir))
	if err != nil || ev.Range != cfg.Train().EvalRangeName() || ev.FirstSeed != cfg.Train().EvalSeedStart() || ev.Episodes != cfg.Run.EvalEpisodes {
		return ev, false
	}
	old, err := recipe.LoadConfig(filepath.Join(cfg.Run.Dir, "config.yaml"))
	if err != nil {
		return ev, false
	}
	if cfg.Run.Iterations == 0 && old.Run.Iterations == 0 {
		old.RL, old.Run.Episodes = cfg.RL, cfg.Run.Episodes
	}
	a, errA := old.YAML()
	b, errB := cfg.YAML()
	return ev, errA == nil && errB == nil && bytes.Equal(a, b)
}

// ResultsFile is DIR/results.md (the results, effects, dynamics and credit
// tables and the command that made them) and DIR/outcomes.jsonl (every
// task of every run).
type ResultsFile struct {
	Dir, Cmdline, BaseDir string
	Start                 time.Time
}

// Write writes the tables of the results so far (final: of every run) and
// returns the Markdown.
func (r *ResultsFile) Write(results []ArmResult, final bool) (string, error) {
	state := "complete"
	if !final {
		state = "in progress: the rows so far"
	}
	credit, err := CreditTable(results, report.Load)
	if err != nil {
		return "", err
	}
	dyn, err := DynamicsTable(results, report.Load)
	if err != nil {
		return "", err
	}
	md := fmt.Sprintf("%s\n\n%s\n\n%s\n\n%s\nCommand: `%s` (%s wall, %s); kernel path %s; base policy %s.\n",
		Markdown(Table(results)), Markdown(EffectsTable(results)), Markdown(dyn), Markdown(credit), r.Cmdline, time.Since(r.Start).Round(time.Second), state, kernel.Path(), r.BaseDir)
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		return "", fmt.Errorf("experiment dir %s: %w", r.Dir, err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "results.md"), []byte(md), 0o644); err != nil {
		return "", fmt.Errorf("experiment results: %w", err)
	}
	var o bytes.Buffer
	if err := WriteOutcomes(&o, results); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "outcomes.jsonl"), o.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("experiment outcomes: %w", err)
	}
	return md, nil
}

// WriteReport writes DIR/report.html (the results and credit
// tables, the arms' pass@1 with their intervals, one learning curve per arm
// and seed) and DIR/arms.svg (that plot alone); it returns the report's path.
func WriteReport(dir, cmdline string, results []ArmResult) (string, error) {
	// Each run's metrics are read once, for its learning curve and for the
	// credit table.
	loaded := map[string]report.Run{}
	var runs []report.Run
	for _, r := range results {
		for i, d := range r.Runs {
			run, err := report.Load(d)
			if err != nil {
				return "", err
			}
			loaded[d] = run
			run.Name = fmt.Sprintf("%s s%d", r.Arm.Name, r.Seeds[i])
			run.Config = ""
			runs = append(runs, run)
		}
	}
	credit, err := CreditTable(results, func(d string) (report.Run, error) { return loaded[d], nil })
	if err != nil {
		return "", err
	}
	dyn, err := DynamicsTable(results, func(d string) (report.Run, error) { return loaded[d], nil })
	if err != nil {
		return "", err
	}
	svg := report.IntervalsSVG("Pass@1 with compaction per arm: mean over seeds, 95% bootstrap interval over seeds and tasks, each seed", "pass@1", Intervals(results))
	if err := os.WriteFile(filepath.Join(dir, "arms.svg"), []byte(svg), 0o644); err != nil {
		return "", fmt.Errorf("experiment plot: %w", err)
	}
	page := report.Page{Title: "CompactionRL experiment", Tables: []report.Table{Table(results), EffectsTable(results), dyn, credit}, Figures: []string{svg},
		Notes: []string{"Command: " + cmdline, "Learning curves: one line per arm and seed."}, Runs: runs}
	htmlPath := filepath.Join(dir, "report.html")
	if err := report.WriteFile(htmlPath, page); err != nil {
		return "", err
	}
	return htmlPath, nil
}

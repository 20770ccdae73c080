package experiment

import (
	"fmt"
	"math"
	"strings"

	"github.com/compactrl/compactrl/report"
	"github.com/compactrl/compactrl/stats"
	"github.com/compactrl/compactrl/train"
)

// Bootstrap settings of every interval the experiment reports: replicates,
// and the seed of their draws (the same results give the same intervals).
const (
	BootstrapReps        = 2000
	BootstrapSeed uint64 = 1
)

// Tasks names the evaluation tasks of an arm: range, first task seed and
// count (every seed of an arm, and every arm of a paired comparison, must
// have the same).
type Tasks struct {
	Range     string
	FirstSeed int64
	N         int
}

func (t Tasks) String() string {
	r := t.Range + " range"
	if t.Range == "episodes" { // episode files (eval compare): no range recorded
		r = "episode files"
	}
	return fmt.Sprintf("%s, task seeds %d…%d (%d tasks)", r, t.FirstSeed, t.FirstSeed+int64(t.N)-1, t.N)
}

// Grid is an arm's outcome grid for package stats: y[s][t] is 1 if the
// run with the arm's s-th seed passed task t with compaction, 0 if it
// failed, NaN if the task was not scored; ok is false when some seed has
// no per-task outcomes (a run from before they were kept) or the seeds
// were evaluated on different tasks.
func Grid(r ArmResult) (y [][]float64, tasks Tasks, ok bool) {
	for i, ev := range r.Evals {
		if len(ev.Outcomes) == 0 || len(ev.Outcomes) != ev.Episodes {
			return nil, tasks, false
		}
		t := Tasks{ev.Range, ev.FirstSeed, ev.Episodes}
		if i == 0 {
			tasks = t
		} else if t != tasks {
			return nil, tasks, false
		}
		row := make([]float64, len(ev.Outcomes))
		for j, o := range ev.Outcomes {
			row[j] = math.NaN()
			if o.Scored {
				row[j] = float64(o.Pass)
			}
		}
		y = append(y, row)
	}
	return y, tasks, len(y) > 0
}

// Table is the results table: per arm, each seed's pass@1 with
// compaction, their mean with the 95% hierarchical bootstrap interval over
// RL seeds and tasks (stats.HierarchicalMean), pass@1 in a single window,
// mean reward, compactions per episode and summary quality (means over
// seeds). An arm whose runs kept no per-task outcomes gets the t-interval
// across seeds instead, marked as such (it leaves out task sampling).
func Table(results []ArmResult) report.Table {
	t := report.Table{
		Caption: "Pass@1 on the built-in vault suite" + tasksCaption(results),
		Header:  []string{"arm", "seeds", "pass@1 per seed (compacted)", "pass@1 compacted, mean over seeds [95% bootstrap over seeds × tasks]", "pass@1 single window (mean over seeds)", "mean reward compacted", "compactions / ep.", "summary quality"},
	}
	for _, r := range results {
		var per, vals []float64
		for _, e := range r.Evals {
			per = append(per, e.Pass1Compact)
			vals = append(vals, e.Pass1Compact)
		}
		t.Rows = append(t.Rows, []string{
			r.Arm.Label, fmt.Sprint(len(r.Seeds)), joinF(per), meanCell(r, vals),
			train.FormatMetric(meanOf(r.Evals, func(e train.EvalResult) float64 { return e.Pass1Single }), "%.3f"),
			train.FormatMetric(meanOf(r.Evals, func(e train.EvalResult) float64 { return e.Reward }), "%.3f"),
			train.FormatMetric(meanOf(r.Evals, func(e train.EvalResult) float64 { return e.Compactions }), "%.3f"),
			train.FormatMetric(meanOf(r.Evals, func(e train.EvalResult) float64 { return e.SummaryQuality }), "%.3f"),
		})
	}
	return t
}

// meanCell is an arm's mean pass@1 with its interval: the hierarchical
// bootstrap when the arm has outcome grids, else the t-interval across
// seeds (marked), else the mean alone.
func meanCell(r ArmResult, vals []float64) string {
	if len(r.Evals) == 1 && len(r.Evals[0].Outcomes) > 0 {
		// One run: its tasks are the only sample, the binomial interval.
		k, n := 0, 0
		for _, o := range r.Evals[0].Outcomes {
			if o.Scored {
				n++
				k += o.Pass
			}
		}
		if n > 0 {
			lo, hi := stats.Wilson(k, n)
			return fmt.Sprintf("%.3f [%.3f, %.3f] (Wilson, one run)", float64(k)/float64(n), lo, hi)
		}
	}
	if y, _, ok := Grid(r); ok {
		if b, err := stats.HierarchicalMean(y, BootstrapReps, BootstrapSeed); err == nil {
			return fmt.Sprintf("%.3f [%.3f, %.3f]", b.Est, b.Lo, b.Hi)
		}
	}
	m, lo, hi := stats.SeedMean(vals)
	if math.IsNaN(lo) {
		return train.FormatMetric(m, "%.3f")
	}
	return fmt.Sprintf("%.3f [%.3f, %.3f] (t over seeds; no per-task outcomes)", m, lo, hi)
}

// tasksCaption names the tasks every arm was evaluated on, or says that
// they differ.
func tasksCaption(results []ArmResult) string {
	var first *Tasks
	for _, r := range results {
		_, tk, ok := Grid(r)
		if !ok {
			continue
		}
		if first == nil {
			first = &tk
		} else if *first != tk {
			return " (the arms were evaluated on different tasks: not comparable pairwise)"
		}
	}
	if first == nil {
		return ""
	}
	return ": " + first.String() + ", the same for every arm"
}

// Effect is one arm's paired difference in pass@1 against a reference arm
// on the same tasks (stats.PairedDiff), and each seed's difference against
// the reference's run with the same RL seed where it has one.
type Effect struct {
	Diff    stats.Bootstrap
	PerSeed []float64 // NaN where the reference has no run with that seed
	// T is the mean of the per-seed paired differences (each of a's runs
	// against the reference's run with its RL seed, or against the
	// reference's only run) with the 95% Student-t interval across seeds:
	// at 3–10 seeds the percentile bootstrap over seeds is too narrow
	// (it cannot see spread beyond the few seeds drawn), so tables show
	// both and a claim takes the wider. NaN bounds below two seeds.
	T  [3]float64
	OK bool // false: no outcomes, or other tasks than the reference's
}

// Wider is the wider of the bootstrap and the t-interval (the one a claim
// should use), as (lo, hi); the t-interval counts when it is defined.
func (e Effect) Wider() (lo, hi float64) {
	lo, hi = e.Diff.Lo, e.Diff.Hi
	if !math.IsNaN(e.T[1]) && e.T[2]-e.T[1] > hi-lo {
		lo, hi = e.T[1], e.T[2]
	}
	return lo, hi
}

// effectOf is arm a's effect against reference ref (pass@1 with
// compaction).
func effectOf(a, ref ArmResult) Effect {
	ya, ta, okA := Grid(a)
	yr, tr, okR := Grid(ref)
	if !okA || !okR || ta != tr {
		return Effect{}
	}
	d, err := stats.PairedDiff(ya, yr, BootstrapReps, BootstrapSeed)
	if err != nil {
		return Effect{}
	}
	e := Effect{Diff: d, OK: true}
	var paired []float64
	for i, s := range a.Seeds {
		v := math.NaN()
		for j, rs := range ref.Seeds {
			if rs == s {
				v = a.Evals[i].Pass1Compact - ref.Evals[j].Pass1Compact
			}
		}
		e.PerSeed = append(e.PerSeed, v)
		switch {
		case !math.IsNaN(v):
			paired = append(paired, v)
		case len(ref.Evals) == 1:
			paired = append(paired, a.Evals[i].Pass1Compact-ref.Evals[0].Pass1Compact)
		}
	}
	e.T[0], e.T[1], e.T[2] = stats.SeedMean(paired)
	return e
}

// EffectsTable is each arm's paired effect on pass@1 with compaction
// against the base policy and against CompactionRL (the arms named "base"
// and "compactionrl"), with 95% hierarchical bootstrap intervals over RL
// seeds and tasks, and the per-seed differences against CompactionRL's run
// with the same RL seed. Absent references give "–".
func EffectsTable(results []ArmResult) report.Table {
	t := report.Table{
		Caption: "Paired effects on pass@1 with compaction" + tasksCaption(results) + "; 95% intervals: bootstrap over RL seeds (each arm's own) and tasks (shared by both arms), then t: Student-t across RL seeds of the per-seed paired differences (claim the wider)",
		Header:  []string{"arm", "seeds", "Δ vs base policy [95%]", "Δ vs CompactionRL [95%]", "per-seed Δ vs CompactionRL (same RL seed)"},
	}
	base, cr := findArm(results, "base"), findArm(results, "compactionrl")
	cell := func(a ArmResult, ref *ArmResult) (string, Effect) {
		if ref == nil || ref.Arm.Name == a.Arm.Name {
			return "–", Effect{}
		}
		e := effectOf(a, *ref)
		if !e.OK {
			return "–", e
		}
		c := fmt.Sprintf("%+.3f [%+.3f, %+.3f]", e.Diff.Est, e.Diff.Lo, e.Diff.Hi)
		if !math.IsNaN(e.T[1]) {
			c += fmt.Sprintf(" t [%+.3f, %+.3f]", e.T[1], e.T[2])
		}
		return c, e
	}
	for _, r := range results {
		if len(r.Evals) == 0 {
			continue
		}
		vb, _ := cell(r, base)
		vc, ec := cell(r, cr)
		per := "–"
		if ec.OK {
			var s []string
			for _, v := range ec.PerSeed {
				s = append(s, train.FormatMetric(v, "%+.3f"))
			}
			per = strings.Join(s, " ")
		}
		t.Rows = append(t.Rows, []string{r.Arm.Label, fmt.Sprint(len(r.Seeds)), vb, vc, per})
	}
	return t
}

func findArm(results []ArmResult, name string) *ArmResult {
	for i := range results {
		if results[i].Arm.Name == name && len(results[i].Evals) > 0 {
			return &results[i]
		}
	}
	return nil
}

func joinF(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.3f", x)
	}
	return strings.Join(s, " ")
}

// CompareTable compares arms (each with its runs' evaluations on the same
// tasks) against the first: each arm's runs' pass@1 with compaction, their
// mean with the 95% bootstrap interval over runs and tasks, and the paired
// effect against the first arm (stats.PairedDiff). It is `compactrl eval
// compare`'s table, for runs of different experiments (other configs).
func CompareTable(arms []ArmResult) report.Table {
	t := report.Table{
		Caption: "Pass@1 with compaction" + tasksCaption(arms) + "; 95% intervals: Wilson over the tasks of an arm of one run, else bootstrap over runs (RL seeds) and tasks; paired differences: bootstrap, tasks shared by the paired arms",
		Header:  []string{"arm", "runs", "pass@1 per run", "pass@1, mean over runs [95%]", "Δ vs " + firstLabel(arms) + " [95%]"},
	}
	for i, r := range arms {
		var vals []float64
		for _, e := range r.Evals {
			vals = append(vals, e.Pass1Compact)
		}
		d := "–"
		if i > 0 {
			if e := effectOf(r, arms[0]); e.OK {
				d = fmt.Sprintf("%+.3f [%+.3f, %+.3f]", e.Diff.Est, e.Diff.Lo, e.Diff.Hi)
			} else {
				d = "not comparable (no per-task outcomes or other tasks)"
			}
		}
		t.Rows = append(t.Rows, []string{r.Arm.Label, fmt.Sprint(len(r.Evals)), joinF(vals), meanCell(r, vals), d})
	}
	return t
}

func firstLabel(arms []ArmResult) string {
	if len(arms) == 0 {
		return "the first"
	}
	return arms[0].Arm.Label
}

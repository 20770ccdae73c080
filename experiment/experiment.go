// Package experiment runs the paper's comparison on the built-in vault
// suite: arms (ablations of docs/design.md §1) × seeds, every run RL from one
// base policy (recipe.FromBase), every arm evaluated on the same tasks of a
// named range (development or sealed test), and renders the results as
// tables (report.Table, Markdown): each arm's pass@1 and its paired effect
// against the base and against CompactionRL, with 95% intervals from a
// bootstrap over RL seeds and tasks (package stats).
//
// Data flow: Experiment.Run applies each Arm to the base config, runs it
// with RunOne (the command builds it with recipe.Build), collects each
// run's final train.EvalResult (with its per-task outcomes) into
// ArmResults, and adds the scripted expert's reference rows; Grid turns an
// arm's outcomes into the seeds × tasks grid that Table and EffectsTable
// hand to package stats, and WriteOutcomes writes them as JSON lines.
package experiment

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/compactrl/compactrl/recipe"
	"github.com/compactrl/compactrl/report"
	"github.com/compactrl/compactrl/stats"
	"github.com/compactrl/compactrl/train"
)

// Arm is one column of the paper's tables: a change to the base config.
type Arm struct {
	Name  string
	Label string
	Apply func(c *recipe.Config)
}

// FixedLambda is the fixed λ of the -fixed-lambda arms: on the long suite's
// episodes (~360 optimised tokens) cross-trajectory GAE's factor on the
// first segment is then about 0.05, where the length-adaptive λ caps it
// near e^{−1/α} ≈ 0.5, so the arm tests the true-distance discount.
const FixedLambda = 0.99

// Arms are the ablations of docs/design.md §1 on the built-in suite. Every arm
// starts from the same base policy and is evaluated with compaction and in
// a single window; base is that policy evaluated without RL.
func Arms() []Arm {
	return []Arm{
		{"base", "base policy (no RL)", func(c *recipe.Config) { c.Run.Iterations = 0 }},
		{"rl-no-compaction", "RL without compaction", func(c *recipe.Config) { c.Agent.NoCompaction = true }},
		{"compactionrl", "CompactionRL", func(c *recipe.Config) {}},
		{"no-summary-training", "− summary training", func(c *recipe.Config) { c.RL.SummaryTraining = false }},
		{"seq-mean-token-mean", "− token-level loss (seq-mean-token-mean)", func(c *recipe.Config) { c.RL.LossAggMode = "seq-mean-token-mean" }},
		{"independent", "− cross-traj. GAE (independent)", func(c *recipe.Config) { c.RL.Estimator = "independent" }},
		{"independent-fixed-lambda", "− cross-traj. GAE (independent), fixed λ = 0.99", func(c *recipe.Config) {
			c.RL.Estimator, c.RL.Alpha, c.RL.Lambda = "independent", 0, FixedLambda
		}},
		{"compactionrl-fixed-lambda", "CompactionRL, fixed λ = 0.99", func(c *recipe.Config) { c.RL.Alpha, c.RL.Lambda = 0, FixedLambda }},
		{"grpo", "SUPO-style GRPO (group 4)", func(c *recipe.Config) {
			c.RL.Estimator, c.RL.GroupSize = "grpo", 4
			c.Run.Episodes = max(4, c.Run.Episodes/4*4)
		}},
	}
}

// SelectArms returns the arms named in names (all when empty).
func SelectArms(names []string) ([]Arm, error) {
	all := Arms()
	if len(names) == 0 {
		return all, nil
	}
	var out []Arm
	for _, n := range names {
		found := false
		for _, a := range all {
			if a.Name == n {
				out, found = append(out, a), true
			}
		}
		if !found {
			known := make([]string, len(all))
			for i, a := range all {
				known[i] = a.Name
			}
			return nil, fmt.Errorf("unknown arm %q (known: %s)", n, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// ArmResult gathers an arm's held-out evaluations over seeds.
type ArmResult struct {
	Arm   Arm
	Seeds []int64
	Evals []train.EvalResult
	Runs  []string // run directories
}

// Experiment runs arms × seeds, every run from the base policy directory
// BaseDir (recipe.FromBase): seeds vary only RL (sampling, critic
// initialisation, data order), as the paper compares RL methods from one
// pretrained model. Runs go to Dir/ARM/seed-S.
type Experiment struct {
	Base    recipe.Config // RL and run settings; the suite and agent must match BaseDir's
	BaseDir string
	Arms    []Arm
	Seeds   []int64
	Dir     string
	// RunOne runs one config and returns its result (the command builds
	// the run with recipe.Build and writes its report).
	RunOne   func(ctx context.Context, cfg recipe.Config) (train.Result, error)
	Progress io.Writer
	// ExpertP lists summary keep probabilities of the scripted expert to
	// evaluate as reference rows (no training; one evaluation each).
	ExpertP []float64
	// Done, if set, is called after every run with the results so far, so
	// that a long experiment leaves its table behind as it goes.
	Done func(results []ArmResult) error
}

// Run executes the experiment: seeds in the outer loop, so that a stopped
// experiment has every arm for its first seeds.
func (x *Experiment) Run(ctx context.Context) ([]ArmResult, error) {
	res := make([]ArmResult, len(x.Arms))
	for i, a := range x.Arms {
		res[i].Arm = a
	}
	for _, seed := range x.Seeds {
		for i, a := range x.Arms {
			cfg, r, err := x.runArm(ctx, a, seed)
			if err != nil {
				return res, err
			}
			res[i].Seeds = append(res[i].Seeds, seed)
			res[i].Evals = append(res[i].Evals, r.After)
			res[i].Runs = append(res[i].Runs, cfg.Run.Dir)
			if x.Done != nil {
				if err := x.Done(res); err != nil {
					return res, err
				}
			}
		}
	}
	for _, p := range x.ExpertP {
		row, err := x.expertRow(ctx, p)
		if err != nil {
			return res, err
		}
		res = append(res, row)
	}
	return res, nil
}

// runArm runs arm a with seed from the base policy, into Dir/ARM/seed-S.
func (x *Experiment) runArm(ctx context.Context, a Arm, seed int64) (recipe.Config, train.Result, error) {
	cfg := x.Base
	cfg.Seed = seed
	cfg.Run.Dir = filepath.Join(x.Dir, a.Name, fmt.Sprintf("seed-%d", seed))
	a.Apply(&cfg)
	cfg, err := recipe.FromBase(x.BaseDir, cfg)
	if err != nil {
		return cfg, train.Result{}, fmt.Errorf("arm %s: %w", a.Name, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, train.Result{}, fmt.Errorf("arm %s: %w", a.Name, err)
	}
	if x.Progress != nil {
		fmt.Fprintf(x.Progress, "== arm %s, seed %d → %s\n", a.Name, seed, cfg.Run.Dir)
	}
	r, err := x.RunOne(ctx, cfg)
	if err != nil {
		return cfg, r, fmt.Errorf("arm %s seed %d: %w", a.Name, seed, err)
	}
	return cfg, r, nil
}

// expertRow is the reference row of the scripted expert keeping each fact
// with probability p, evaluated once on the base's suite.
func (x *Experiment) expertRow(ctx context.Context, p float64) (ArmResult, error) {
	cfg, err := recipe.FromBase(x.BaseDir, x.Base)
	if err != nil {
		return ArmResult{}, err
	}
	ev, err := recipe.EvaluateExpert(ctx, cfg, p, x.Progress)
	if err != nil {
		return ArmResult{}, fmt.Errorf("expert p=%g: %w", p, err)
	}
	return ArmResult{
		Arm:   Arm{Name: fmt.Sprintf("expert-p%g", p), Label: fmt.Sprintf("scripted expert, p = %g (reference)", p)},
		Seeds: []int64{x.Base.Seed}, Evals: []train.EvalResult{ev},
	}, nil
}

func meanOf(evals []train.EvalResult, f func(train.EvalResult) float64) float64 {
	s, n := 0.0, 0
	for _, e := range evals {
		if v := f(e); !math.IsNaN(v) {
			s += v
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return s / float64(n)
}

// Markdown renders a table as GitHub Markdown.
func Markdown(t report.Table) string {
	var b strings.Builder
	if t.Caption != "" {
		fmt.Fprintf(&b, "%s\n\n", t.Caption)
	}
	esc := func(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
	row := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			fmt.Fprintf(&b, " %s |", esc(c))
		}
		b.WriteString("\n")
	}
	row(t.Header)
	sep := make([]string, len(t.Header))
	for i := range sep {
		sep[i] = "---"
	}
	row(sep)
	for _, r := range t.Rows {
		row(r)
	}
	return b.String()
}

// creditFields are the per-iteration credit diagnostics of train.Metrics
// (rl.Credit) that CreditTable averages, with their column headers.
var creditFields = []struct{ key, header string }{
	{"lambda_mean", "λ used"},
	{"first_segment_scale", "cross-gae factor on the first segment (γλ)^{N>first}"},
	{"adv_abs_first_segment", "mean |Â|, first segment"},
	{"adv_abs_last_segment", "mean |Â|, last segment"},
	{"value_err_first_segment", "critic mean |V − G|, first segment"},
	{"value_err_last_segment", "critic mean |V − G|, last segment"},
	{"value_jump_at_boundary", "critic mean |V after − V before| a compaction"},
}

// CreditTable is how credit reached the segments of each arm's training
// episodes: every diagnostic averaged over a run's iterations, then over
// its seeds (runs are read with load, e.g. report.Load). An arm without
// the diagnostics (no RL) shows "–".
func CreditTable(results []ArmResult, load func(dir string) (report.Run, error)) (report.Table, error) {
	t := report.Table{Caption: "How credit reached the segments of the training episodes with two or more segments (means over iterations, then seeds)",
		Header: []string{"arm", "seeds"}}
	for _, f := range creditFields {
		t.Header = append(t.Header, f.header)
	}
	for _, r := range results {
		if len(r.Runs) == 0 {
			continue // a reference row: no training
		}
		sums := make([]float64, len(creditFields))
		ns := make([]int, len(creditFields))
		for _, dir := range r.Runs {
			run, err := load(dir)
			if err != nil {
				return t, fmt.Errorf("credit of arm %s: %w", r.Arm.Name, err)
			}
			for i, f := range creditFields {
				s, n := 0.0, 0
				for _, rec := range run.Records {
					if v, ok := rec[f.key]; ok && !math.IsNaN(v) {
						s += v
						n++
					}
				}
				if n > 0 {
					sums[i] += s / float64(n)
					ns[i]++
				}
			}
		}
		row := []string{r.Arm.Label, fmt.Sprint(len(r.Runs))}
		for i := range creditFields {
			if ns[i] == 0 {
				row = append(row, "–")
				continue
			}
			row = append(row, fmt.Sprintf("%.4g", sums[i]/float64(ns[i])))
		}
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}

// Intervals are the arms' pass@1 with compaction for report.IntervalsSVG:
// the mean over seeds with its 95% hierarchical bootstrap interval over
// seeds and tasks (the t-interval across seeds for runs without per-task
// outcomes), and each seed's value.
func Intervals(results []ArmResult) []report.Interval {
	var out []report.Interval
	for _, r := range results {
		var vals []float64
		for _, e := range r.Evals {
			vals = append(vals, e.Pass1Compact)
		}
		if len(vals) == 0 {
			continue
		}
		m, lo, hi := stats.SeedMean(vals)
		if y, _, ok := Grid(r); ok {
			if b, err := stats.HierarchicalMean(y, BootstrapReps, BootstrapSeed); err == nil {
				m, lo, hi = b.Est, b.Lo, b.Hi
			}
		}
		sub := fmt.Sprintf("%.3f", m)
		if !math.IsNaN(lo) {
			sub = fmt.Sprintf("%.3f [%.3f, %.3f]", m, lo, hi)
		}
		out = append(out, report.Interval{Label: r.Arm.Label, Mean: m, Lo: lo, Hi: hi, Values: vals, Subtitle: sub})
	}
	return out
}

// dynamicsFields are the training-rollout metrics that DynamicsTable
// follows from the first iterations to the last.
var dynamicsFields = []struct{ key, header, format string }{
	{"overlong_frac", "overlong fraction", "%.2f"},
	{"compactions", "compactions / ep.", "%.1f"},
	{"reward", "training reward", "%.2f"},
	{"summary_quality", "summary quality", "%.2f"},
}

// DynamicsWindow is how many iterations DynamicsTable averages at the
// start and at the end of a run (half of a run shorter than twice that,
// so that the two never overlap).
const DynamicsWindow = 5

// DynamicsTable is how each arm's training rollouts moved: every metric of
// dynamicsFields averaged over a run's first DynamicsWindow iterations and
// over its last ones, then over seeds ("start → end"), and the seeds whose
// training reward over the last iterations fell below 0.2 (a collapse).
// Runs are read with load (report.Load); reference rows are skipped.
func DynamicsTable(results []ArmResult, load func(dir string) (report.Run, error)) (report.Table, error) {
	t := report.Table{Caption: fmt.Sprintf("Training rollouts: means over the first and the last %d iterations (half of a shorter run's), then over seeds", DynamicsWindow),
		Header: []string{"arm", "seeds"}}
	for _, f := range dynamicsFields {
		t.Header = append(t.Header, f.header+", start → end")
	}
	t.Header = append(t.Header, "seeds with a training reward below 0.2 at the end")
	for _, r := range results {
		if len(r.Runs) == 0 {
			continue
		}
		start, end := make([][]float64, len(dynamicsFields)), make([][]float64, len(dynamicsFields))
		var collapsed []string
		for i, dir := range r.Runs {
			run, err := load(dir)
			if err != nil {
				return t, fmt.Errorf("dynamics of arm %s: %w", r.Arm.Name, err)
			}
			var iters []report.Record // iteration records with rollouts (not the final evaluation's)
			for _, rec := range run.Records {
				if _, ok := rec["episodes"]; ok {
					iters = append(iters, rec)
				}
			}
			if len(iters) == 0 {
				continue
			}
			w := max(1, min(DynamicsWindow, len(iters)/2))
			for k, f := range dynamicsFields {
				start[k] = append(start[k], recMean(iters[:w], f.key))
				end[k] = append(end[k], recMean(iters[len(iters)-w:], f.key))
			}
			if v := recMean(iters[len(iters)-w:], "reward"); v < 0.2 {
				collapsed = append(collapsed, fmt.Sprint(r.Seeds[i]))
			}
		}
		row := []string{r.Arm.Label, fmt.Sprint(len(r.Runs))}
		for k, f := range dynamicsFields {
			if len(start[k]) == 0 {
				row = append(row, "–")
				continue
			}
			row = append(row, train.FormatMetric(nanMeanOf(start[k]), f.format)+" → "+train.FormatMetric(nanMeanOf(end[k]), f.format))
		}
		c := "none"
		if len(collapsed) > 0 {
			c = strings.Join(collapsed, ", ")
		}
		if len(start[0]) == 0 {
			c = "–"
		}
		t.Rows = append(t.Rows, append(row, c))
	}
	return t, nil
}

// recMean is the mean of key over the records that have it (NaN if none).
func recMean(recs []report.Record, key string) float64 {
	var v []float64
	for _, r := range recs {
		if x, ok := r[key]; ok {
			v = append(v, x)
		}
	}
	return nanMeanOf(v)
}

// nanMeanOf is the mean of the values that are not NaN (NaN if none).
func nanMeanOf(v []float64) float64 {
	s, n := 0.0, 0
	for _, x := range v {
		if !math.IsNaN(x) {
			s += x
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return s / float64(n)
}

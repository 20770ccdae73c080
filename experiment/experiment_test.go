package experiment

import (
	"context"
	"errors"
	"fmt"
	"github.com/compactrl/compactrl/stats"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/recipe"
	"github.com/compactrl/compactrl/report"
	"github.com/compactrl/compactrl/train"
)

// writeTestBase writes a base policy directory's recipe (no weights are
// needed to plan an experiment) and returns its path.
func writeTestBase(t *testing.T, cfg recipe.Config) string {
	t.Helper()
	dir := t.TempDir()
	y, err := cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, recipe.BaseConfigFile), y, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestExperimentOrchestration(t *testing.T) {
	pre := recipe.PretrainConfig()
	baseDir := writeTestBase(t, pre)
	base := recipe.DemoConfig()
	base.Run.Episodes = 10
	arms, err := SelectArms([]string{"base", "compactionrl", "grpo", "no-summary-training"})
	if err != nil {
		t.Fatal(err)
	}
	var ran []recipe.Config
	x := &Experiment{Base: base, BaseDir: baseDir, Arms: arms, Seeds: []int64{1, 2}, Dir: "/x",
		RunOne: func(ctx context.Context, c recipe.Config) (train.Result, error) {
			ran = append(ran, c)
			// Seed s passes tasks 0…s−1 of ten; CompactionRL two more.
			k := int(c.Seed)
			if strings.Contains(c.Run.Dir, "compactionrl") {
				k += 2
			}
			ev := train.EvalResult{Episodes: 10, Pass1Compact: float64(k) / 10, Pass1Single: 0.1, Range: "test", FirstSeed: 5000000}
			for j := range 10 {
				o := train.Outcome{TaskSeed: 5000000 + int64(j), Scored: true}
				if j < k {
					o.Pass = 1
				}
				ev.Outcomes = append(ev.Outcomes, o)
			}
			return train.Result{After: ev}, nil
		}}
	done := 0
	x.Done = func([]ArmResult) error { done++; return nil }
	res, err := x.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ran) != 8 || done != 8 {
		t.Fatalf("%d runs, %d progress calls; want 2 seeds × 4 arms", len(ran), done)
	}
	for i, c := range ran {
		arm := strings.Split(c.Run.Dir, string(filepath.Separator))[2]
		if want := int64(1 + i/4); c.Seed != want {
			t.Errorf("run %d (%s) has seed %d, want %d: seeds are the outer loop", i, arm, c.Seed, want)
		}
		// Every arm, the base included, starts from the one base policy
		// with no warm-start phase: seeds vary only RL.
		if c.SFT.Steps+c.SFT.CopySteps+c.SFT.RecallSteps+c.SFT.RecallMix != 0 || c.Model.Init != baseDir || c.Model.Tokenizer != filepath.Join(baseDir, recipe.TokenizerFile) {
			t.Errorf("arm %s must start from the base policy with no warm-start phase: init %q, sft %+v", arm, c.Model.Init, c.SFT)
		}
		switch arm {
		case "base":
			if c.Run.Iterations != 0 {
				t.Errorf("base arm runs %d RL iterations", c.Run.Iterations)
			}
		case "grpo":
			if c.RL.Estimator != "grpo" || c.RL.GroupSize != 4 || c.Run.Episodes%4 != 0 {
				t.Errorf("grpo arm config %+v", c.RL)
			}
		case "no-summary-training":
			if c.RL.SummaryTraining {
				t.Error("summary training not off")
			}
		}
	}
	if len(res) != 4 || len(res[1].Evals) != 2 {
		t.Fatalf("results %+v", res)
	}
	md := Markdown(Table(res))
	// The base's seeds pass 1/10 and 2/10: mean 0.15; CompactionRL's 3/10
	// and 4/10: 0.35. Both on test tasks 5000000…5000009.
	for _, want := range []string{"| base policy (no RL) | 2 | 0.100 0.200 | 0.150 [", "| CompactionRL | 2 | 0.300 0.400 | 0.350 [", "test range, task seeds 5000000…5000009 (10 tasks)"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	// Paired: CompactionRL passes the base's tasks and two more in every
	// seed, Δ = 0.35 − 0.15 = +0.2; per seed the base is 0.2 below.
	eff := Markdown(EffectsTable(res))
	for _, want := range []string{"| CompactionRL | 2 | +0.200 [", "| base policy (no RL) | 2 | – | -0.200 [", "| -0.200 -0.200 |"} {
		if !strings.Contains(eff, want) {
			t.Errorf("effects table lacks %q:\n%s", want, eff)
		}
	}
	// Without per-task outcomes the table falls back to the t-interval
	// across seeds, and says so: 0.15 ± 12.706·0.0707/√2 = ±0.635.
	for i := range res[0].Evals {
		res[0].Evals[i].Outcomes = nil
	}
	if md := Markdown(Table(res[:1])); !strings.Contains(md, "0.150 [-0.485, 0.785] (t over seeds; no per-task outcomes)") {
		t.Errorf("fallback table:\n%s", md)
	}
	if _, err := SelectArms([]string{"nope"}); err == nil || !strings.Contains(err.Error(), "compactionrl") {
		t.Errorf("unknown arm error = %v", err)
	}
}

func TestExperimentRefusesAnotherSuite(t *testing.T) {
	baseDir := writeTestBase(t, recipe.PretrainConfig())
	cfg := recipe.DemoConfig()
	cfg.Suite.Keys = 8
	x := &Experiment{Base: cfg, BaseDir: baseDir, Arms: Arms()[:1], Seeds: []int64{1}, Dir: t.TempDir(),
		RunOne: func(ctx context.Context, c recipe.Config) (train.Result, error) { return train.Result{}, nil }}
	if _, err := x.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "trained for suite") {
		t.Errorf("a base trained for another suite: err = %v", err)
	}
}

// CreditTable averages each diagnostic over a run's iterations, then over
// the arm's seeds, skipping iterations without it; an arm with none shows
// "–", and a run that cannot be read is an error naming the arm.
func TestCreditTable(t *testing.T) {
	runs := map[string]report.Run{
		"a1": {Records: []report.Record{{"lambda_mean": 0.9, "first_segment_scale": 0.5}, {"lambda_mean": 0.7}, {"eval_pass1_compact": 1}}},
		"a2": {Records: []report.Record{{"lambda_mean": 1.0, "first_segment_scale": 0.7}}},
		"b1": {Records: []report.Record{{"eval_pass1_compact": 0.5}}},
	}
	load := func(dir string) (report.Run, error) {
		r, ok := runs[dir]
		if !ok {
			return r, errors.New("no such run")
		}
		return r, nil
	}
	res := []ArmResult{
		{Arm: Arm{Name: "a", Label: "A"}, Runs: []string{"a1", "a2"}},
		{Arm: Arm{Name: "b", Label: "B"}, Runs: []string{"b1"}},
		{Arm: Arm{Name: "expert", Label: "reference"}},
	}
	tab, err := CreditTable(res, load)
	if err != nil {
		t.Fatal(err)
	}
	// λ: run a1 averages 0.8, run a2 1.0 → 0.9; factor (0.5 + 0.7)/2 = 0.6.
	if got := tab.Rows[0][2:4]; got[0] != "0.9" || got[1] != "0.6" || tab.Rows[0][4] != "–" {
		t.Errorf("arm A row %v", tab.Rows[0])
	}
	if len(tab.Rows) != 2 {
		t.Fatalf("%d rows, want 2 (the reference row has no runs)", len(tab.Rows))
	}
	if got := tab.Rows[1][2]; got != "–" {
		t.Errorf("arm B λ cell %q, want –", got)
	}
	res[1].Runs = []string{"missing"}
	if _, err := CreditTable(res, load); err == nil || !strings.Contains(err.Error(), "arm b") {
		t.Errorf("unreadable run: error %v, want one naming arm b", err)
	}
}

// Intervals gives each arm with results its seeds' mean, t-interval and
// values; an arm without results is left out.
func TestIntervals(t *testing.T) {
	res := []ArmResult{
		{Arm: Arm{Label: "A"}, Evals: []train.EvalResult{{Pass1Compact: 0.5}, {Pass1Compact: 0.7}}},
		{Arm: Arm{Label: "empty"}},
		{Arm: Arm{Label: "one"}, Evals: []train.EvalResult{{Pass1Compact: 0.25}}},
	}
	iv := Intervals(res)
	if len(iv) != 2 || iv[0].Label != "A" || iv[1].Label != "one" {
		t.Fatalf("intervals %+v", iv)
	}
	// Two values 0.5, 0.7: mean 0.6, s = 0.1414, t(0.975, 1) = 12.706: ±1.2706.
	if a := iv[0]; math.Abs(a.Mean-0.6) > 1e-12 || math.Abs(a.Hi-a.Mean-12.7062*0.1) > 1e-3 || len(a.Values) != 2 {
		t.Errorf("arm A %+v", a)
	}
	if o := iv[1]; !math.IsNaN(o.Lo) || o.Subtitle != "0.250" {
		t.Errorf("one seed %+v: want no interval", o)
	}
}

// DynamicsTable averages the first and the last five iterations of each
// run, then the seeds, and names the seeds that ended below a training
// reward of 0.2; the final evaluation's record (no "episodes") is not an
// iteration.
func TestDynamicsTable(t *testing.T) {
	mk := func(reward func(i int) float64) report.Run {
		var recs []report.Record
		for i := range 10 {
			recs = append(recs, report.Record{"episodes": 64, "overlong_frac": float64(i) / 10, "reward": reward(i), "compactions": 8, "summary_quality": 1})
		}
		return report.Run{Records: append(recs, report.Record{"eval_pass1_compact": 0.5})}
	}
	runs := map[string]report.Run{
		"s1": mk(func(int) float64 { return 0.8 }),
		"s2": mk(func(i int) float64 { return 0.8 - 0.08*float64(i) }),
		"b":  {Records: []report.Record{{"eval_pass1_compact": 0.7}}},
	}
	load := func(d string) (report.Run, error) { return runs[d], nil }
	res := []ArmResult{
		{Arm: Arm{Name: "x", Label: "X"}, Seeds: []int64{1, 2}, Runs: []string{"s1", "s2"}},
		{Arm: Arm{Name: "base", Label: "base"}, Seeds: []int64{1}, Runs: []string{"b"}},
	}
	tab, err := DynamicsTable(res, load)
	if err != nil {
		t.Fatal(err)
	}
	// Overlong: iterations 0–4 average 0.2, 5–9 average 0.7. Reward: seed 1
	// 0.8 → 0.8; seed 2 0.64 → 0.24; so 0.72 → 0.52, and seed 2 ends at
	// 0.24, not a collapse.
	want := []string{"X", "2", "0.20 → 0.70", "8.0 → 8.0", "0.72 → 0.52", "1.00 → 1.00", "none"}
	if got := tab.Rows[0]; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("row %v, want %v", got, want)
	}
	if got := tab.Rows[1]; got[2] != "–" || got[6] != "–" {
		t.Errorf("the base's row %v: want –", got)
	}
	runs["s2"] = mk(func(i int) float64 { return 0.8 - 0.09*float64(i) }) // 0.8 − 0.09·7 = 0.17 at the end
	tab, _ = DynamicsTable(res, load)
	if got := tab.Rows[0][6]; got != "2" {
		t.Errorf("collapsed seeds %q, want 2", got)
	}
	// A run of 5 iterations: its first 2 against its last 2, not all 5 twice.
	for _, k := range []string{"s1", "s2"} {
		r := runs[k]
		r.Records = append(append([]report.Record(nil), r.Records[:5]...), r.Records[10])
		runs[k] = r
	}
	tab, _ = DynamicsTable(res, load)
	if got := tab.Rows[0][2]; got != "0.05 → 0.35" {
		t.Errorf("overlong of 5-iteration runs %q, want 0.05 → 0.35 (iterations 0–1 against 3–4)", got)
	}
}

// effectOf's t-interval is over the per-seed paired differences: three
// CompactionRL runs (pass@1 0.5, 0.75, 1 on four tasks) against the base's
// one run (0.25): differences 0.25, 0.5, 0.75, mean 0.5, s = 0.25,
// t(0.975, 2) = 4.303: 0.5 ± 4.303·0.25/√3 = 0.5 ± 0.6211. The bootstrap
// over three seeds is narrower, so Wider is the t-interval.
func TestEffectTInterval(t *testing.T) {
	ev := func(pass ...int) train.EvalResult {
		e := train.EvalResult{Range: "test", FirstSeed: 5_000_000, Episodes: len(pass)}
		k := 0
		for _, p := range pass {
			e.Outcomes = append(e.Outcomes, train.Outcome{Scored: true, Pass: p})
			k += p
		}
		e.Pass1Compact = float64(k) / float64(len(pass))
		return e
	}
	base := ArmResult{Arm: Arm{Name: "base"}, Seeds: []int64{0}, Evals: []train.EvalResult{ev(1, 0, 0, 0)}}
	cr := ArmResult{Arm: Arm{Name: "compactionrl"}, Seeds: []int64{1, 2, 3}, Evals: []train.EvalResult{ev(1, 1, 0, 0), ev(1, 1, 1, 0), ev(1, 1, 1, 1)}}
	e := effectOf(cr, base)
	if !e.OK || math.Abs(e.T[0]-0.5) > 1e-12 || math.Abs(e.T[2]-0.5-4.303*0.25/math.Sqrt(3)) > 1e-9 || math.Abs(e.T[1]-0.5+4.303*0.25/math.Sqrt(3)) > 1e-9 {
		t.Fatalf("effect %+v", e)
	}
	if lo, hi := e.Wider(); lo != e.T[1] || hi != e.T[2] || !(e.Diff.Hi-e.Diff.Lo < hi-lo) {
		t.Fatalf("wider [%v, %v], bootstrap %+v", lo, hi, e.Diff)
	}
	if cell := EffectsTable([]ArmResult{base, cr}).Rows[1][2]; !strings.Contains(cell, "t [-0.121, +1.121]") {
		t.Fatalf("table cell %q", cell)
	}
}

// One run's pass@1 gets the Wilson interval over its tasks (the bootstrap
// over one run is the tasks' resampling, narrower than Wilson at 0 or 1).
func TestCompareTableOneRunIsWilson(t *testing.T) {
	run := func(passes ...int) train.EvalResult {
		var e train.EvalResult
		for i, p := range passes {
			e.Outcomes = append(e.Outcomes, train.Outcome{TaskSeed: int64(i), Scored: true, Pass: p})
			e.Pass1Compact += float64(p) / float64(len(passes))
		}
		e.Episodes, e.Range = len(passes), "dev"
		return e
	}
	arms := []ArmResult{
		{Arm: Arm{Name: "a", Label: "a"}, Evals: []train.EvalResult{run(1, 1, 1, 1)}, Seeds: []int64{1}},
		{Arm: Arm{Name: "b", Label: "b"}, Evals: []train.EvalResult{run(1, 0, 1, 0)}, Seeds: []int64{1}},
	}
	tb := CompareTable(arms)
	lo, hi := stats.Wilson(4, 4)
	want := fmt.Sprintf("1.000 [%.3f, %.3f] (Wilson, one run)", lo, hi)
	if got := tb.Rows[0][3]; got != want {
		t.Fatalf("one run's cell %q, want %q", got, want)
	}
}

package train

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

// Every evaluation writes its per-task outcomes, on the tasks of its
// range: the sealed test range from run.sealed_seed_start, the development
// range from suite.test_seed_start, each moved by run.eval_seed_offset;
// and pass@1 is the mean of the outcomes.
func TestEvaluationsWriteOutcomesOnTheirRange(t *testing.T) {
	for _, c := range []struct {
		rng    string
		sealed int64
		offset int64
		first  int64
	}{{"", 0, 0, 1_000_000}, {RangeDev, 0, 7, 1_000_007}, {RangeTest, 0, 0, 5_000_000}, {RangeTest, 2_000_000, 3, 2_000_003}} {
		cfg := testConfig(t)
		cfg.Run.Iterations, cfg.Run.EvalEvery = 1, 1
		cfg.Run.EvalRange, cfg.Run.SealedSeedStart, cfg.Run.EvalSeedOffset = c.rng, c.sealed, c.offset
		res, err := newTestTrainer(cfg, newMemoryTask()).Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"eval-000000.json", "final.json"} {
			ev, err := ReadOutcomes(cfg.Run.Dir + "/" + OutcomesDir + "/" + name)
			if err != nil {
				t.Fatal(err)
			}
			want := cfg.EvalRangeName()
			if ev.Range != want || ev.FirstSeed != c.first || len(ev.Outcomes) != cfg.Run.EvalEpisodes {
				t.Errorf("%+v %s: range %q first %d, %d outcomes; want %q %d %d", c, name, ev.Range, ev.FirstSeed, len(ev.Outcomes), want, c.first, cfg.Run.EvalEpisodes)
			}
			passed := 0
			for j, o := range ev.Outcomes {
				if o.TaskSeed != c.first+int64(j) || !o.Scored || o.Status != episode.StatusOK && o.Status != episode.StatusFormatError && o.Status != episode.StatusOverlong {
					t.Errorf("%+v %s: outcome %d %+v", c, name, j, o)
				}
				passed += o.Pass
			}
			if p := float64(passed) / float64(len(ev.Outcomes)); p != ev.Pass1Compact {
				t.Errorf("%+v %s: pass@1 %v, outcomes say %v", c, name, ev.Pass1Compact, p)
			}
		}
		if res.After.FirstSeed != c.first || len(res.After.Outcomes) != cfg.Run.EvalEpisodes {
			t.Errorf("%+v: result's final evaluation %+v", c, res.After)
		}
	}
}

// A development evaluation may not reach the sealed test range, and the
// range settings are checked.
func TestEvalRangeValidation(t *testing.T) {
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Run.EvalRange = "sealed" }, "run.eval_range"},
		{func(c *Config) { c.Run.EvalSeedOffset = 3_999_990 }, "reach the sealed test range"},
		{func(c *Config) { c.Run.SealedSeedStart = 1_000_000 }, "must be above suite.test_seed_start"},
		{func(c *Config) { c.Run.EvalSeedOffset = -1 }, "run.eval_seed_offset"},
		{func(c *Config) { c.Run.SealedSeedStart = -5 }, "run.sealed_seed_start"},
		{func(c *Config) { c.Run.SealedSeedStart = 1 << 60 }, "run.sealed_seed_start"},
	} {
		cfg := testConfig(t)
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
	// The sealed range itself may be evaluated from any offset.
	cfg := testConfig(t)
	cfg.Run.EvalRange, cfg.Run.EvalSeedOffset = RangeTest, 3_999_990
	if err := cfg.Validate(); err != nil {
		t.Errorf("test range at an offset: %v", err)
	}
	if got := fmt.Sprint(cfg.EvalSeedStart()); got != "8999990" {
		t.Errorf("EvalSeedStart = %s, want 8999990", got)
	}
}

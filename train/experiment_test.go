package train

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func TestWilsonHandValues(t *testing.T) {
	// p̂ = 0.5, n = 10, z = 1.96: centre 0.5, half-width
	// 1.96·sqrt(0.025 + 0.0096)/1.384 = 0.2634.
	lo, hi := Wilson(5, 10)
	if math.Abs(lo-0.2366) > 1e-4 || math.Abs(hi-0.7634) > 1e-4 {
		t.Errorf("Wilson(5, 10) = [%.4f, %.4f], want [0.2366, 0.7634]", lo, hi)
	}
	if lo, hi := Wilson(0, 20); lo != 0 || math.Abs(hi-0.1611) > 1e-4 {
		t.Errorf("Wilson(0, 20) = [%.4f, %.4f], want [0, 0.1611]", lo, hi)
	}
}

func TestExperimentOrchestration(t *testing.T) {
	base := DefaultConfig()
	base.Run.Episodes = 10
	base.SFT.CopySteps, base.SFT.RecallSteps = 5, 5
	arms, err := SelectArms([]string{"compactionrl", "grpo", "no-summary-training"})
	if err != nil {
		t.Fatal(err)
	}
	var ran []Config
	x := &Experiment{Base: base, Arms: arms, Seeds: []int64{1, 2}, Dir: "/x",
		RunOne: func(ctx context.Context, c Config) (Result, error) {
			ran = append(ran, c)
			return Result{After: EvalResult{Episodes: 10, Pass1Compact: float64(c.Seed) / 10, Pass1Single: 0.1}}, nil
		}}
	res, err := x.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ran) != 8 {
		t.Fatalf("%d runs, want 2 seeds × (base + 3 arms)", len(ran))
	}
	for i, c := range ran {
		arm := strings.Split(c.Run.Dir, string(filepath.Separator))[2]
		if i%4 == 0 {
			if arm != "base" || c.Run.Iterations != 0 || c.SFT.Steps == 0 || c.Model.Init != "" {
				t.Errorf("run %d should be the warm-start base: %s %+v", i, arm, c.Run)
			}
			continue
		}
		if c.SFT.Steps+c.SFT.CopySteps+c.SFT.RecallSteps != 0 || c.Model.Init != filepath.Join("/x/base", filepathSeed(c.Seed), "checkpoints/iter-000000/policy") {
			t.Errorf("arm %s must start from base's policy with no warm-start phase: init %q, sft %+v", arm, c.Model.Init, c.SFT)
		}
		switch arm {
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
	if len(res) != 3 || len(res[0].Evals) != 2 {
		t.Fatalf("results %+v", res)
	}
	md := Markdown(Table(res))
	// Pooled: seeds 1 and 2 pass 1/10 and 2/10 → 3/20.
	if !strings.Contains(md, "0.150 [") || !strings.Contains(md, "(3/20)") || !strings.Contains(md, "| CompactionRL |") {
		t.Errorf("table:\n%s", md)
	}
	if _, err := SelectArms([]string{"nope"}); err == nil || !strings.Contains(err.Error(), "compactionrl") {
		t.Errorf("unknown arm error = %v", err)
	}
}

func filepathSeed(s int64) string { return "seed-" + string(rune('0'+s)) }

package experiment

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/compactrl/compactrl/recipe"
	"github.com/compactrl/compactrl/train"
)

// finished writes a finished run of cfg: its config.yaml and final outcomes.
func finished(t *testing.T, cfg recipe.Config) {
	t.Helper()
	y, err := cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.Run.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.Run.Dir, "config.yaml"), y, 0o644); err != nil {
		t.Fatal(err)
	}
	tc := cfg.Train()
	ev := train.EvalResult{Episodes: cfg.Run.EvalEpisodes, Range: tc.EvalRangeName(), FirstSeed: tc.EvalSeedStart()}
	for j := range ev.Episodes {
		ev.Outcomes = append(ev.Outcomes, train.Outcome{TaskSeed: ev.FirstSeed + int64(j), Status: "pass", Scored: true, Pass: 1, Reward: 1})
	}
	if err := train.WriteOutcomes(train.FinalOutcomes(cfg.Run.Dir), ev); err != nil {
		t.Fatal(err)
	}
}

func TestFinishedRunReuse(t *testing.T) {
	base := recipe.DefaultConfig()
	base.Run.Dir = t.TempDir()
	base.Run.EvalEpisodes = 3
	base.Run.Iterations = 0
	finished(t, base)

	rlOnly := base
	rlOnly.RL.LR, rlOnly.RL.WarmupSteps, rlOnly.Run.Episodes = base.RL.LR/3, base.RL.WarmupSteps+4, base.Run.Episodes*2
	agentChanged := base
	agentChanged.Agent.KeepLast++
	trained := rlOnly
	trained.Run.Iterations = 2
	more := base
	more.Run.EvalEpisodes = 4
	for _, c := range []struct {
		name string
		cfg  recipe.Config
		want bool
	}{
		{"same config", base, true},
		{"an evaluation-only run whose RL settings changed", rlOnly, true},
		{"an agent setting changed", agentChanged, false},
		{"a run with RL iterations", trained, false},
		{"more evaluation episodes", more, false},
	} {
		if _, ok := FinishedRun(c.cfg); ok != c.want {
			t.Errorf("%s: reused %v, want %v", c.name, ok, c.want)
		}
	}

	// A finished RL run is reused only with the same RL settings.
	rl := base
	rl.Run.Dir, rl.Run.Iterations = t.TempDir(), 2
	finished(t, rl)
	changed := rl
	changed.RL.LR /= 3
	if _, ok := FinishedRun(rl); !ok {
		t.Error("an RL run with the same settings was not reused")
	}
	if _, ok := FinishedRun(changed); ok {
		t.Error("an RL run was reused after its learning rate changed")
	}
}

package models

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/compactrl/compactrl/recipe"
)

// The shipped base evaluates on its own (its directory records the suite
// and agent it was trained for), and a short evaluation agrees with its
// model card within sampling error.
func TestVaultBaseAgreesWithItsModelCard(t *testing.T) {
	dir := filepath.Join(t.TempDir(), VaultBaseName)
	if err := WriteVaultBase(dir); err != nil {
		t.Fatal(err)
	}
	info, err := recipe.ReadBaseInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 128
	if testing.Short() {
		n = 64
	}
	// Held-out seeds past the card's own, so the check is on fresh episodes.
	ev, cfg, err := recipe.EvaluateCheckpoint(t.Context(), dir, recipe.EvalOptions{Episodes: n, SeedOffset: int64(info.Eval.Episodes)})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Model.Init != dir || ev.Episodes != n {
		t.Fatalf("evaluated %d episodes of %q", ev.Episodes, cfg.Model.Init)
	}
	for _, x := range []struct {
		name       string
		card, here float64
	}{{"pass@1 with compaction", info.Eval.Pass1Compact, ev.Pass1Compact}, {"pass@1 single window", info.Eval.Pass1Single, ev.Pass1Single}} {
		t.Run(x.name, func(t *testing.T) {
			// Two binomial proportions: |p̂₁ − p̂₂| within 3.5 standard errors
			// of their difference (a false alarm about once in 2000 runs).
			p := (x.card*float64(info.Eval.Episodes) + x.here*float64(n)) / float64(info.Eval.Episodes+n)
			se := math.Sqrt(max(p*(1-p), 1e-4) * (1/float64(info.Eval.Episodes) + 1/float64(n)))
			if d := math.Abs(x.card - x.here); d > 3.5*se {
				t.Errorf("%s: %.3f on %d fresh episodes, model card %.3f on %d: difference %.3f > 3.5 s.e. (%.3f)", x.name, x.here, n, x.card, info.Eval.Episodes, d, 3.5*se)
			}
		})
	}
	if info.Eval.Pass1Compact < 0.05 {
		t.Errorf("the shipped base passes %.3f of held-out episodes: not a pretrained base", info.Eval.Pass1Compact)
	}
}

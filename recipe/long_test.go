package recipe

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/compactrl/compactrl/agent"
)

// The shipped long-horizon configuration is long: on held-out seeds the
// scripted expert (summaries keep every fact) needs at least six
// compactions in the median episode and still passes nearly always, its
// first asked fact is found before the first compaction and carried across
// at least five compaction boundaries in every episode it passes, and the
// lossy expert (p = 0.5) passes far less: the headroom that summaries must
// close. docs/results.md (section 9) has the distribution on 1000 seeds.
func TestLongSuiteNeedsSixCompactions(t *testing.T) {
	cfg, err := LoadConfig("../configs/vault-long.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pre, err := LoadConfig("../configs/pretrain-long.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if pre.Suite != cfg.Suite || pre.Agent != cfg.Agent {
		t.Fatal("configs/pretrain-long.yaml and configs/vault-long.yaml train and run on different suites or agents")
	}
	tok, lay, err := loadTokenizer(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSuite(cfg, tok, lay)
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	seeds, samples := make([]int64, n), make([]int64, n)
	for i := range seeds {
		seeds[i], samples[i] = cfg.Suite.TestSeedStart+int64(i), int64(i+1)
	}
	pass := func(p float64) (rate float64, comps []int, crossed []int) {
		eps, err := s.Demonstrations(context.Background(), seeds, samples, p)
		if err != nil {
			t.Fatal(err)
		}
		ok := 0
		for _, ep := range eps {
			c := int(ep.Metrics[agent.MetricCompactions])
			comps = append(comps, c)
			if ep.Reward < 1 {
				continue
			}
			ok++
			// Boundaries the first asked fact crosses: from the first
			// summary whose audit counts it as seen to the answer.
			for i := 1; i <= c; i++ {
				if ep.Meta[summaryKey(i, "kept")] != "" || ep.Meta[summaryKey(i, "lost")] != "" {
					crossed = append(crossed, c-i+1)
					break
				}
			}
		}
		return float64(ok) / n, comps, crossed
	}
	rate, comps, crossed := pass(1)
	slices.Sort(comps)
	if med := float64(comps[n/2-1]+comps[n/2]) / 2; med < 6 {
		t.Errorf("median compactions %v of the p = 1 expert, want ≥ 6 (%v)", med, comps)
	}
	if rate < 0.9 {
		t.Errorf("the p = 1 expert passes %.3f, want ≥ 0.9", rate)
	}
	if len(crossed) == 0 || slices.Min(crossed) < 5 {
		t.Errorf("boundaries the first fact crosses in passed episodes: %v, want all ≥ 5", crossed)
	}
	if lossy, _, _ := pass(0.5); lossy > rate-0.5 {
		t.Errorf("the p = 0.5 expert passes %.3f, the p = 1 one %.3f: too little headroom", lossy, rate)
	}
}

func summaryKey(i int, what string) string { return fmt.Sprintf("summary_%d_%s", i, what) }

package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

// oracleEnv is fakeEnv with a reference summary: "ref N" (N counts the
// calls), padded to pad bytes; with drop it names "k N" dropped.
type oracleEnv struct {
	*fakeEnv
	n, pad int
}

func (e *oracleEnv) ReferenceSummary(drop bool, seed int64) (string, string) {
	e.n++
	s := fmt.Sprintf("ref %d", e.n)
	s += strings.Repeat(".", max(0, e.pad-len(s)))
	if drop {
		return s, fmt.Sprintf("k %d", e.n)
	}
	return s, ""
}

// actions returns the completions of the calls that asked for an action.
func actions(calls []call) [][]int {
	var out [][]int
	for _, c := range calls {
		if c.req.Prompt[len(c.req.Prompt)-1] == testTmpl.Assistant {
			out = append(out, c.out.Tokens)
		}
	}
	return out
}

func TestSummaryOverrideInTheLoop(t *testing.T) {
	cfg := testConfig()
	newEnv := func(pad int) *oracleEnv {
		return &oracleEnv{fakeEnv: &fakeEnv{rng: rand.New(rand.NewPCG(5, 5)), obsMax: 150, doneAfter: 40}, pad: pad}
	}
	own := &randSampler{}
	a, err := New(context.Background(), cfg, Local(byteTok{}), testTmpl, own)
	if err != nil {
		t.Fatal(err)
	}
	control, err := a.Run(context.Background(), newEnv(0), 3)
	if err != nil {
		t.Fatal(err)
	}
	s := &randSampler{}
	b, _ := New(context.Background(), cfg, Local(byteTok{}), testTmpl, s)
	ex, err := b.WithSummaryOverride(OverrideDropOne)
	if err != nil || b.SummaryOverride() != OverrideNone || ex.SummaryOverride() != OverrideDropOne {
		t.Fatalf("WithSummaryOverride: %v, %q, %q", err, b.SummaryOverride(), ex.SummaryOverride())
	}
	env := newEnv(0)
	ep, err := ex.Run(context.Background(), env, 3)
	if err != nil || ep.Status != control.Status || !ep.Status.Scored() {
		t.Fatalf("%v %s (control %s) %s", err, ep.Status, control.Status, ep.Meta[MetaError])
	}
	n := int(ep.Metrics[MetricCompactions])
	if n < 2 || env.n != n || ep.Metrics[MetricSummaryOverrides] != float64(n) || ep.Meta[MetaSummaryOverride] != "drop-one" {
		t.Fatalf("%d compactions, %d reference summaries, metrics %v meta %v", n, env.n, ep.Metrics, ep.Meta)
	}
	// The policy was never asked for a summary, and its actions are those
	// of the same episode without the override up to the first one after
	// the first compaction: the call seeds line up (later the summaries'
	// lengths move the next compaction).
	for _, c := range s.calls {
		if c.req.Prompt[len(c.req.Prompt)-1] == testTmpl.Summary {
			t.Fatal("the policy was asked for a summary")
		}
	}
	before := 0
	for _, c := range own.calls {
		if c.req.Prompt[len(c.req.Prompt)-1] == testTmpl.Summary {
			break
		}
		before++
	}
	if got, want := actions(s.calls)[:before+1], actions(own.calls)[:before+1]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("actions differ from the control's:\n%v\n%v", got, want)
	}
	k := 0
	for si, seg := range ep.Segments {
		if seg.Trainable {
			t.Fatalf("segment %d trainable", si)
		}
		if seg.Kind != episode.KindSummary {
			continue
		}
		k++
		turns := testTmpl.Split(seg.ResponseIDs)
		last := turns[len(turns)-1]
		want := fmt.Sprintf("ref %d", k)
		if last.Marker != testTmpl.Summary || byteTok.Decode(byteTok{}, last.IDs) != want || seg.ResponseIDs[len(seg.ResponseIDs)-1] != testTmpl.EndOfTurn {
			t.Fatalf("summary segment %d ends %q", si, byteTok.Decode(byteTok{}, last.IDs))
		}
		for j := last.Start - 1; j < len(seg.LossMask); j++ {
			if seg.LossMask[j] != 0 || seg.Logprobs[j] != 0 {
				t.Fatalf("summary token %d: mask %d log-prob %v", j, seg.LossMask[j], seg.Logprobs[j])
			}
		}
		if env.summaries[k-1] != want || ep.Meta[fmt.Sprintf("summary_%d_dropped", k)] != fmt.Sprintf("k %d", k) || ep.Meta[fmt.Sprintf("summary_%d_override", k)] != "drop-one" {
			t.Fatalf("summary %d: graded %q, meta %v", k, env.summaries[k-1], ep.Meta)
		}
	}
	if control.Segments[0].Trainable != true || control.Meta[MetaSummaryOverride] != "" {
		t.Fatal("the control episode is marked")
	}
	// A replacement longer than max_summary_tokens is cut as a sampler's
	// summary would be, and counted.
	ep, _ = ex.Run(context.Background(), newEnv(500), 3)
	if !ep.Status.Scored() || ep.Metrics[MetricSummaryOverrideCut] != ep.Metrics[MetricCompactions] {
		t.Fatalf("long replacement: %s %s %v", ep.Status, ep.Meta[MetaError], ep.Metrics)
	}
	if err := ep.Validate(); err != nil {
		t.Fatal(err)
	}
	// Empty needs no oracle; expert does.
	em, _ := b.WithSummaryOverride(OverrideEmpty)
	plain := &fakeEnv{rng: rand.New(rand.NewPCG(5, 5)), obsMax: 150, doneAfter: 40}
	ep, _ = em.Run(context.Background(), plain, 3)
	if !ep.Status.Scored() || len(plain.summaries) == 0 || plain.summaries[0] != "" {
		t.Fatalf("empty: %s %s %q", ep.Status, ep.Meta[MetaError], plain.summaries)
	}
	xp, _ := b.WithSummaryOverride(OverrideExpert)
	ep, _ = xp.Run(context.Background(), &fakeEnv{rng: rand.New(rand.NewPCG(5, 5)), obsMax: 150, doneAfter: 40}, 3)
	if ep.Status != episode.StatusInfraError || !strings.Contains(ep.Meta[MetaError], "SummaryOracle") {
		t.Fatalf("expert without an oracle: %s %q", ep.Status, ep.Meta[MetaError])
	}
	if _, err := b.WithSummaryOverride("oracle"); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown override: %v", err)
	}
	cfg.NoCompaction = true
	nc, _ := New(context.Background(), cfg, Local(byteTok{}), testTmpl, s)
	if _, err := nc.WithSummaryOverride(OverrideEmpty); !errors.Is(err, ErrConfig) {
		t.Fatalf("override without compaction: %v", err)
	}
	for _, in := range []string{"", "none", "expert", "drop-one", "empty"} {
		if _, err := ParseSummaryOverride(in); err != nil {
			t.Fatal(err)
		}
	}
}

package train

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// recordingSource is an ExampleSource that records what it is asked for
// and answers with one-token sequences taken from the corpus it is given.
type recordingSource struct {
	draws     []ExampleDraw
	corpusLen int
}

func (s *recordingSource) Examples(corpus [][]int, d ExampleDraw, r *rand.Rand) []Example {
	s.draws = append(s.draws, d)
	s.corpusLen = len(corpus)
	exs := make([]Example, d.N)
	for i := range exs {
		seq := corpus[r.IntN(len(corpus))]
		exs[i] = Example{Sequence: Sequence{Prompt: seq[:1], Response: seq[1:2]}, Targets: []int{0}}
	}
	return exs
}

func readSFT(t *testing.T, dir string) []SFTRecord {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "sft.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := ReadSFTCurve(f)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// The warm start runs copy pretraining, then the ExtraExamples' phase of
// their own (Steps draws of Batch, told their step), then imitation with
// Mix of them joined to every batch; sft.jsonl names each phase, and only
// the mixed imitation steps carry the mixed sequences' loss.
func TestWarmStartExtraExamplesSchedule(t *testing.T) {
	cfg := testConfig(t)
	cfg.Run.Iterations, cfg.Run.EvalEpisodes = 0, 0
	cfg.SFT.Episodes, cfg.SFT.Steps, cfg.SFT.BatchSize = 4, 3, 2
	cfg.SFT.CopySteps, cfg.SFT.CopyLen, cfg.SFT.CopyBatch = 2, 16, 3
	src := &recordingSource{}
	tr := newTestTrainer(cfg, newMemoryTask())
	tr.Extra = &ExtraExamples{Source: src, Phase: "extra", Title: "extra pretraining", Steps: 4, Batch: 5, Mix: 2}
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []ExampleDraw{{N: 5, Step: 0, Steps: 4}, {N: 5, Step: 1, Steps: 4}, {N: 5, Step: 2, Steps: 4}, {N: 5, Step: 3, Steps: 4},
		{N: 2, Mixed: true}, {N: 2, Mixed: true}, {N: 2, Mixed: true}}
	if !slices.Equal(src.draws, want) {
		t.Fatalf("draws %+v, want %+v", src.draws, want)
	}
	if src.corpusLen == 0 {
		t.Fatal("the source got no corpus")
	}
	var phases []string
	for _, r := range readSFT(t, cfg.Run.Dir) {
		phases = append(phases, r.Phase)
		if (r.MixedLoss != nil) != (r.Phase == "sft") {
			t.Errorf("%s step %d: mixed loss %v", r.Phase, r.Step, r.MixedLoss)
		}
		if r.Phase == "extra" && r.Tokens != 5 {
			t.Errorf("extra step %d optimised %d tokens, want its 5 sequences' targets", r.Step, r.Tokens)
		}
	}
	if want := []string{"copy", "copy", "extra", "extra", "extra", "extra", "sft", "sft", "sft"}; !slices.Equal(phases, want) {
		t.Fatalf("phases %v, want %v", phases, want)
	}
}

// The same seed gives the same warm start, draws included; without an
// ExtraExamples the warm start is copy and imitation only.
func TestWarmStartExtraExamplesDeterministic(t *testing.T) {
	run := func(extra bool) ([]ExampleDraw, []SFTRecord) {
		cfg := testConfig(t)
		cfg.Run.Iterations, cfg.Run.EvalEpisodes = 0, 0
		cfg.SFT.Episodes, cfg.SFT.Steps, cfg.SFT.BatchSize = 4, 2, 2
		src := &recordingSource{}
		tr := newTestTrainer(cfg, newMemoryTask())
		if extra {
			tr.Extra = &ExtraExamples{Source: src, Phase: "extra", Steps: 2, Batch: 3, Mix: 1}
		}
		if _, err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		recs := readSFT(t, cfg.Run.Dir)
		for i := range recs {
			recs[i].GradNorm = 0 // compared below as a whole, loss included
		}
		return src.draws, recs
	}
	d1, r1 := run(true)
	d2, r2 := run(true)
	if !slices.Equal(d1, d2) || len(r1) != len(r2) {
		t.Fatalf("two runs differ: %v / %v", d1, d2)
	}
	for i := range r1 {
		if r1[i].Loss != r2[i].Loss || r1[i].Phase != r2[i].Phase {
			t.Fatalf("step %d: %+v vs %+v", i, r1[i], r2[i])
		}
	}
	d3, r3 := run(false)
	if d3 != nil || len(r3) != 2 || r3[0].Phase != "sft" || r3[0].MixedLoss != nil {
		t.Fatalf("without extra examples: draws %v, records %+v", d3, r3)
	}
}

// reinitBigram is the test policy with Reinit: fresh weights from the seed, fresh moments.
type reinitBigram struct {
	*bigram
	seeds []int64
}

func (p *reinitBigram) Reinit(seed int64) error {
	p.seeds = append(p.seeds, seed)
	fresh := newBigram(p.V, p.value, seed)
	copy(p.W, fresh.W)
	clear(p.M)
	clear(p.S)
	p.Steps = 0
	return nil
}

// An extra phase that ends above its target starts copy and itself over
// from fresh weights, up to Restarts times, each attempt on draws of its
// own; imitation follows the last attempt once. A reachable target stops
// at the first attempt, which draws exactly what a run without restarts
// draws; a policy that cannot be reinitialised is an error.
func TestWarmStartRestarts(t *testing.T) {
	run := func(target float64, restarts int, reinit bool) ([]SFTRecord, *reinitBigram, error) {
		cfg := testConfig(t)
		cfg.Run.Iterations, cfg.Run.EvalEpisodes = 0, 0
		cfg.SFT.Episodes, cfg.SFT.Steps, cfg.SFT.BatchSize = 4, 2, 2
		cfg.SFT.CopySteps, cfg.SFT.CopyLen, cfg.SFT.CopyBatch = 2, 16, 3
		tr := newTestTrainer(cfg, newMemoryTask())
		p := &reinitBigram{bigram: tr.Policy.(*bigram)}
		if reinit {
			tr.Policy = p
		}
		tr.Extra = &ExtraExamples{Source: &recordingSource{}, Phase: "extra", Steps: 3, Batch: 2, Target: target, Restarts: restarts}
		_, err := tr.Run(context.Background())
		if err != nil {
			return nil, p, err
		}
		return readSFT(t, cfg.Run.Dir), p, nil
	}
	recs, p, err := run(-1, 2, true) // a loss is never below −1: every restart runs
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%s%d", r.Phase, r.Attempt))
	}
	want := []string{"copy0", "copy0", "extra0", "extra0", "extra0", "copy1", "copy1", "extra1", "extra1", "extra1",
		"copy2", "copy2", "extra2", "extra2", "extra2", "sft0", "sft0"}
	if !slices.Equal(got, want) {
		t.Fatalf("phases %v, want %v", got, want)
	}
	if len(p.seeds) != 2 || p.seeds[0] == p.seeds[1] {
		t.Fatalf("reinitialised with seeds %v, want two distinct", p.seeds)
	}
	if recs[0].Loss == recs[5].Loss && recs[2].Loss == recs[7].Loss {
		t.Errorf("attempt 1 repeated attempt 0's losses: its weights or draws are not its own")
	}
	base, _, err := run(0, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	once, p, err := run(1e9, 3, true) // reached at once
	if err != nil || len(p.seeds) != 0 || len(once) != len(base) {
		t.Fatalf("reachable target: %v, reinit seeds %v, %d records against %d", err, p.seeds, len(once), len(base))
	}
	for i := range base {
		if once[i].Loss != base[i].Loss || once[i].Phase != base[i].Phase {
			t.Fatalf("step %d with restarts allowed %+v, without %+v", i, once[i], base[i])
		}
	}
	if _, _, err := run(-1, 1, false); err == nil || !strings.Contains(err.Error(), "reinitialised") {
		t.Fatalf("a policy without Reinit: %v", err)
	}
}

package train

import (
	"bufio"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/compactrl/compactrl/episode"
)

// Induction pretraining sequences are w ⊕ gap ⊕ w within the length, the
// targets exactly the second copy of w after its first token, and the gap
// grows with reach.
func TestCopyBatch(t *testing.T) {
	var demos []episode.Episode
	for e := range 3 {
		var ep episode.Episode
		for s := range 2 {
			seg := episode.Segment{}
			for i := range 150 + 40*s {
				seg.PromptIDs = append(seg.PromptIDs, 1000*e+100*s+i%97)
			}
			seg.ResponseIDs = []int{7, 8, 9}
			ep.Segments = append(ep.Segments, seg)
		}
		demos = append(demos, ep)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const length = 300
	maxGap := map[float64]int{}
	for _, reach := range []float64{0, 1} {
		for range 20 {
			for _, it := range copyBatch(copyCorpus(demos), 8, length, reach, r) {
				w := append([]int{it.seq.Prompt[len(it.seq.Prompt)-1]}, it.seq.Response...)
				p := it.seq.Prompt[:len(it.seq.Prompt)-1]
				if len(w) < 64 || len(w) > length/2 || !slices.Equal(p[:len(w)], w) {
					t.Fatalf("window of %d tokens does not open the prompt", len(w))
				}
				if n := len(p) + len(w); n > length {
					t.Fatalf("sequence of %d tokens > %d", n, length)
				}
				maxGap[reach] = max(maxGap[reach], len(p)-len(w))
				if len(it.toks) != len(it.seq.Response) {
					t.Fatalf("%d targets for %d response tokens", len(it.toks), len(it.seq.Response))
				}
				for i, tk := range it.toks {
					if tk.Pos != i {
						t.Fatalf("target %d at position %d", i, tk.Pos)
					}
				}
			}
		}
	}
	if maxGap[0] != 0 || maxGap[1] < 50 {
		t.Fatalf("gaps %v: want none at reach 0 and long ones at reach 1", maxGap)
	}
	if copyBatch(copyCorpus(nil), 4, length, 1, r) != nil {
		t.Fatal("a batch from no demonstrations")
	}
}

// The warm start runs its copy phase first, then recall, then SFT, each
// logged.
func TestWarmStartPhases(t *testing.T) {
	cfg := nanoConfig(t)
	cfg.SFT.CopySteps, cfg.SFT.CopyLen = 2, 64
	cfg.SFT.RecallSteps, cfg.SFT.RecallExtra = 2, 3
	cfg.SFT.RecallKeys, cfg.SFT.RecallLen, cfg.Suite.Keys = 32, 48, 4
	cfg.SFT.RecallMix = 3
	cfg.Run.Iterations = 0
	s, err := Build(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Recall's record lines draw from all 32 key words, whatever the
	// suite's pool.
	if n := len(s.Trainer.Facts.Keys); n != 32 {
		t.Fatalf("%d recall keys with a suite pool of %d, want 32", n, cfg.Suite.Keys)
	}
	if _, err := s.Trainer.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(cfg.Run.Dir, "sft.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var phases []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r SFTRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Tokens == 0 || r.Loss <= 0 {
			t.Errorf("%s step %d: %d tokens, loss %g", r.Phase, r.Step, r.Tokens, r.Loss)
		}
		// SFT batches carry recall_mix recall sequences, with their own loss.
		if (r.Phase == "sft") != (r.RecallLoss != nil) || (r.RecallLoss != nil && *r.RecallLoss <= 0) {
			t.Errorf("%s step %d: recall loss %v", r.Phase, r.Step, r.RecallLoss)
		}
		phases = append(phases, r.Phase)
	}
	if want := []string{"copy", "copy", "recall", "recall", "sft", "sft", "sft"}; !slices.Equal(phases, want) {
		t.Fatalf("phases %v, want %v", phases, want)
	}
	// RL starts with a fresh optimiser, not the warm start's moments.
	if n := s.Policy.opt.Steps(); n != 0 {
		t.Fatalf("policy optimiser at step %d after the warm start, want a fresh one", n)
	}
}

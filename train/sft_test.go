package train

import (
	"math/rand/v2"
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

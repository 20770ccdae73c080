package serve

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/rl"
)

// maskingFixture is where the plug-ins' tests read the masking rule as Go
// defines it (integrations/slime/tests/test_masking.py and the verl
// tests): for every episode status, the service's "scored" and rl.Masked
// with and without masking overlong episodes.
const maskingFixture = "../integrations/slime/tests/masking.json"

type maskingCase struct {
	Scored         bool `json:"scored"`
	MaskedOverlong bool `json:"masked_mask_overlong"`
	MaskedKeep     bool `json:"masked_keep_overlong"`
}

// TestMaskingFixture: serve's answer carries Status.Scored, and the
// one masking rule (rl.Masked, used by the trainer and `compactrl
// advantages`) is !scored || (overlong && mask_overlong) on every status;
// the fixture the Python plug-ins test against is what Go computes
// (COMPACTRL_UPDATE_FIXTURES=1 rewrites it).
func TestMaskingFixture(t *testing.T) {
	cases := map[episode.Status]maskingCase{}
	for _, st := range episode.Statuses {
		ep := &episode.Episode{Status: st, Segments: []episode.Segment{{Kind: episode.KindExec, Trainable: true, ResponseIDs: []int{1}, LossMask: []int{1}}}}
		r := NewResponse(1, "t", ep)
		c := maskingCase{Scored: r.Scored, MaskedOverlong: rl.Masked(ep, true), MaskedKeep: rl.Masked(ep, false)}
		if want := !r.Scored || (st == episode.StatusOverlong); c.MaskedOverlong != want {
			t.Errorf("%s: rl.Masked(mask overlong) = %v, want %v", st, c.MaskedOverlong, want)
		}
		if c.MaskedKeep != !r.Scored {
			t.Errorf("%s: rl.Masked(keep overlong) = %v, want %v", st, c.MaskedKeep, !r.Scored)
		}
		cases[st] = c
	}
	if cases[episode.StatusVerifierError] != (maskingCase{false, true, true}) || cases[episode.StatusOK] != (maskingCase{true, false, false}) {
		t.Fatalf("cases %+v", cases)
	}
	want, err := json.MarshalIndent(cases, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if os.Getenv("COMPACTRL_UPDATE_FIXTURES") == "1" {
		if err := os.WriteFile(maskingFixture, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(maskingFixture)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale (run with COMPACTRL_UPDATE_FIXTURES=1):\n%s\nwant\n%s", maskingFixture, got, want)
	}
}

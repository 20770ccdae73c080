package train

import (
	"slices"
	"testing"
)

func TestCheckpointTokenizers(t *testing.T) {
	got := CheckpointTokenizers("runs/x/checkpoints/iter-000030/policy/")
	want := []string{"runs/x/checkpoints/iter-000030/policy/tokenizer.json", "runs/x/checkpoints/iter-000030/tokenizer.json", "runs/x/tokenizer.json"}
	if !slices.Equal(got, want) {
		t.Errorf("training checkpoint: %q, want %q", got, want)
	}
	got = CheckpointTokenizers("models/vault-base")
	want = []string{"models/vault-base/tokenizer.json", "models/tokenizer.json"}
	if !slices.Equal(got, want) {
		t.Errorf("base directory: %q, want %q", got, want)
	}
}

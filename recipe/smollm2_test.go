package recipe

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/model"
)

// TestSmolLM2TrainSmoke runs configs/smollm2.yaml from SmolLM2-135M-
// Instruct's GGUF for a few steps: the vault suite laid out by the model's
// own ChatML template, a warm start on two steps of the expert's
// demonstrations (finite loss that falls, the weights changed), and one
// CompactionRL iteration on two episodes (tokens optimised, every metric
// finite), ending in a checkpoint the built-in model loads.
func TestSmolLM2TrainSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("a 135M-parameter model: the full run (not -short) checks it")
	}
	gguf := testenv.MustHaveSmolLM2(t)
	cfg, err := LoadConfig("../configs/smollm2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg.Model.Init, cfg.Model.Tokenizer, cfg.Run.Dir = gguf, gguf, dir
	cfg.SFT.Steps, cfg.SFT.Episodes = 2, 4
	cfg.Run.Iterations, cfg.Run.Episodes, cfg.Run.Workers = 1, 2, 2
	cfg.Run.EvalEvery, cfg.Run.EvalEpisodes = 0, 2
	s, err := Build(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Lay.Chat == nil || s.Lay.Chat.Preset().Name != "chatml" {
		t.Fatalf("layout %+v: want the model's ChatML", s.Lay)
	}
	base, err := model.Load(gguf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Trainer.Run(context.Background()); err != nil {
		t.Fatal(err)
	}

	var losses []float64
	f, err := os.Open(filepath.Join(dir, "sft.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var r struct {
			Loss float64 `json:"loss"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		losses = append(losses, r.Loss)
	}
	if len(losses) != 2 || !(losses[1] < losses[0]) || math.IsNaN(losses[0]) {
		t.Fatalf("warm-start losses %v: want two, finite and falling", losses)
	}
	recs := runMetrics(t, dir, false)
	if len(recs) == 0 || recs[0]["tokens_optimised"] <= 0 {
		t.Fatalf("metrics %v: want an iteration that optimised tokens", recs)
	}
	for k, v := range recs[0] {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("metric %s = %v", k, v)
		}
	}
	ckpts, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "*", "policy"))
	if len(ckpts) == 0 {
		t.Fatal("no checkpoint written")
	}
	after, err := model.Load(ckpts[len(ckpts)-1])
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(after.Params()[1].Data, base.Params()[1].Data) {
		t.Errorf("%s did not change", after.Params()[1].Name)
	}
	t.Logf("warm-start loss %.3f → %.3f; iteration 0: %v", losses[0], losses[1], recs[0])
}

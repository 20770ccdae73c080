package recipe

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/train"
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
	testenv.SoftMemoryLimit(t, 6<<30)
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
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	if s.Lay.Chat == nil || s.Lay.Chat.Preset().Name != "chatml" {
		t.Fatalf("layout %+v: want the model's ChatML", s.Lay)
	}
	base, err := model.Load(gguf)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Trainer.Run(context.Background())
	if err != nil {
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

	// The warm-started policy as a base directory (one F32 model.gguf with
	// the GGUF's tokenizer and chat template), and one policy update from
	// it (no critic warm-up): nonzero advantages and gradient, and the
	// weights moved away from the base's.
	baseDir := filepath.Join(dir, "base")
	if err := WriteBase(context.Background(), baseDir, s, res, BaseInfo{Command: "test"}); err != nil {
		t.Fatal(err)
	}
	rl, err := FromBase(baseDir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rl.Model.Init != filepath.Join(baseDir, BaseGGUFFile) || rl.Model.Tokenizer != rl.Model.Init {
		t.Fatalf("base model %+v: want its model.gguf", rl.Model)
	}
	warm, err := model.Load(rl.Model.Init)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(warm.Params()[1].Data, s.Policy.M.Params()[1].Data) {
		t.Fatal("the base's model.gguf does not hold the warm-started weights")
	}
	// The first run's policy, critic and optimiser state (several GB) are
	// released before the second run is built.
	s.Close()
	closed, s, res = true, nil, train.Result{}
	runtime.GC()
	rl.Run.Dir = filepath.Join(dir, "rl")
	rl.RL.CriticWarmup = 0
	s2, err := Build(rl, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Lay.Chat == nil || s2.Lay.Chat.Preset().Name != "chatml" {
		t.Fatalf("layout from the base %+v: want the model's ChatML", s2.Lay)
	}
	// Two of the policy's own episodes, the first given reward 1 (a two-step
	// warm start seldom earns one): its tokens get advantages, and the
	// update moves the weights.
	eps, err := s2.Suite.Collect(context.Background(), train.Rollouts{Sampler: s2.Policy.Sampler(), Seeds: []int64{11, 12}, SampleSeeds: []int64{1, 2}, Temperature: 1})
	if err != nil {
		t.Fatal(err)
	}
	eps[0].Status, eps[0].Reward = episode.StatusOK, 1
	m, err := s2.Trainer.Update(context.Background(), 0, eps)
	if err != nil {
		t.Fatal(err)
	}
	if !(m.Advantage > 0) || !(m.GradNorm > 0) || m.TokensOptimised == 0 || math.IsNaN(m.PolicyLoss) {
		t.Fatalf("policy update from the base: %+v", m)
	}
	if slices.Equal(s2.Policy.M.Params()[1].Data, warm.Params()[1].Data) {
		t.Errorf("%s did not change in the policy update", warm.Params()[1].Name)
	}
	t.Logf("update from the base: advantage mean %.4f, grad norm %.4f, %d tokens", m.Advantage, m.GradNorm, m.TokensOptimised)
}

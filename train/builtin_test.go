package train

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/compactrl/compactrl/model"
)

// nanoConfig is the smallest end-to-end run on the real pieces: the vault
// suite, the agent loop with compaction, the built-in model and sampler.
func nanoConfig(t *testing.T) Config {
	c := DemoConfig()
	c.Run.Dir = t.TempDir()
	c.Model = ModelConfig{Preset: "tiny", Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64}
	c.Suite.Files, c.Suite.Pages, c.Suite.Facts = 2, 1, 1
	c.SFT = SFTConfig{Episodes: 4, Steps: 3, BatchSize: 4, LR: 3e-3, ExpertP: 0.6}
	c.RL.CriticWarmup = 2
	c.Run = RunConfig{Dir: c.Run.Dir, Iterations: 2, Episodes: 4, Workers: 4, EvalEvery: 1, EvalEpisodes: 4, CheckpointEvery: 1}
	return c
}

func TestBuiltinEndToEnd(t *testing.T) {
	cfg := nanoConfig(t)
	s, err := Build(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Trainer.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	recs := readMetrics(t, cfg.Run.Dir)
	if len(recs) != cfg.Run.Iterations+1 {
		t.Fatalf("%d records, want %d", len(recs), cfg.Run.Iterations+1)
	}
	for _, r := range recs[:cfg.Run.Iterations] {
		t.Logf("iteration %v: reward %v, tokens %v, logprob diff %v, compactions %v", r["iteration"], r["reward"], r["tokens_optimised"], r["logprob_max_abs_diff"], r["compactions"])
		if r["tokens_optimised"] == nil || r["tokens_optimised"].(float64) == 0 {
			continue // every rollout masked (overlong): nothing to compare
		}
		// The sampler decodes with a KV cache, the trainer scores packed
		// sequences: the same float32 model, so only rounding differs.
		if d := r["logprob_max_abs_diff"].(float64); d > 1e-3 {
			t.Errorf("iteration %v: sampler and trainer log-probs differ by %g", r["iteration"], d)
		}
	}
	if res.After.Episodes != cfg.Run.EvalEpisodes {
		t.Errorf("eval episodes = %d", res.After.Episodes)
	}
	ckpt, err := LatestCheckpoint(cfg.Run.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"policy/model.safetensors", "policy/config.json", "policy/" + OptimizerFile, "critic/model.safetensors", "critic/" + OptimizerFile, "state.json", "config.yaml"} {
		if _, err := os.Stat(filepath.Join(ckpt, f)); err != nil {
			t.Errorf("checkpoint lacks %s", f)
		}
	}
	// The final policy evaluates the same from its checkpoint (greedy).
	ev, _, err := EvaluateCheckpoint(context.Background(), cfg.Run.Dir, EvalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Pass1Compact != res.After.Pass1Compact || ev.Compactions != res.After.Compactions {
		t.Errorf("checkpoint evaluation %+v differs from the run's final %+v", ev, res.After)
	}
}

func TestBuiltinSaveLoadRoundTrip(t *testing.T) {
	arch := model.Config{Vocab: 50, Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, FFN: 32, MaxSeq: 32, RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}
	m, err := model.New(arch, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBuiltinPolicy(m, BuiltinOptions{GradClip: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	seqs := []Sequence{{Prompt: []int{1, 2, 3}, Response: []int{4, 5}}, {Prompt: []int{7}, Response: []int{8, 9, 10}}}
	step := func(bb *Builtin) {
		out, err := bb.Forward(ctx, seqs, true)
		if err != nil {
			t.Fatal(err)
		}
		d := make([][]float64, len(out))
		for i, o := range out {
			d[i] = make([]float64, len(o.Logprobs))
			for j := range d[i] {
				d[i][j] = -0.2
			}
		}
		if err := bb.Backward(ctx, d); err != nil {
			t.Fatal(err)
		}
		if _, err := bb.Step(ctx, 1e-2); err != nil {
			t.Fatal(err)
		}
	}
	step(b)
	dir := t.TempDir()
	if err := b.Save(dir); err != nil {
		t.Fatal(err)
	}
	m2, _ := model.New(arch, 2, false)
	b2, err := NewBuiltinPolicy(m2, BuiltinOptions{GradClip: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if err := b2.Load(dir); err != nil {
		t.Fatal(err)
	}
	// One more identical step on both: equal weights only if the optimiser
	// state (moments and step count) was restored too.
	step(b)
	step(b2)
	for i, p := range b.M.Params() {
		if !reflect.DeepEqual(p.Data, b2.M.Params()[i].Data) {
			t.Fatalf("parameter %s differs after resume", p.Name)
		}
	}
	// Publish serves the trained weights: the sampler's log-prob of a
	// greedy token matches the trainer's score.
	if err := b.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := b.Forward(ctx, seqs[:1], false)
	if err != nil {
		t.Fatal(err)
	}
	if math.IsNaN(out[0].Logprobs[0]) || out[0].Entropy == nil {
		t.Fatalf("forward output %+v", out[0])
	}
}

package recipe

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/internal/splitmix"
	"github.com/compactrl/compactrl/report"
	"github.com/compactrl/compactrl/train"
	"github.com/compactrl/compactrl/train/builtin"
)

// nanoConfig is the smallest end-to-end run on the real pieces: the vault
// suite, the agent loop with compaction, the built-in model and sampler.
func nanoConfig(t *testing.T) Config {
	c := DemoConfig()
	c.Run.Dir = t.TempDir()
	c.Model = builtin.ModelConfig{Preset: "tiny", Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, Precision: "fp32"}
	c.Suite.Files, c.Suite.Pages, c.Suite.Facts = 2, 1, 1
	c.SFT = SFTConfig{SFTConfig: train.SFTConfig{Episodes: 4, Steps: 3, BatchSize: 4, LR: 3e-3, ExpertP: 0.6}}
	c.RL.CriticWarmup = 2
	c.Run = train.RunConfig{Dir: c.Run.Dir, Iterations: 2, Episodes: 4, Workers: 4, EvalEvery: 1, EvalEpisodes: 4, CheckpointEvery: 1}
	return c
}

// TestBuiltinEndToEnd runs the nano recipe in each model.precision: under
// bf16 too, the sampler's log-probs equal the trainer's exactly.
func TestBuiltinEndToEnd(t *testing.T) {
	for _, p := range builtin.Precisions {
		t.Run(p, func(t *testing.T) { builtinEndToEnd(t, p) })
	}
}

func builtinEndToEnd(t *testing.T, precision string) {
	cfg := nanoConfig(t)
	cfg.Model.Precision = precision
	s, err := Build(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Policy.M.BF16 != (precision == "bf16") {
		t.Fatalf("model.precision %s built a policy with BF16 %v", precision, s.Policy.M.BF16)
	}
	res, err := s.Trainer.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	recs := runMetrics(t, cfg.Run.Dir, false)
	if len(recs) != cfg.Run.Iterations+1 {
		t.Fatalf("%d records, want %d", len(recs), cfg.Run.Iterations+1)
	}
	for _, r := range recs[:cfg.Run.Iterations] {
		t.Logf("iteration %v: reward %v, tokens %v, logprob diff %v, compactions %v", r["iteration"], r["reward"], r["tokens_optimised"], r["logprob_max_abs_diff"], r["compactions"])
		if r["tokens_optimised"] == 0 {
			continue // every rollout masked (overlong): nothing to compare
		}
		// The sampler decodes with a KV cache, the trainer scores packed
		// sequences: the same float32 computation of every row, so the
		// same numbers (model.Decoder).
		if d := r["logprob_max_abs_diff"]; d != 0 {
			t.Errorf("iteration %v: sampler and trainer log-probs differ by %g", r["iteration"], d)
		}
	}
	if res.After.Episodes != cfg.Run.EvalEpisodes {
		t.Errorf("eval episodes = %d", res.After.Episodes)
	}
	ckpt, err := train.LatestCheckpoint(cfg.Run.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"policy/model.safetensors", "policy/config.json", "policy/" + builtin.OptimizerFile, "critic/model.safetensors", "critic/" + builtin.OptimizerFile, "state.json", "config.yaml"} {
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

// The whole pipeline — concurrent episodes batched by the engine, the agent
// loop, scoring, updates — repeats given the seed, and a run killed
// mid-iteration resumes with no iteration lost or repeated, both to the
// bit: which sequences share a decode batch depends on goroutine timing,
// but the built-in engine's tokens and log-probs do not depend on it
// (model.Decoder).
func TestBuiltinRepeatableAndResumable(t *testing.T) {
	if testing.Short() {
		t.Skip("three nano runs")
	}
	run := func(cfg Config, resume bool, kill bool) []report.Record {
		s, err := Build(cfg, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.Trainer.Resume = resume
		ctx := context.Background()
		if kill {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			inner := s.Trainer.Collector
			calls := 0
			s.Trainer.Collector = collectorFunc(func(ctx2 context.Context, r train.Rollouts) ([]episode.Episode, error) {
				calls++
				if calls == 6 { // eval 0 (2), iter 0, eval 1 (2), iter 1 → killed inside iteration 1's rollouts
					cancel()
				}
				return inner.Collect(ctx2, r)
			})
		}
		if _, err := s.Trainer.Run(ctx); err != nil {
			if kill {
				return nil
			}
			t.Fatal(err)
		}
		return runMetrics(t, cfg.Run.Dir, true)
	}
	cfg := nanoConfig(t)
	cfg.Run.Iterations = 3
	a := run(cfg, false, false)
	cfg2 := cfg
	cfg2.Run.Dir = t.TempDir()
	sameRecords(t, "repeat", a, run(cfg2, false, false))
	cfg3 := cfg
	cfg3.Run.Dir = t.TempDir()
	run(cfg3, false, true)
	sameRecords(t, "resume", a, run(cfg3, true, false))
}

// sameRecords checks the same iterations with the same fields and the
// same numbers.
func sameRecords(t *testing.T, what string, want, got []report.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i]["iteration"] != want[i]["iteration"] {
			t.Fatalf("%s: record %d is iteration %v, want %v", what, i, got[i]["iteration"], want[i]["iteration"])
		}
		if len(got[i]) != len(want[i]) {
			t.Errorf("%s: iteration %v has fields %v, want %v", what, want[i]["iteration"], got[i], want[i])
		}
		for k, w := range want[i] {
			if g, ok := got[i][k]; !ok || g != w {
				t.Errorf("%s: iteration %v %s = %v, want %v", what, want[i]["iteration"], k, got[i][k], w)
			}
		}
	}
}

type collectorFunc func(ctx context.Context, r train.Rollouts) ([]episode.Episode, error)

func (f collectorFunc) Collect(ctx context.Context, r train.Rollouts) ([]episode.Episode, error) {
	return f(ctx, r)
}

// letterEnv is a one-turn task for the real pipeline: reward 1 when the
// reply contains the letter "k". A random policy gets it often enough for
// PPO to have signal from the first iteration.
type letterEnv struct{}

func (letterEnv) Reset(ctx context.Context) (string, error) {
	return "say something with the letter k", nil
}
func (letterEnv) Step(ctx context.Context, reply string) (agent.Step, error) {
	r := 0.0
	if strings.Contains(reply, "k") {
		r = 1
	}
	return agent.Step{Observation: "ok", Reward: r, Done: true}, nil
}

func letterConfig(t *testing.T) Config {
	c := nanoConfig(t)
	c.SFT.Steps = 0
	c.Agent.MaxActionTokens = 4
	c.RL.LR, c.RL.CriticLR, c.RL.CriticWarmup = 1e-2, 1e-2, 5
	c.RL.MiniBatches, c.RL.PPOEpochs = 2, 2
	c.Run = train.RunConfig{Dir: c.Run.Dir, Iterations: 8, Episodes: 32, Workers: 8, EvalEvery: 0, EvalEpisodes: 0, CheckpointEvery: 0}
	return c
}

func buildLetter(t *testing.T, cfg Config) *Setup {
	s, err := Build(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Suite.NewEnv = func(int64) (agent.Environment, error) { return letterEnv{}, nil }
	return s
}

// End to end on the real pieces (agent loop, nano Llama policy and critic,
// batched sampler, PPO): the policy's reward rises in a few iterations.
func TestBuiltinRewardRises(t *testing.T) {
	if testing.Short() {
		t.Skip("eight PPO iterations of the nano model")
	}
	cfg := letterConfig(t)
	s := buildLetter(t, cfg)
	defer s.Close()
	if _, err := s.Trainer.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := runMetrics(t, cfg.Run.Dir, false)
	r := func(i int) float64 { return recs[i]["reward"] }
	first, last := (r(0)+r(1))/2, (r(6)+r(7))/2
	t.Logf("reward %.3f → %.3f", first, last)
	if last < first+0.2 {
		t.Errorf("reward did not rise: %.3f → %.3f", first, last)
	}
}

// The micro-batch size does not change the update, end to end on the real
// model: the same rollouts (collected once) through the whole update —
// critic scoring, warm-up, advantages, PPO and value steps — from the same
// initial weights give the same gradients to float32 rounding (they are
// summed in a different grouping). Weights are not compared: Adam turns
// rounding noise in near-zero gradients into full learning-rate steps.
func TestBuiltinMicroBatchInvariance(t *testing.T) {
	cfg := letterConfig(t)
	s := buildLetter(t, cfg)
	defer s.Close()
	ctx := context.Background()
	tasks, samples := make([]int64, cfg.Run.Episodes), make([]int64, cfg.Run.Episodes)
	for j := range tasks {
		tasks[j], samples[j] = int64(j), splitmix.Chain(cfg.Seed, int64(j))
	}
	eps, err := s.Suite.Collect(ctx, train.Rollouts{Sampler: s.Policy.Sampler(), Seeds: tasks, SampleSeeds: samples, Temperature: 1})
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(eps)
	if err != nil {
		t.Fatal(err)
	}
	init := s.Policy.M.Clone()
	opts := builtin.Options{GradClip: cfg.RL.GradClip}
	var gs [][]float32
	var norms []float64
	for _, mb := range []int{1, 5, 1000} {
		c := cfg
		c.RL.MicroBatch = mb
		b, err := builtin.NewPolicy(init.Clone(), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		pol := &gradCapture{Builtin: b}
		tr := &train.Trainer{Cfg: c.Train(), Policy: pol, NewCritic: func(context.Context, train.Policy) (train.Model, error) {
			return builtin.NewCritic(pol.M, opts), nil
		}}
		var cp []episode.Episode
		if err := json.Unmarshal(js, &cp); err != nil {
			t.Fatal(err)
		}
		m, err := tr.Update(ctx, 0, cp)
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, pol.first)
		norms = append(norms, m.GradNorm, m.CriticGradNorm, m.PolicyLoss)
	}
	gmax := 0.0
	for _, g := range gs[0] {
		gmax = math.Max(gmax, math.Abs(float64(g)))
	}
	for i := 1; i < len(gs); i++ {
		maxd := 0.0
		for k := range gs[0] {
			maxd = math.Max(maxd, math.Abs(float64(gs[i][k]-gs[0][k])))
		}
		if maxd > 1e-4*gmax {
			t.Errorf("micro-batch run %d: first policy gradient differs by %g (largest component %g)", i, maxd, gmax)
		}
		// Gradient norms before clipping are scale-sensitive (Adam is not).
		for k := 0; k < 3; k++ {
			if a, b := norms[3*i+k], norms[k]; math.Abs(a-b) > 1e-3*math.Abs(b)+1e-9 {
				t.Errorf("micro-batch run %d: statistic %d = %g, want %g", i, k, a, b)
			}
		}
	}
}

// gradCapture records the policy gradient of the first optimiser step.
type gradCapture struct {
	*builtin.Builtin
	first []float32
}

func (g *gradCapture) Step(ctx context.Context, lr float64) (float64, error) {
	if g.first == nil {
		for _, p := range g.M.Params() {
			g.first = append(g.first, p.Grad...)
		}
	}
	return g.Builtin.Step(ctx, lr)
}

func TestExpertReference(t *testing.T) {
	cfg := DemoConfig()
	cfg.Run.EvalEpisodes = 16
	perfect, err := EvaluateExpert(context.Background(), cfg, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	lossy, err := EvaluateExpert(context.Background(), cfg, 0.3, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("expert pass@1 with compaction: p=1 %.3f, p=0.3 %.3f; single window %.3f", perfect.Pass1Compact, lossy.Pass1Compact, perfect.Pass1Single)
	if perfect.Pass1Compact < lossy.Pass1Compact || perfect.SummaryQuality < lossy.SummaryQuality {
		t.Errorf("lossier summaries must not help: p=1 %+v, p=0.3 %+v", perfect, lossy)
	}
	if perfect.Compactions < 1 || perfect.Pass1Single >= perfect.Pass1Compact {
		t.Errorf("the demo suite must need compaction: %+v", perfect)
	}
}

// The warm start runs its copy phase first, then recall, then SFT, each
// logged, with recall sequences of either kind (sft.recall_goal).
// With sft.recall_restarts and a target recall cannot reach, copy and
// recall run again from fresh weights (attempt 1) before SFT.
func TestWarmStartPhases(t *testing.T) {
	for _, x := range []struct{ goal, restart bool }{{false, false}, {true, false}, {true, true}} {
		goal := x.goal
		t.Run(fmt.Sprintf("recall_goal=%v,restart=%v", goal, x.restart), func(t *testing.T) {
			cfg := nanoConfig(t)
			cfg.SFT.CopySteps, cfg.SFT.CopyLen = 2, 64
			cfg.SFT.RecallSteps, cfg.SFT.RecallExtra = 2, 3
			cfg.SFT.RecallKeys, cfg.SFT.RecallLen, cfg.Suite.Keys = 32, 48, 4
			cfg.SFT.RecallMix, cfg.SFT.RecallGoal = 3, goal
			if x.restart {
				cfg.SFT.RecallRestarts, cfg.SFT.RecallTarget = 1, 1e-12
			}
			cfg.Run.Iterations = 0
			s, err := Build(cfg, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// Recall's record lines draw from all 32 key words, whatever the
			// suite's pool.
			if n := len(s.Trainer.Extra.Source.(recallSource).ft.Keys); n != 32 {
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
			recs, err := train.ReadSFTCurve(f)
			if err != nil {
				t.Fatal(err)
			}
			var phases []string
			for _, r := range recs {
				if r.Tokens == 0 || r.Loss <= 0 {
					t.Errorf("%s step %d: %d tokens, loss %g", r.Phase, r.Step, r.Tokens, r.Loss)
				}
				// SFT batches carry recall_mix recall sequences, with their own loss.
				if (r.Phase == "sft") != (r.MixedLoss != nil) || (r.MixedLoss != nil && *r.MixedLoss <= 0) {
					t.Errorf("%s step %d: recall loss %v", r.Phase, r.Step, r.MixedLoss)
				}
				phases = append(phases, fmt.Sprintf("%s%d", r.Phase, r.Attempt))
			}
			want := []string{"copy0", "copy0", "recall0", "recall0", "sft0", "sft0", "sft0"}
			if x.restart {
				want = []string{"copy0", "copy0", "recall0", "recall0", "copy1", "copy1", "recall1", "recall1", "sft0", "sft0", "sft0"}
			}
			if !slices.Equal(phases, want) {
				t.Fatalf("phases %v, want %v", phases, want)
			}
			// RL starts with a fresh optimiser, not the warm start's moments.
			if n := s.Policy.OptimizerSteps(); n != 0 {
				t.Fatalf("policy optimiser at step %d after the warm start, want a fresh one", n)
			}
		})
	}
}

// runMetrics reads a run's metrics.jsonl; without timing, the wall-clock
// fields (which no two runs share) are left out.
func runMetrics(t *testing.T, dir string, withoutTiming bool) []report.Record {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := report.ReadMetrics(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		for k := range r {
			if withoutTiming && (strings.HasPrefix(k, "time_") || strings.HasSuffix(k, "_per_s")) {
				delete(r, k)
			}
		}
	}
	return recs
}

package train

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/rl"
)

func testConfig(t *testing.T) Config {
	c := DefaultConfig()
	c.Seed = 3
	c.Run.Dir = t.TempDir()
	c.Run.Iterations = 12
	c.Run.Episodes = 32
	c.Run.EvalEvery = 4
	c.Run.EvalEpisodes = 16
	c.Run.CheckpointEvery = 1
	c.SFT.Steps = 0
	c.RL.LR = 0.2
	c.RL.CriticLR = 0.05
	c.RL.CriticWarmup = 5
	c.RL.MicroBatch = 5
	c.RL.MiniBatches = 2
	c.RL.PPOEpochs = 2
	return c
}

func newTestTrainer(cfg Config, env *memoryTask) *Trainer {
	p := newBigram(env.V, false, cfg.Seed)
	return &Trainer{
		Cfg: cfg, Policy: p, Collector: env, Expert: env,
		NewCritic: func(ctx context.Context, _ Policy) (Model, error) { return newBigram(env.V, true, cfg.Seed+1), nil },
	}
}

func readMetrics(t *testing.T, dir string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("metrics line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// stripTiming drops the wall-clock fields, which no two runs share.
func stripTiming(recs []map[string]any) []map[string]any {
	for _, r := range recs {
		for k := range r {
			if strings.HasPrefix(k, "time_") || strings.HasSuffix(k, "_per_s") {
				delete(r, k)
			}
		}
	}
	return recs
}

func TestTrainingRaisesReward(t *testing.T) {
	cfg := testConfig(t)
	tr := newTestTrainer(cfg, newMemoryTask())
	res, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	recs := readMetrics(t, cfg.Run.Dir)
	if len(recs) != cfg.Run.Iterations+1 {
		t.Fatalf("%d metrics records, want %d (one per iteration + final eval)", len(recs), cfg.Run.Iterations+1)
	}
	if n := eventRecords(t, cfg.Run.Dir); n != len(recs)+1 {
		t.Errorf("%d TensorBoard records, want %d (file version + one per metrics record)", n, len(recs)+1)
	}
	first := (recs[0]["reward"].(float64) + recs[1]["reward"].(float64)) / 2
	n := cfg.Run.Iterations
	last := (recs[n-1]["reward"].(float64) + recs[n-2]["reward"].(float64)) / 2
	t.Logf("reward %.3f → %.3f; eval pass@1 %.3f → %.3f; summary quality → %.3f", first, last, res.Before.Pass1Compact, res.After.Pass1Compact, res.After.SummaryQuality)
	if last < first+0.3 {
		t.Errorf("reward did not rise: %.3f → %.3f", first, last)
	}
	if res.After.Pass1Compact <= res.Before.Pass1Compact {
		t.Errorf("held-out pass@1 did not rise: %.3f → %.3f", res.Before.Pass1Compact, res.After.Pass1Compact)
	}
	if d := recs[0]["logprob_max_abs_diff"].(float64); d > 1e-12 {
		t.Errorf("trainer and sampler log-probs differ by %g on the first step", d)
	}
	for _, k := range []string{"eval_pass1_compact", "eval_pass1_single"} {
		if _, ok := recs[0][k]; !ok {
			t.Errorf("iteration 0 lacks %s", k)
		}
		if _, ok := recs[1][k]; ok {
			t.Errorf("iteration 1 has %s (eval_every 4)", k)
		}
	}
	for _, k := range []string{"clip_frac", "approx_kl", "value_loss", "entropy", "summary_quality", "compactions", "turns", "summary_tokens", "rollout_tokens_per_s", "train_tokens_per_s", "time_rollout_s", "time_train_s"} {
		if _, ok := recs[2][k]; !ok {
			t.Errorf("metrics lack %s", k)
		}
	}
}

// The update must not depend on how a step is cut into micro-batches: loss
// weights are fixed over the whole optimiser step.
func TestMicroBatchSizeDoesNotChangeUpdate(t *testing.T) {
	for _, mode := range []rl.Aggregation{rl.TokenMean, rl.SeqMeanTokenMean} {
		t.Run(string(mode), func(t *testing.T) {
			var weights [][]float64
			var metrics [][]map[string]any
			for _, mb := range []int{1, 3, 1000} {
				cfg := testConfig(t)
				cfg.Run.Iterations = 2
				cfg.Run.EvalEvery = 0
				cfg.Run.EvalEpisodes = 0
				cfg.RL.LossAggMode = mode
				cfg.RL.MicroBatch = mb
				tr := newTestTrainer(cfg, newMemoryTask())
				if _, err := tr.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
				weights = append(weights, tr.Policy.(*bigram).W)
				metrics = append(metrics, stripTiming(readMetrics(t, cfg.Run.Dir)))
			}
			for i := 1; i < len(weights); i++ {
				for k := range weights[0] {
					if d := math.Abs(weights[i][k] - weights[0][k]); d > 1e-12 {
						t.Fatalf("%s: micro-batch size changed weight %d by %g", mode, k, d)
					}
				}
				if !reflect.DeepEqual(metrics[i], metrics[0]) {
					t.Errorf("%s: micro-batch size changed the metrics:\n%v\n%v", mode, metrics[i], metrics[0])
				}
			}
		})
	}
}

var errKilled = errors.New("killed")

// A run killed in the middle of an iteration and resumed from its last
// checkpoint gives the same metrics and weights as an uninterrupted run.
func TestResumeAfterKillReproducesRun(t *testing.T) {
	cfg := testConfig(t)
	cfg.Run.Iterations = 6
	cfg.Run.EvalEvery = 2
	cfg.SFT.Steps = 5
	cfg.SFT.Episodes = 8
	full := newTestTrainer(cfg, newMemoryTask())
	fullRes, err := full.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := stripTiming(readMetrics(t, cfg.Run.Dir))

	for _, c := range []struct {
		name  string
		every int
	}{{"checkpoint_every=1", 1}, {"checkpoint_every=2", 2}} {
		every := c.every
		t.Run(c.name, func(t *testing.T) {
			cfg2 := cfg
			cfg2.Run.Dir = t.TempDir()
			cfg2.Run.CheckpointEvery = every
			env := newMemoryTask()
			// Collect calls: eval 0 (2 calls), iter 0, iter 1, eval 2 (2), iter 2, iter 3 → kill in iteration 3's rollouts.
			env.beforeCollect = func(call int) error {
				if call == 8 {
					return errKilled
				}
				return nil
			}
			ctx, cancel := context.WithCancel(context.Background())
			if _, err := newTestTrainer(cfg2, env).Run(ctx); !errors.Is(err, errKilled) {
				t.Fatalf("interrupted run: err = %v", err)
			}
			cancel()
			got := readMetrics(t, cfg2.Run.Dir)
			if len(got) != 3 {
				t.Fatalf("checkpoint_every %d: %d records before the kill, want 3", every, len(got))
			}
			tr := newTestTrainer(cfg2, newMemoryTask())
			tr.Resume = true
			res, err := tr.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Before, fullRes.Before) || !reflect.DeepEqual(res.After, fullRes.After) {
				t.Errorf("checkpoint_every %d: resumed before/after %+v %+v, want %+v %+v", every, res.Before, res.After, fullRes.Before, fullRes.After)
			}
			got = stripTiming(readMetrics(t, cfg2.Run.Dir))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("checkpoint_every %d: resumed metrics differ:\n got %v\nwant %v", every, got, want)
			}
			if !reflect.DeepEqual(tr.Policy.(*bigram).W, full.Policy.(*bigram).W) {
				t.Errorf("checkpoint_every %d: resumed weights differ", every)
			}
		})
	}
}

func TestResumeWithoutCheckpointStartsFresh(t *testing.T) {
	cfg := testConfig(t)
	cfg.Run.Iterations = 1
	tr := newTestTrainer(cfg, newMemoryTask())
	tr.Resume = true
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := LatestCheckpoint(cfg.Run.Dir); err != nil {
		t.Fatal(err)
	}
	cfg.Seed++
	tr = newTestTrainer(cfg, newMemoryTask())
	tr.Resume = true
	if _, err := tr.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "seed") {
		t.Errorf("resume with another seed: err = %v", err)
	}
}

func TestWarmStartLearnsFromExpert(t *testing.T) {
	cfg := testConfig(t)
	cfg.Run.Iterations = 0
	cfg.SFT.Steps = 150
	cfg.SFT.Episodes = 64
	cfg.SFT.ExpertP = 1
	cfg.SFT.LR = 0.05
	res, err := newTestTrainer(cfg, newMemoryTask()).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.After.Pass1Compact < 0.9 {
		t.Errorf("after SFT on a perfect expert, pass@1 = %.3f", res.After.Pass1Compact)
	}
	b, err := os.ReadFile(filepath.Join(cfg.Run.Dir, "sft.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != cfg.SFT.Steps {
		t.Errorf("sft.jsonl has %d lines, want %d", n, cfg.SFT.Steps)
	}
}

func TestGRPOTrainsWithoutCritic(t *testing.T) {
	cfg := testConfig(t)
	cfg.Run.Iterations = 3
	cfg.RL.Estimator = "grpo"
	cfg.RL.GroupSize = 4
	tr := newTestTrainer(cfg, newMemoryTask())
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := readMetrics(t, cfg.Run.Dir)
	if _, ok := recs[0]["value_loss"]; ok {
		t.Error("grpo must not train the critic (value_loss present)")
	}
}

func TestPrepareMasks(t *testing.T) {
	seg := func(kind episode.Kind) episode.Segment {
		return episode.Segment{Kind: kind, Trainable: true, PromptIDs: []int{1}, ResponseIDs: []int{2, 3, 4, 5}, LossMask: []int{1, 0, 1, 1}, Logprobs: []float64{0, 0, 0, 0}}
	}
	eps := []episode.Episode{
		{ID: "ok", Status: episode.StatusOK, Segments: []episode.Segment{seg(episode.KindSummary), seg(episode.KindExec)}},
		{ID: "long", Status: episode.StatusOverlong, Segments: []episode.Segment{seg(episode.KindExec)}},
		{ID: "infra", Status: episode.StatusInfraError, Segments: []episode.Segment{seg(episode.KindExec)}},
	}
	cfg := DefaultConfig()
	cfg.RL.SummaryTraining = false
	tr := &Trainer{Cfg: cfg}
	items, err := tr.prepare(eps)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].ep != 0 || items[1].ep != 0 {
		t.Fatalf("items = %+v, want the two segments of the ok episode", items)
	}
	if got := eps[0].Segments[0].LossMask; !reflect.DeepEqual(got, []int{1, 0, 0, 0}) {
		t.Errorf("summary mask = %v, want the summary (last policy run) masked: [1 0 0 0]", got)
	}
	if got := eps[0].Segments[1].LossMask; !reflect.DeepEqual(got, []int{1, 0, 1, 1}) {
		t.Errorf("exec mask changed: %v", got)
	}
	if eps[1].Segments[0].Trainable || eps[2].Segments[0].Trainable {
		t.Error("overlong and infra_error episodes must be masked")
	}
}

// TestPrepareRefusesOverriddenSummaries: an episode played with a summary
// override (evaluation only) never reaches the loss.
func TestPrepareRefusesOverriddenSummaries(t *testing.T) {
	seg := episode.Segment{Kind: episode.KindSummary, Trainable: true, PromptIDs: []int{1}, ResponseIDs: []int{2, 3}, LossMask: []int{1, 1}, Logprobs: []float64{0, 0}}
	eps := []episode.Episode{
		{ID: "own", Status: episode.StatusOK, Segments: []episode.Segment{seg}},
		{ID: "replaced", Status: episode.StatusOK, Segments: []episode.Segment{seg}, Meta: map[string]string{episode.MetaSummaryOverride: "expert"}},
	}
	tr := &Trainer{Cfg: DefaultConfig()}
	if _, err := tr.prepare(eps); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("prepare accepted an overridden episode: %v", err)
	}
	if items, err := tr.prepare(eps[:1]); err != nil || len(items) != 1 {
		t.Fatalf("own episode: %d items, %v", len(items), err)
	}
}

func TestMetricsJSONLeavesOutNaN(t *testing.T) {
	m := Metrics{Iteration: 2, Reward: 0.5, SummaryQual: math.NaN()}
	m.setEval(EvalResult{Pass1Compact: 0.25, Pass1Single: 0.5, SummaryQuality: math.NaN()})
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if _, ok := back["summary_quality"]; ok {
		t.Error("NaN summary_quality written")
	}
	if _, ok := back["eval_summary_quality"]; ok {
		t.Error("NaN eval_summary_quality written")
	}
	if back["eval_pass1_compact"] != 0.25 || back["reward"] != 0.5 || back["iteration"] != 2.0 {
		t.Errorf("fields lost: %s", b)
	}
}

func TestSeedsDeterministicAndHeldOut(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Run.Episodes = 8
	cfg.RL.GroupSize = 2
	tr := &Trainer{Cfg: cfg}
	a, sa := tr.trainSeeds(3)
	b, sb := tr.trainSeeds(3)
	if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(sa, sb) {
		t.Fatal("seeds not deterministic")
	}
	for j, s := range a {
		if s < cfg.Seeds.TrainSeedStart || s >= cfg.Seeds.TestSeedStart {
			t.Errorf("train seed %d outside the training range", s)
		}
		if j%2 == 1 && s != a[j-1] {
			t.Errorf("group members %d, %d have different tasks", j-1, j)
		}
		if j%2 == 1 && sa[j] == sa[j-1] {
			t.Errorf("group members %d, %d share a sampling seed", j-1, j)
		}
	}
}

// A fresh run into a directory that holds another run's checkpoints is
// refused (a later --resume would mix the two), and a rejected resume
// leaves the run's config.yaml as it was.
func TestRunDirectoryIsNotMixedOrOverwritten(t *testing.T) {
	cfg := testConfig(t)
	cfg.Run.Iterations = 1
	if _, err := newTestTrainer(cfg, newMemoryTask()).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(cfg.Run.Dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newTestTrainer(cfg, newMemoryTask()).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "already holds a run") {
		t.Errorf("a second fresh run into the same dir: err = %v", err)
	}
	other := cfg
	other.Seed++
	tr := newTestTrainer(other, newMemoryTask())
	tr.Resume = true
	if _, err := tr.Run(context.Background()); err == nil {
		t.Fatal("resume with another seed was accepted")
	}
	after, err := os.ReadFile(filepath.Join(cfg.Run.Dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("a rejected resume rewrote config.yaml:\n%s\nwas\n%s", after, before)
	}
}

// A warm start killed and run again rewrites its curve: sft.jsonl has one
// record per step, not the killed run's steps as well.
func TestRestartedWarmStartRewritesItsCurve(t *testing.T) {
	cfg := testConfig(t)
	cfg.Run.Iterations = 0
	cfg.SFT.Steps, cfg.SFT.Episodes = 5, 8
	// A killed run's partial curve.
	if err := os.MkdirAll(cfg.Run.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.Run.Dir, "sft.jsonl"), []byte(`{"phase":"sft","step":0,"loss":1}`+"\n"+`{"phase":"sft","step":1,"loss":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr := newTestTrainer(cfg, newMemoryTask())
	tr.Resume = true // no checkpoint yet: starts afresh
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(cfg.Run.Dir, "sft.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 5 {
		t.Errorf("sft.jsonl has %d records after a restart, want 5", n)
	}
}

// Update optimises on episodes collected elsewhere (an external rollout
// service): it builds the critic on first use, warms it up once, updates
// the policy, and does not publish; episodes with nothing to train leave
// the weights as they were.
func TestUpdateOnCollectedEpisodes(t *testing.T) {
	cfg := testConfig(t)
	env := newMemoryTask()
	tr := newTestTrainer(cfg, env)
	critics := 0
	newCritic := tr.NewCritic
	tr.NewCritic = func(ctx context.Context, p Policy) (Model, error) { critics++; return newCritic(ctx, p) }
	pol := tr.Policy.(*bigram)
	if err := pol.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	seeds := []int64{1, 2, 3, 4}
	eps, err := env.Collect(context.Background(), Rollouts{Sampler: pol.Sampler(), Seeds: seeds, SampleSeeds: seeds, Temperature: 1})
	if err != nil {
		t.Fatal(err)
	}
	for j := range eps {
		eps[j].Group = fmt.Sprint(j)
	}
	before := slices.Clone(pol.W)
	published := slices.Clone(pol.pub)
	m, err := tr.Update(context.Background(), 0, slices.Clone(eps))
	if err != nil {
		t.Fatal(err)
	}
	if critics != 1 || !tr.state.CriticWarmed || m.Segments == 0 || m.TokensOptimised == 0 || math.IsNaN(m.PolicyLoss) || math.IsNaN(m.ValueLoss) {
		t.Fatalf("critics %d, warmed %v, metrics %+v", critics, tr.state.CriticWarmed, m)
	}
	if slices.Equal(before, pol.W) {
		t.Fatal("the policy did not change")
	}
	// The credit diagnostics cover every episode with two or more trainable
	// segments holding optimised tokens (memoryTask compacts).
	multi := 0
	for _, ep := range eps {
		n := 0
		for _, s := range ep.Segments {
			if s.Trainable && slices.Contains(s.LossMask, 1) {
				n++
			}
		}
		if n >= 2 {
			multi++
		}
	}
	if multi == 0 || m.CreditEpisodes != multi || m.LambdaMean == nil || m.FirstSegmentScale == nil || m.ValueErrFirst == nil || m.ValueJump == nil || m.AdvAbsLast == nil {
		t.Fatalf("credit: %d multi-segment episodes, metrics %d, lambda %v, scale %v, value err %v, adv %v", multi, m.CreditEpisodes, m.LambdaMean, m.FirstSegmentScale, m.ValueErrFirst, m.AdvAbsLast)
	}
	if s := *m.FirstSegmentScale; s <= 0 || s >= 1 {
		t.Errorf("first segment scale %v, want in (0, 1)", s)
	}
	if !slices.Equal(published, pol.pub) {
		t.Fatal("Update published the weights")
	}
	// A second update reuses the critic; masked episodes train nothing.
	for j := range eps {
		eps[j].Status = episode.StatusInfraError
	}
	after := slices.Clone(pol.W)
	if m, err = tr.Update(context.Background(), 1, eps); err != nil {
		t.Fatal(err)
	}
	if critics != 1 || m.Segments != 0 || !slices.Equal(after, pol.W) {
		t.Fatalf("masked episodes: critics %d, segments %d, weights changed %v", critics, m.Segments, !slices.Equal(after, pol.W))
	}
}

// ResolveCheckpoint takes a checkpoint directory as it is and a run
// directory as its latest checkpoint (whose state is the run's last
// iteration); anything else is an error naming the directory and the
// cause.
func TestResolveCheckpoint(t *testing.T) {
	cfg := testConfig(t)
	cfg.Run.Iterations, cfg.Run.EvalEvery, cfg.Run.EvalEpisodes = 2, 0, 0
	if _, err := newTestTrainer(cfg, newMemoryTask()).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	ckpt, err := ResolveCheckpoint(cfg.Run.Dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := readState(ckpt)
	if err != nil || st.Iteration != cfg.Run.Iterations {
		t.Fatalf("latest checkpoint %s: state %+v, %v; want iteration %d", ckpt, st, err, cfg.Run.Iterations)
	}
	if again, err := ResolveCheckpoint(ckpt); err != nil || again != ckpt {
		t.Errorf("a checkpoint directory resolved to %q, %v", again, err)
	}
	empty := t.TempDir()
	_, err = ResolveCheckpoint(empty)
	if err == nil || !strings.Contains(err.Error(), empty) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty directory: %v, want an error naming it that wraps os.ErrNotExist", err)
	}
}

// A run without the evaluation before RL (run.eval_every 0), killed and
// resumed, still reports that evaluation as not run (no episodes), not as
// an evaluation of NaN.
func TestResumeWithoutEvaluationBeforeRL(t *testing.T) {
	cfg := testConfig(t)
	cfg.Run.Iterations, cfg.Run.EvalEvery, cfg.Run.CheckpointEvery = 3, 0, 1
	env := newMemoryTask()
	env.beforeCollect = func(call int) error {
		if call == 2 {
			return errKilled
		}
		return nil
	}
	if _, err := newTestTrainer(cfg, env).Run(context.Background()); !errors.Is(err, errKilled) {
		t.Fatalf("interrupted run: err = %v", err)
	}
	tr := newTestTrainer(cfg, newMemoryTask())
	tr.Resume = true
	res, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Before.Episodes != 0 || res.After.Episodes == 0 {
		t.Fatalf("resumed: before %d episodes (want 0: not evaluated), after %d", res.Before.Episodes, res.After.Episodes)
	}
}

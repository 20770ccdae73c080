package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/internal/progress"
	"github.com/compactrl/compactrl/internal/splitmix"
	"github.com/compactrl/compactrl/rl"
)

// Trainer runs one CompactionRL run: warm start, critic warm-up, PPO
// iterations with periodic held-out evaluation, metrics and checkpoints.
type Trainer struct {
	Cfg    Config
	Policy Policy
	// NewCritic builds the value model from the (warm-started) policy; the
	// paper initialises it from the policy checkpoint.
	NewCritic func(ctx context.Context, p Policy) (Model, error)
	Collector Collector
	Expert    ExpertCollector // nil, or no SFT, copy or extra steps: no warm start
	// Extra are the warm start's extra supervised sequences (a suite's own
	// pretraining task); nil: none.
	Extra *ExtraExamples
	// ConfigYAML is the whole config of the run (the recipe's, of which
	// Cfg is the trainer's part), recorded as RUN_DIR/config.yaml and in
	// every checkpoint; nil records Cfg's YAML.
	ConfigYAML []byte
	// BaseCurve is the pretraining curve of the base policy the run starts
	// from (a JSONL file; "" or missing: none), copied into the run
	// directory under its own name for the report.
	BaseCurve string
	Progress  io.Writer // progress bars; nil: none
	// Transcribe renders an episode as readable text; with it, every
	// held-out evaluation of a run keeps one compacted episode's
	// transcript in RUN_DIR/transcripts/ for the report.
	Transcribe func(ep *episode.Episode) string
	Log        io.Writer // one line per iteration; nil: none
	// Resume continues from the run directory's latest checkpoint.
	Resume bool

	critic Model
	state  State
	clock  func() time.Time
	// failedBefore holds the transcripts of the episodes that failed in
	// iteration 0's evaluation, by evaluation index (the same task and
	// sampling seed in every evaluation of the run), for the final
	// evaluation's before/after pair.
	failedBefore map[int]string
}

// optimizerResetter is a Policy whose optimiser can start afresh.
type optimizerResetter interface{ ResetOptimizer() }

// State is what a checkpoint records besides the weights: enough to
// continue the run exactly where it stopped. Every random choice of an
// iteration derives from (Seed, iteration), so no generator state beyond
// these counters is needed.
type State struct {
	Seed         int64 `json:"seed"`
	Iteration    int   `json:"iteration"` // the next RL iteration to run
	SFTDone      bool  `json:"sft_done"`
	CriticWarmed bool  `json:"critic_warmed"`
	PolicySteps  int   `json:"policy_steps"`
	CriticSteps  int   `json:"critic_steps"`
}

// EvalResult is one held-out evaluation: pass@1 with compaction and in a
// single window, on Run.EvalEpisodes seeds each.
type EvalResult struct {
	Episodes       int     `json:"episodes"`
	Pass1Compact   float64 `json:"pass1_compact"`
	Pass1Single    float64 `json:"pass1_single"`
	SummaryQuality float64 `json:"summary_quality"` // mean of the agent loop's summary_quality (an environment that grades summaries: agent.SummaryScorer) over the episodes that have one; NaN if none
	Compactions    float64 `json:"compactions"`     // per episode, with compaction
	// PassCompacted is pass@1 over the episodes that compacted at least once.
	PassCompacted float64 `json:"pass_compacted"`
	// Reward is the mean reward with compaction (with partial credit, the
	// fraction of keys right).
	Reward float64 `json:"reward"`
	// Range is the evaluation range (RangeDev or RangeTest) and FirstSeed
	// the task seed of episode 0: episode j played task FirstSeed + j.
	Range     string `json:"range,omitempty"`
	FirstSeed int64  `json:"first_seed,omitempty"`
	// Outcomes are the episodes one by one, in task order (not in the
	// JSON of EvalResult: OutcomesFile holds them).
	Outcomes []Outcome `json:"-"`
}

// Outcome is one evaluation task's result: the episode with compaction and
// the one in a single window on the same task seed. Pass and SinglePass
// are 1 for a success (episode.Succeeded), else 0; Scored is false for an
// episode that infrastructure failed (excluded from pass@1, never scored 0).
type Outcome struct {
	TaskSeed       int64          `json:"task_seed"`
	Status         episode.Status `json:"status"`
	Scored         bool           `json:"scored"`
	Pass           int            `json:"pass"`
	Reward         float64        `json:"reward"`
	Compactions    float64        `json:"compactions"`
	SummaryQuality *float64       `json:"summary_quality,omitempty"`
	SingleStatus   episode.Status `json:"single_status,omitempty"`
	SingleScored   bool           `json:"single_scored"`
	SinglePass     int            `json:"single_pass"`
}

// Result is the outcome of Run.
type Result struct {
	Before, After EvalResult // held-out evaluation after the warm start and at the end
	Iterations    int
	Wall          time.Duration
	TimeSFT       time.Duration
	TimeRollout   time.Duration
	TimeTrain     time.Duration
	TimeEval      time.Duration
	RolloutTokens int // sampled policy tokens in training rollouts
	TrainTokens   int // tokens through forward+backward passes
	RunDir        string
}

// item is one trainable segment in an optimiser step: the sequence the
// model scores and its optimised tokens (rl.Token, positions into the
// response) with their weights for the current step: toks for the policy's
// steps, vtoks (the same tokens) for the critic's, which weigh them on their
// own so that a policy step and value steps can run at once.
type item struct {
	ep, seg int
	seq     Sequence
	toks    []rl.Token
	vtoks   []rl.Token
	extra   bool // an extra supervised sequence (warm start: ExtraExamples), not a demonstration segment
}

func (t *Trainer) now() time.Time {
	if t.clock != nil {
		return t.clock()
	}
	return time.Now()
}

// Run executes the whole run and returns its evaluation before and after RL:
// open (or resume) the run directory, the warm start and a fresh critic
// unless resumed, the RL iterations, the final evaluation.
func (t *Trainer) Run(ctx context.Context) (Result, error) {
	start := t.now()
	res := Result{RunDir: t.Cfg.Run.Dir}
	resumed, err := t.open(ctx)
	if err != nil {
		return res, err
	}
	if resumed {
		if err := t.truncateMetrics(t.state.Iteration); err != nil {
			return res, err
		}
		res.Before = t.recordedBefore()
	} else if err := t.begin(ctx, &res); err != nil {
		return res, err
	}
	mw, err := openMetrics(filepath.Join(t.Cfg.Run.Dir, "metrics.jsonl"))
	if err != nil {
		return res, err
	}
	defer mw.Close()
	if err := mw.withTensorBoard(t.Cfg.Run.Dir, t.now()); err != nil {
		return res, err
	}
	haveBefore, err := t.iterate(ctx, mw, &res, resumed && t.state.Iteration > 0)
	if err != nil {
		return res, err
	}
	if err := t.finalEvaluation(ctx, mw, &res, haveBefore); err != nil {
		return res, err
	}
	res.Iterations = t.Cfg.Run.Iterations
	res.Wall = t.now().Sub(start)
	return res, nil
}

// open checks the trainer, creates the run directory, restores its latest
// checkpoint when resuming (resumed: there was one) or refuses a directory
// holding another run, and records the run's config there.
func (t *Trainer) open(ctx context.Context) (resumed bool, err error) {
	cfg := t.Cfg
	if err := cfg.Validate(); err != nil {
		return false, err
	}
	if t.Policy == nil || t.Collector == nil || t.NewCritic == nil {
		return false, errors.New("trainer: Policy, Collector and NewCritic must be set")
	}
	dir := cfg.Run.Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("run dir %s: %w", dir, err)
	}
	t.state = State{Seed: cfg.Seed}
	if t.Resume {
		if resumed, err = t.restore(ctx); err != nil {
			return false, err
		}
	} else if ckpt, err := LatestCheckpoint(dir); err == nil {
		// A fresh run into a directory that holds another run's
		// checkpoints would mix the two on a later --resume.
		return false, fmt.Errorf("run dir %s already holds a run (checkpoint %s): resume it, or start in a new directory", dir, filepath.Base(ckpt))
	}
	if t.Log != nil {
		for _, d := range cfg.Deprecations {
			fmt.Fprintln(t.Log, d)
		}
	}
	// The config is recorded once the run is known to proceed: a rejected
	// resume leaves the run's config.yaml as it was.
	y, err := t.configYAML()
	if err != nil {
		return false, err
	}
	if err := writeAtomic(filepath.Join(dir, "config.yaml"), y); err != nil {
		return false, fmt.Errorf("run dir %s: %w", dir, err)
	}
	return resumed, nil
}

// configYAML is the config a run directory and its checkpoints record.
func (t *Trainer) configYAML() ([]byte, error) {
	if t.ConfigYAML != nil {
		return t.ConfigYAML, nil
	}
	return t.Cfg.YAML()
}

// begin starts a fresh run: a new metrics file, the base policy's curve,
// the warm start, a fresh optimiser and critic, and the first checkpoint.
func (t *Trainer) begin(ctx context.Context, res *Result) error {
	if err := t.truncateMetrics(0); err != nil {
		return err
	}
	if err := t.copyBaseCurve(); err != nil {
		return err
	}
	t0 := t.now()
	if err := t.warmStart(ctx); err != nil {
		return err
	}
	res.TimeSFT = t.now().Sub(t0)
	// RL starts with a fresh optimiser: AdamW's second moments from the
	// warm start (β₂ = 0.999 remembers ~1000 steps of the much larger
	// SFT gradients) would shrink the first hundreds of policy updates
	// to nothing (approx. KL < 1e-4 per update in the demo before this).
	if r, ok := t.Policy.(optimizerResetter); ok {
		r.ResetOptimizer()
	}
	var err error
	if t.critic, err = t.NewCritic(ctx, t.Policy); err != nil {
		return fmt.Errorf("new critic: %w", err)
	}
	t.state.SFTDone = true
	return t.checkpoint()
}

// iterate runs the RL iterations from the state's next one, each preceded
// by a held-out evaluation every Run.EvalEvery iterations, and records,
// logs and checkpoints each. It reports whether res.Before was set (by
// iteration 0's evaluation, or haveBefore already).
func (t *Trainer) iterate(ctx context.Context, mw *metricsWriter, res *Result, haveBefore bool) (bool, error) {
	cfg := t.Cfg
	for it := t.state.Iteration; it < cfg.Run.Iterations; it++ {
		m := Metrics{Iteration: it}
		if cfg.Run.EvalEvery > 0 && it%cfg.Run.EvalEvery == 0 {
			ev, err := t.timedEvaluation(ctx, &m, res, it)
			if err != nil {
				return haveBefore, err
			}
			if it == 0 {
				res.Before, haveBefore = ev, true
			}
		}
		if err := t.iteration(ctx, it, &m, res); err != nil {
			return haveBefore, err
		}
		t.state.Iteration = it + 1
		if err := mw.Write(m); err != nil {
			return haveBefore, err
		}
		if t.Log != nil {
			fmt.Fprintln(t.Log, m.Line())
		}
		if (cfg.Run.CheckpointEvery > 0 && (it+1)%cfg.Run.CheckpointEvery == 0) || it+1 == cfg.Run.Iterations {
			if err := t.checkpoint(); err != nil {
				return haveBefore, err
			}
		}
	}
	return haveBefore, nil
}

// timedEvaluation is iteration it's held-out evaluation, recorded in m.
func (t *Trainer) timedEvaluation(ctx context.Context, m *Metrics, res *Result, it int) (EvalResult, error) {
	t0 := t.now()
	ev, err := t.evaluateKeep(ctx, fmt.Sprintf("eval %d", it), fmt.Sprintf("eval-%06d", it))
	if err != nil {
		return ev, err
	}
	m.setEval(ev)
	m.TimeEvalS = t.now().Sub(t0).Seconds()
	res.TimeEval += t.now().Sub(t0)
	return ev, nil
}

// finalEvaluation evaluates the final policy, its own record at iteration
// = Iterations; it is also res.Before for a run without iterations.
func (t *Trainer) finalEvaluation(ctx context.Context, mw *metricsWriter, res *Result, haveBefore bool) error {
	t0 := t.now()
	ev, err := t.evaluateKeep(ctx, "final eval", "final")
	if err != nil {
		return err
	}
	res.TimeEval += t.now().Sub(t0)
	res.After = ev
	if !haveBefore && t.Cfg.Run.Iterations == 0 {
		res.Before = ev
	}
	return mw.Write(finalRecord(t.Cfg.Run.Iterations, ev, t.now().Sub(t0).Seconds()))
}

// copyBaseCurve copies the pretraining curve of the base policy the run
// starts from (BaseCurve, if it exists) into the run directory, for the
// report.
func (t *Trainer) copyBaseCurve() error {
	if t.BaseCurve == "" {
		return nil
	}
	b, err := os.ReadFile(t.BaseCurve)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("base policy curve: %w", err)
	}
	return writeAtomic(filepath.Join(t.Cfg.Run.Dir, filepath.Base(t.BaseCurve)), b)
}

// Every seed of a run derives from (run seed, purpose, indices) through
// splitmix.Chain.
const (
	purposeTask = iota + 1
	purposeSample
	purposeShuffle
	purposeEval
	purposeSFT
)

// trainSeeds returns the task seeds and sampling seeds of iteration it:
// Episodes/GroupSize tasks drawn from the training range, GroupSize
// rollouts of each.
func (t *Trainer) trainSeeds(it int) (tasks, samples []int64) {
	cfg := t.Cfg
	span := cfg.Seeds.TestSeedStart - cfg.Seeds.TrainSeedStart
	g := cfg.RL.GroupSize
	for j := 0; j < cfg.Run.Episodes; j++ {
		task := cfg.Seeds.TrainSeedStart + splitmix.Chain(cfg.Seed, purposeTask, int64(it), int64(j/g))%span
		tasks = append(tasks, task)
		samples = append(samples, splitmix.Chain(cfg.Seed, purposeSample, int64(it), int64(j)))
	}
	return tasks, samples
}

// Evaluate runs the held-out seeds with compaction and in a single window,
// at the evaluation temperature, and returns pass@1 for both.
func (t *Trainer) Evaluate(ctx context.Context, label string) (EvalResult, error) {
	return t.EvaluateWith(ctx, t.Policy.Sampler(), label)
}

// evaluateKeep is Evaluate that also keeps, when the trainer can
// transcribe, the first held-out episode (in seed order) that compacted
// as RUN_DIR/transcripts/NAME.txt.
func (t *Trainer) evaluateKeep(ctx context.Context, label, name string) (EvalResult, error) {
	var keep func([]episode.Episode) error
	if t.Transcribe != nil {
		keep = func(eps []episode.Episode) error {
			switch name {
			case fmt.Sprintf("eval-%06d", 0):
				t.keepFailures(eps)
			case "final":
				if err := t.keepPair(eps); err != nil {
					return err
				}
			}
			return t.keepTranscript(eps, name)
		}
	}
	ev, err := t.evaluate(ctx, t.Policy.Sampler(), label, keep)
	if err != nil {
		return ev, err
	}
	return ev, WriteOutcomes(filepath.Join(t.Cfg.Run.Dir, OutcomesDir, name+".json"), ev)
}

// keepTranscript writes the transcript of the first episode of eps that
// compacted (else the first) to RUN_DIR/transcripts/NAME.txt.
func (t *Trainer) keepTranscript(eps []episode.Episode, name string) error {
	if len(eps) == 0 {
		return nil
	}
	pick := &eps[0]
	for i := range eps {
		if eps[i].Metrics[agent.MetricCompactions] > 0 {
			pick = &eps[i]
			break
		}
	}
	dir := filepath.Join(t.Cfg.Run.Dir, TranscriptDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("transcript %s: %w", name, err)
	}
	if err := writeAtomic(filepath.Join(dir, name+".txt"), []byte(t.Transcribe(pick))); err != nil {
		return fmt.Errorf("transcript %s: %w", name, err)
	}
	return nil
}

// TranscriptDir is where a run directory keeps held-out transcripts.
const TranscriptDir = "transcripts"

// The before/after pair of a run, in TranscriptDir: one task on which the
// policy before RL (iteration 0's evaluation) failed and the final policy
// succeeded, played with the same sampling seed.
const (
	PairBefore = "pair-before.txt"
	PairAfter  = "pair-after.txt"
)

// keepFailures keeps the transcripts of the failed episodes of iteration
// 0's evaluation for keepPair.
func (t *Trainer) keepFailures(eps []episode.Episode) {
	t.failedBefore = map[int]string{}
	for i := range eps {
		if eps[i].Status.Scored() && !eps[i].Succeeded() {
			t.failedBefore[i] = t.Transcribe(&eps[i])
		}
	}
}

// keepPair writes the before/after pair: the first task (in evaluation
// order) that failed before RL and succeeds now, preferring one whose
// episode compacted. Without iteration 0's evaluation in this process (no
// eval_every, or a resumed run), or without such a task, it writes
// nothing.
func (t *Trainer) keepPair(eps []episode.Episode) error {
	pick := -1
	for i := range eps {
		if _, failed := t.failedBefore[i]; !failed || !eps[i].Succeeded() {
			continue
		}
		if pick < 0 {
			pick = i
		}
		if eps[i].Metrics[agent.MetricCompactions] > 0 {
			pick = i
			break
		}
	}
	if pick < 0 {
		return nil
	}
	dir := filepath.Join(t.Cfg.Run.Dir, TranscriptDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("transcript pair: %w", err)
	}
	head := fmt.Sprintf("Task seed %d (%s range), evaluation episode %d, the same sampling seed before and after RL.\n",
		t.Cfg.EvalSeedStart()+int64(pick), t.Cfg.EvalRangeName(), pick)
	for _, f := range []struct{ name, what, body string }{
		{PairBefore, "Before RL: failed.", t.failedBefore[pick]},
		{PairAfter, fmt.Sprintf("After %d RL iterations: succeeded.", t.Cfg.Run.Iterations), t.Transcribe(&eps[pick])},
	} {
		if err := writeAtomic(filepath.Join(dir, f.name), []byte(head+f.what+"\n\n"+f.body)); err != nil {
			return fmt.Errorf("transcript pair: %w", err)
		}
	}
	return nil
}

// EvaluateWith is Evaluate with the episodes sampled from smp instead of
// the policy (the suite's scripted expert, for a reference).
func (t *Trainer) EvaluateWith(ctx context.Context, smp infer.Sampler, label string) (EvalResult, error) {
	return t.evaluate(ctx, smp, label, nil)
}

// evaluate runs the held-out seeds with compaction and in a single window;
// keep, if set, receives the episodes played with compaction.
func (t *Trainer) evaluate(ctx context.Context, smp infer.Sampler, label string, keep func([]episode.Episode) error) (EvalResult, error) {
	cfg := t.Cfg
	n := cfg.Run.EvalEpisodes
	ev := EvalResult{Episodes: n, SummaryQuality: math.NaN(), PassCompacted: math.NaN(), Reward: math.NaN()}
	if n == 0 {
		return ev, nil
	}
	ev.Range, ev.FirstSeed = cfg.EvalRangeName(), cfg.EvalSeedStart()
	seeds := make([]int64, n)
	samples := make([]int64, n)
	for j := range seeds {
		seeds[j] = ev.FirstSeed + int64(j)
		samples[j] = splitmix.Chain(cfg.Seed, purposeEval, int64(j))
	}
	ev.Outcomes = make([]Outcome, n)
	for j := range ev.Outcomes {
		ev.Outcomes[j].TaskSeed = seeds[j]
	}
	for _, single := range []bool{false, true} {
		name := label + " (compaction)"
		if single {
			name = label + " (single window)"
		}
		bar := progress.New(t.Progress, name, n)
		eps, err := t.Collector.Collect(ctx, Rollouts{
			Sampler: smp, Seeds: seeds, SampleSeeds: samples,
			Temperature: cfg.Agent.EvalTemperature, NoCompaction: single, Progress: bar.Set,
		})
		bar.Done()
		if err != nil {
			return ev, fmt.Errorf("%s: %w", name, err)
		}
		if !single && keep != nil {
			if err := keep(eps); err != nil {
				return ev, err
			}
		}
		if len(eps) != n {
			return ev, fmt.Errorf("%s: %d episodes for %d tasks", name, len(eps), n)
		}
		for j := range eps {
			setOutcome(&ev.Outcomes[j], &eps[j], single)
		}
		s := summarize(eps)
		if single {
			ev.Pass1Single = s.pass
		} else {
			ev.Pass1Compact, ev.SummaryQuality, ev.Compactions, ev.PassCompacted, ev.Reward = s.pass, s.summaryQuality, s.compactions, s.passCompacted, s.reward
		}
	}
	return ev, nil
}

// setOutcome records episode e in o: the single-window fields when single,
// else the compacted ones.
func setOutcome(o *Outcome, e *episode.Episode, single bool) {
	pass := 0
	if e.Status.Scored() && e.Succeeded() {
		pass = 1
	}
	if single {
		o.SingleStatus, o.SingleScored, o.SinglePass = e.Status, e.Status.Scored(), pass
		return
	}
	o.Status, o.Scored, o.Pass, o.Reward = e.Status, e.Status.Scored(), pass, e.Reward
	o.Compactions = e.Metrics[agent.MetricCompactions]
	if q, ok := e.Metrics[agent.MetricSummaryQuality]; ok && !math.IsNaN(q) {
		o.SummaryQuality = &q
	}
}

type epSummary struct {
	n, infra, overlong            int
	reward, pass                  float64
	compactions, turns            float64
	summaryQuality, summaryTokens float64
	passCompacted                 float64
	sampledTokens                 int
}

func nanMean(sum float64, n int) float64 {
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// summarize computes episode-level means. Infrastructure failures are
// excluded from reward and pass@1 (never scored 0) but counted.
func summarize(eps []episode.Episode) epSummary {
	var s epSummary
	var sums epSums
	for i := range eps {
		e := &eps[i]
		s.n++
		s.sampledTokens += sums.addSegments(e)
		if !e.Status.Scored() {
			s.infra++
			continue
		}
		if e.Status == episode.StatusOverlong {
			s.overlong++
		}
		sums.addScored(e)
	}
	n := sums.scored
	s.reward, s.pass = nanMean(sums.reward, n), nanMean(sums.pass, n)
	s.compactions, s.turns = nanMean(sums.compactions, n), nanMean(sums.turns, n)
	s.summaryQuality = nanMean(sums.quality, sums.withQuality)
	s.summaryTokens = nanMean(sums.summaryLen, sums.summaries)
	s.passCompacted = nanMean(float64(sums.passCompacted), sums.compacted)
	return s
}

// epSums are the sums and counts that summarize's means divide.
type epSums struct {
	scored, withQuality, summaries, compacted, passCompacted int
	reward, pass, compactions, turns, quality, summaryLen    float64
}

// addSegments adds the summaries of episode e (every episode, scored or
// not) and returns its sampled tokens (loss mask 1).
func (s *epSums) addSegments(e *episode.Episode) (sampled int) {
	for j := range e.Segments {
		seg := &e.Segments[j]
		for _, m := range seg.LossMask {
			sampled += m
		}
		if seg.Kind == episode.KindSummary {
			s.summaryLen += float64(summaryLen(seg.LossMask))
			s.summaries++
		}
	}
	return sampled
}

// addScored adds a scored episode's reward, success, compactions, turns
// and summary quality.
func (s *epSums) addScored(e *episode.Episode) {
	s.scored++
	s.reward += e.Reward
	p := 0.0
	if e.Succeeded() { // the project's one definition of success
		p = 1
	}
	s.pass += p
	c := e.Metrics[agent.MetricCompactions]
	s.compactions += c
	if c > 0 {
		s.compacted++
		s.passCompacted += int(p)
	}
	s.turns += e.Metrics[agent.MetricTurns]
	if q, ok := e.Metrics[agent.MetricSummaryQuality]; ok {
		s.quality += q
		s.withQuality++
	}
}

// summaryLen is the length of the last run of mask-1 tokens: the summary,
// the last policy output of a summary segment.
func summaryLen(mask []int) int {
	n := 0
	i := len(mask) - 1
	for i >= 0 && mask[i] == 0 {
		i--
	}
	for i >= 0 && mask[i] == 1 {
		n++
		i--
	}
	return n
}

// prepare applies the run's masks in place: infrastructure failures always,
// overlong episodes when MaskOverlong, and summary tokens when summary
// training is off. It returns the trainable items, or an error for an
// episode whose summaries were replaced (episode.MetaSummaryOverride).
func (t *Trainer) prepare(eps []episode.Episode) ([]*item, error) {
	var items []*item
	for ei := range eps {
		e := &eps[ei]
		if o, ok := e.Meta[episode.MetaSummaryOverride]; ok {
			return nil, fmt.Errorf("episode %s: its summaries were replaced at evaluation (%s %q), not written by the policy: not training data", e.ID, episode.MetaSummaryOverride, o)
		}
		masked := !e.Status.Scored() || (e.Status == episode.StatusOverlong && t.Cfg.RL.MaskOverlong)
		for si := range e.Segments {
			seg := &e.Segments[si]
			if masked {
				seg.Trainable = false
			}
			if !t.Cfg.RL.SummaryTraining && seg.Kind == episode.KindSummary {
				seg.LossMask = append([]int(nil), seg.LossMask...)
				i := len(seg.LossMask) - 1
				for i >= 0 && seg.LossMask[i] == 0 {
					i--
				}
				for i >= 0 && seg.LossMask[i] == 1 {
					seg.LossMask[i] = 0
					i--
				}
			}
		}
		for si := range e.Segments {
			seg := &e.Segments[si]
			if !seg.Trainable || seg.NumOptimised() == 0 {
				continue
			}
			if len(seg.Logprobs) != len(seg.ResponseIDs) {
				return nil, fmt.Errorf("episode %s segment %d: %d sampler log-probs for %d response tokens", e.ID, si, len(seg.Logprobs), len(seg.ResponseIDs))
			}
			items = append(items, &item{ep: ei, seg: si, seq: Sequence{Prompt: seg.PromptIDs, Response: seg.ResponseIDs}})
		}
	}
	return items, nil
}

// forEachMicro runs Forward (and, with fn, Backward of fn's dL/d(output))
// over items in micro-batches of Cfg.RL.MicroBatch segments. It returns the
// number of tokens processed.
func (t *Trainer) forEachMicro(ctx context.Context, m Model, items []*item, grad bool, fn func(it *item, out Output) ([]float64, error)) (int, error) {
	mb := t.Cfg.RL.MicroBatch
	tokens := 0
	for lo := 0; lo < len(items); lo += mb {
		hi := min(lo+mb, len(items))
		seqs := make([]Sequence, hi-lo)
		for i, it := range items[lo:hi] {
			seqs[i] = it.seq
			tokens += len(it.seq.Prompt) + len(it.seq.Response)
		}
		outs, err := m.Forward(ctx, seqs, grad)
		if err != nil {
			return tokens, err
		}
		if len(outs) != len(seqs) {
			return tokens, fmt.Errorf("forward returned %d outputs for %d sequences", len(outs), len(seqs))
		}
		douts := make([][]float64, len(seqs))
		for i, it := range items[lo:hi] {
			if douts[i], err = fn(it, outs[i]); err != nil {
				return tokens, err
			}
		}
		if grad {
			if err := m.Backward(ctx, douts); err != nil {
				return tokens, err
			}
		}
	}
	return tokens, nil
}

// scoreValues fills every trainable segment's Values from the critic.
func (t *Trainer) scoreValues(ctx context.Context, eps []episode.Episode, items []*item) (int, error) {
	return t.forEachMicro(ctx, t.critic, items, false, func(it *item, out Output) ([]float64, error) {
		if len(out.Values) != len(it.seq.Response) {
			return nil, fmt.Errorf("critic returned %d values for %d response tokens", len(out.Values), len(it.seq.Response))
		}
		eps[it.ep].Segments[it.seg].Values = out.Values
		return nil, nil
	})
}

// lr is the schedule: linear warm-up over WarmupSteps, then constant.
func lr(base float64, warmup, step int) float64 {
	if warmup > 0 && step < warmup {
		return base * float64(step+1) / float64(warmup)
	}
	return base
}

// shuffled returns a permutation of items fixed by (seed, iteration, epoch).
func shuffled(items []*item, seed int64, it, epoch int) []*item {
	out := append([]*item(nil), items...)
	r := rand.New(rand.NewPCG(uint64(splitmix.Chain(seed, purposeShuffle, int64(it), int64(epoch))), 0))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// chunks splits items into k nearly equal consecutive parts (fewer if there
// are fewer items).
func chunks(items []*item, k int) [][]*item {
	k = min(k, len(items))
	var out [][]*item
	for i := 0; i < k; i++ {
		lo, hi := i*len(items)/k, (i+1)*len(items)/k
		out = append(out, items[lo:hi])
	}
	return out
}

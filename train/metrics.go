package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/compactrl/compactrl/tensorboard"
)

// Metrics is one line of RUN_DIR/metrics.jsonl: one RL iteration. Means are
// over the iteration's training rollouts unless named eval_*; the eval_*
// fields are present only on iterations that evaluated (before the
// iteration's update) and on the final record (iteration = Iterations,
// evaluation only). NaN values (nothing to average) are left out.
type Metrics struct {
	Iteration int `json:"iteration"`

	Episodes      int     `json:"episodes,omitempty"`
	Reward        float64 `json:"reward"`
	Pass          float64 `json:"pass"` // fraction of training rollouts that passed
	Compactions   float64 `json:"compactions"`
	Turns         float64 `json:"turns"`
	SummaryTokens float64 `json:"summary_tokens"`
	SummaryQual   float64 `json:"summary_quality"`
	Overlong      float64 `json:"overlong_frac"`
	InfraErrors   int     `json:"infra_errors"`

	Segments        int     `json:"segments"`         // trainable segments after masking
	TokensOptimised int     `json:"tokens_optimised"` // |M| of the iteration
	PolicyLoss      float64 `json:"policy_loss"`
	ClipFrac        float64 `json:"clip_frac"`
	ApproxKL        float64 `json:"approx_kl"` // mean of (ρ−1) − log ρ
	Entropy         float64 `json:"entropy"`
	GradNorm        float64 `json:"grad_norm"`
	ValueLoss       float64 `json:"value_loss"`
	CriticGradNorm  float64 `json:"critic_grad_norm"`
	ValueWarmupLoss float64 `json:"value_warmup_loss"` // last critic warm-up step's loss (first iteration only)
	// LogprobMaxDiff is max |log π_trainer − log π_sampler| over the
	// iteration's first optimiser step, before any update: 0 up to float
	// rounding when the sampler serves the trainer's weights, exactly 0
	// with the built-in model and engine.
	LogprobMaxDiff float64 `json:"logprob_max_abs_diff"`
	Advantage      float64 `json:"advantage_mean"`
	// How credit reaches the segments of the iteration's multi-segment
	// episodes (rl.Credit, after the advantages): CreditEpisodes of them;
	// the mean λ used; the factor (γλ)^{N>first} cross-gae gives the first
	// segment; mean |Â| on the first and the last segment's tokens; the
	// critic's mean |V − γ^{N>i} R| there. Left out when nothing to average.
	CreditEpisodes    int      `json:"credit_episodes"`
	LambdaMean        *float64 `json:"lambda_mean,omitempty"`
	FirstSegmentScale *float64 `json:"first_segment_scale,omitempty"`
	AdvAbsFirst       *float64 `json:"adv_abs_first_segment,omitempty"`
	AdvAbsLast        *float64 `json:"adv_abs_last_segment,omitempty"`
	ValueErrFirst     *float64 `json:"value_err_first_segment,omitempty"`
	ValueErrLast      *float64 `json:"value_err_last_segment,omitempty"`
	ValueJump         *float64 `json:"value_jump_at_boundary,omitempty"` // mean |V after − V before| a compaction
	LR                float64  `json:"lr"`

	RolloutTokensPerS float64 `json:"rollout_tokens_per_s"`
	TrainTokensPerS   float64 `json:"train_tokens_per_s"`
	TimeRolloutS      float64 `json:"time_rollout_s"`
	TimeTrainS        float64 `json:"time_train_s"`
	TimeEvalS         float64 `json:"time_eval_s"`

	EvalPass1Compact   *float64 `json:"eval_pass1_compact,omitempty"`
	EvalPass1Single    *float64 `json:"eval_pass1_single,omitempty"`
	EvalSummaryQuality *float64 `json:"eval_summary_quality,omitempty"`
	EvalCompactions    *float64 `json:"eval_compactions,omitempty"`
	EvalPassCompacted  *float64 `json:"eval_pass_compacted,omitempty"`
	EvalReward         *float64 `json:"eval_reward,omitempty"`
	EvalEpisodes       *float64 `json:"eval_episodes,omitempty"` // held-out episodes per mode
}

func fp(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// setRollouts records the training rollouts' means s, collected in tRoll.
func (m *Metrics) setRollouts(s epSummary, tRoll time.Duration) {
	m.Episodes, m.Reward, m.Pass, m.Compactions, m.Turns = s.n, s.reward, s.pass, s.compactions, s.turns
	m.SummaryTokens, m.SummaryQual, m.InfraErrors = s.summaryTokens, s.summaryQuality, s.infra
	m.Overlong = float64(s.overlong) / float64(max(1, s.n))
	m.TimeRolloutS = tRoll.Seconds()
	m.RolloutTokensPerS = float64(s.sampledTokens) / math.Max(tRoll.Seconds(), 1e-9)
}

func (m *Metrics) setEval(ev EvalResult) {
	m.EvalPass1Compact = fp(ev.Pass1Compact)
	m.EvalPass1Single = fp(ev.Pass1Single)
	m.EvalSummaryQuality = fp(ev.SummaryQuality)
	m.EvalCompactions = fp(ev.Compactions)
	m.EvalPassCompacted = fp(ev.PassCompacted)
	m.EvalReward = fp(ev.Reward)
	m.EvalEpisodes = fp(float64(ev.Episodes))
}

// MarshalJSON writes the fields in declaration order, leaving out
// non-finite numbers (JSON has none, and a missing field is a gap in a
// plot, not a zero) and nil eval fields.
func (m Metrics) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	rv := reflect.ValueOf(m)
	rt := rv.Type()
	first := true
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		f := rv.Field(i)
		var x any
		switch f.Kind() {
		case reflect.Pointer:
			if f.IsNil() {
				continue
			}
			x = f.Elem().Interface()
		default:
			x = f.Interface()
		}
		if v, ok := x.(float64); ok && (math.IsNaN(v) || math.IsInf(v, 0)) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(name)
		v, err := json.Marshal(x)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Line is a one-line human summary for logs.
func (m Metrics) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "iter %3d  reward %.3f  pass %.3f  compactions %.2f  summary_q %s  clip %.3f  kl %.4f  vloss %s  H %.3f  roll %.1fs train %.1fs",
		m.Iteration, m.Reward, m.Pass, m.Compactions, FormatMetric(m.SummaryQual, "%.3f"), m.ClipFrac, m.ApproxKL, FormatMetric(m.ValueLoss, "%.4f"), m.Entropy, m.TimeRolloutS, m.TimeTrainS)
	if m.EvalPass1Compact != nil {
		fmt.Fprintf(&b, "  eval pass@1 %.3f", *m.EvalPass1Compact)
		if m.EvalPass1Single != nil {
			fmt.Fprintf(&b, " (single %.3f)", *m.EvalPass1Single)
		}
	}
	return b.String()
}

// FormatMetric formats v with format, or a dash as wide as format makes a
// number when v is NaN (nothing to average: no compaction, no critic).
func FormatMetric(v float64, format string) string {
	if !math.IsNaN(v) {
		return fmt.Sprintf(format, v)
	}
	w := len(fmt.Sprintf(format, 0.0))
	right := (w - 1) / 2
	return strings.Repeat(" ", w-1-right) + "-" + strings.Repeat(" ", right)
}

type metricsWriter struct {
	f  *os.File
	tb *tensorboard.Writer // nil: no TensorBoard events (pretraining curves)
}

// withTensorBoard makes w also append every record's numbers to a
// TensorBoard event file in dir (tensorboard.Writer; tags by scalarTags).
func (w *metricsWriter) withTensorBoard(dir string, now time.Time) error {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	tb, err := tensorboard.Create(dir, now, host)
	if err != nil {
		return err
	}
	w.tb = tb
	return nil
}

// scalarTags turns a metrics record (its JSON object) into TensorBoard
// scalars at step = its "iteration": eval_X becomes eval/X, time_X time/X,
// every other number train/X; non-numbers are left out.
func scalarTags(rec []byte) (int64, map[string]float64, error) {
	var m map[string]any
	if err := json.Unmarshal(rec, &m); err != nil {
		return 0, nil, err
	}
	it, ok := m["iteration"].(float64)
	if !ok {
		return 0, nil, fmt.Errorf("metrics record without an iteration: %.80s", rec)
	}
	out := map[string]float64{}
	for k, v := range m {
		x, ok := v.(float64)
		if !ok || k == "iteration" {
			continue
		}
		switch {
		case strings.HasPrefix(k, "eval_"):
			out["eval/"+strings.TrimPrefix(k, "eval_")] = x
		case strings.HasPrefix(k, "time_"):
			out["time/"+strings.TrimPrefix(k, "time_")] = x
		default:
			out["train/"+k] = x
		}
	}
	return int64(it), out, nil
}

func openMetrics(path string) (*metricsWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", path, err)
	}
	return &metricsWriter{f: f}, nil
}

// Write appends one record and syncs it, so a killed run loses no finished
// iteration.
func (w *metricsWriter) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("metrics %s: %w", w.f.Name(), err)
	}
	if _, err := w.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("metrics %s: %w", w.f.Name(), err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("metrics %s: %w", w.f.Name(), err)
	}
	if w.tb == nil {
		return nil
	}
	step, vals, err := scalarTags(b)
	if err != nil {
		return fmt.Errorf("metrics %s: %w", w.f.Name(), err)
	}
	return w.tb.Scalars(step, time.Now(), vals)
}

func (w *metricsWriter) Close() error {
	err := w.f.Close()
	if w.tb != nil {
		err = errors.Join(err, w.tb.Close())
	}
	return err
}

// truncateMetrics keeps the records of iterations below keep (all of them
// written by the run being resumed), dropping any later or partial line.
func (t *Trainer) truncateMetrics(keep int) error {
	path := filepath.Join(t.Cfg.Run.Dir, "metrics.jsonl")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("metrics %s: %w", path, err)
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var rec struct {
			Iteration *int `json:"iteration"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Iteration == nil {
			continue // a line cut by the kill
		}
		if *rec.Iteration < keep {
			out.Write(sc.Bytes())
			out.WriteByte('\n')
		}
	}
	return writeAtomic(path, out.Bytes())
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// recordedBefore reads the evaluation of iteration 0 from its outcomes
// file, else (a run from before outcomes were kept) from metrics.jsonl
// (for a resumed run, whose first evaluation happened before the restart).
func (t *Trainer) recordedBefore() EvalResult {
	if ev, err := ReadOutcomes(filepath.Join(t.Cfg.Run.Dir, OutcomesDir, fmt.Sprintf("eval-%06d.json", 0))); err == nil {
		return ev
	}
	// Episodes stays 0 (not evaluated) unless a record of the evaluation
	// is found: run.eval_every 0 skips the one before RL.
	ev := EvalResult{Range: t.Cfg.EvalRangeName(), FirstSeed: t.Cfg.EvalSeedStart(), Pass1Compact: math.NaN(), Pass1Single: math.NaN(), SummaryQuality: math.NaN(), Compactions: math.NaN(), PassCompacted: math.NaN(), Reward: math.NaN()}
	b, err := os.ReadFile(filepath.Join(t.Cfg.Run.Dir, "metrics.jsonl"))
	if err != nil {
		return ev
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var m Metrics
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Iteration != 0 || m.EvalPass1Compact == nil {
			continue
		}
		ev.Episodes = t.Cfg.Run.EvalEpisodes
		for _, f := range []struct {
			dst *float64
			src *float64
		}{{&ev.Pass1Compact, m.EvalPass1Compact}, {&ev.Pass1Single, m.EvalPass1Single}, {&ev.SummaryQuality, m.EvalSummaryQuality}, {&ev.Compactions, m.EvalCompactions}, {&ev.PassCompacted, m.EvalPassCompacted}, {&ev.Reward, m.EvalReward}} {
			if f.src != nil {
				*f.dst = *f.src
			}
		}
		break
	}
	return ev
}

// finalRecord is the last line of metrics.jsonl: the evaluation after the
// last iteration, with no training fields (there was no rollout).
func finalRecord(iteration int, ev EvalResult, evalSeconds float64) map[string]any {
	m := Metrics{}
	m.setEval(ev)
	rec := map[string]any{"iteration": iteration, "time_eval_s": evalSeconds}
	for k, v := range map[string]*float64{
		"eval_pass1_compact": m.EvalPass1Compact, "eval_pass1_single": m.EvalPass1Single,
		"eval_summary_quality": m.EvalSummaryQuality, "eval_compactions": m.EvalCompactions,
		"eval_pass_compacted": m.EvalPassCompacted, "eval_reward": m.EvalReward,
	} {
		if v != nil {
			rec[k] = *v
		}
	}
	return rec
}

// evalJSON is EvalResult with its NaN-able fields as pointers (JSON has no
// NaN: an undefined metric is null).
type evalJSON struct {
	Episodes       int      `json:"episodes"`
	Pass1Compact   float64  `json:"pass1_compact"`
	Pass1Single    float64  `json:"pass1_single"`
	SummaryQuality *float64 `json:"summary_quality"`
	Compactions    float64  `json:"compactions"`
	PassCompacted  *float64 `json:"pass_compacted"`
	Reward         *float64 `json:"reward"`
	Range          string   `json:"range,omitempty"`
	FirstSeed      int64    `json:"first_seed,omitempty"`
}

func nanPtr(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

func ptrNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// MarshalJSON writes undefined (NaN) metrics as null.
func (e EvalResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(evalJSON{e.Episodes, e.Pass1Compact, e.Pass1Single, nanPtr(e.SummaryQuality), e.Compactions, nanPtr(e.PassCompacted), nanPtr(e.Reward), e.Range, e.FirstSeed})
}

// UnmarshalJSON reads null metrics as NaN.
func (e *EvalResult) UnmarshalJSON(b []byte) error {
	var j evalJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = EvalResult{Episodes: j.Episodes, Pass1Compact: j.Pass1Compact, Pass1Single: j.Pass1Single, SummaryQuality: ptrNaN(j.SummaryQuality),
		Compactions: j.Compactions, PassCompacted: ptrNaN(j.PassCompacted), Reward: ptrNaN(j.Reward), Range: j.Range, FirstSeed: j.FirstSeed}
	return nil
}

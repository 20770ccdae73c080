package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/internal/progress"
	"github.com/compactrl/compactrl/internal/splitmix"
	"github.com/compactrl/compactrl/rl"
)

// SFTRecord is one line of RUN_DIR/sft.jsonl: one warm-start step.
type SFTRecord struct {
	Phase    string  `json:"phase"`             // "copy" (induction pretraining), ExtraExamples.Phase, or "sft"
	Attempt  int     `json:"attempt,omitempty"` // restart of copy and the extra phase (ExtraExamples.Restarts), from 0
	Step     int     `json:"step"`
	Loss     float64 `json:"loss"` // mean −log π over the step's optimised tokens
	Tokens   int     `json:"tokens"`
	GradNorm float64 `json:"grad_norm"`
	LR       float64 `json:"lr"`
	// MixedLoss is the mean −log π over the ExtraExamples' sequences mixed
	// into an SFT step; absent without them. Its key is the one the files
	// have always had (the vault recipe's extra sequences are its recall
	// sequences), which package report and recipe's model card read.
	MixedLoss *float64 `json:"recall_loss,omitempty"`
}

// ReadSFTCurve reads a warm-start curve (RUN_DIR/sft.jsonl, a base
// policy's pretrain.jsonl): one SFTRecord a line. A bad line is an error
// naming it.
func ReadSFTCurve(r io.Reader) ([]SFTRecord, error) {
	dec := json.NewDecoder(r)
	var recs []SFTRecord
	for line := 1; ; line++ {
		var rec SFTRecord
		if err := dec.Decode(&rec); errors.Is(err, io.EOF) {
			return recs, nil
		} else if err != nil {
			return recs, fmt.Errorf("record %d: %w", line, err)
		}
		recs = append(recs, rec)
	}
}

// sftItems are the optimised tokens of the demonstrations: every mask-1
// token of every trainable segment (the expert's summaries included), with
// Adv 1 so that the step loss is the weighted negative log-likelihood.
func sftItems(demos []episode.Episode, lm bool) []*item {
	if lm {
		return lmItems(demos)
	}
	var items []*item
	for ei := range demos {
		e := &demos[ei]
		if !e.Status.Scored() {
			continue
		}
		for si := range e.Segments {
			seg := &e.Segments[si]
			if !seg.Trainable || seg.NumOptimised() == 0 {
				continue
			}
			it := &item{ep: ei, seg: si, seq: Sequence{Prompt: seg.PromptIDs, Response: seg.ResponseIDs}}
			for p, mk := range seg.LossMask {
				if mk == 1 {
					it.toks = append(it.toks, rl.Token{Ep: ei, Seg: si, Pos: p})
				}
			}
			items = append(items, it)
		}
	}
	return items
}

// warmStart is the supervised warm start on the expert's demonstrations,
// in up to three phases, each a run of optimiser steps of
//
//	L = −(1/|M|) Σ_{t∈M} log π_θ(t)
//
// over a batch's target tokens M (token-mean over the batch, fixed before
// micro-batching; sftPhase): copy pretraining, the ExtraExamples' phase, then
// imitation of the demonstrations. Every draw comes from generators seeded
// by (Seed, purposeSFT, phase). The weights are published at the end.
func (t *Trainer) warmStart(ctx context.Context) error {
	defer func() { _ = t.Policy.Publish(ctx) }()
	sft := t.Cfg.SFT
	if t.Expert == nil || sft.Steps+sft.CopySteps+t.extraSteps() == 0 {
		return nil
	}
	demos, err := t.demonstrations(ctx)
	if err != nil {
		return err
	}
	items := sftItems(demos, sft.LMLoss)
	if len(items) == 0 {
		return fmt.Errorf("warm start: the %d demonstrations have no optimised tokens", len(demos))
	}
	w, err := t.openCurve()
	if err != nil {
		return err
	}
	defer w.Close()
	// Copy pretraining and the extra sequences draw from the same text.
	var corpus [][]int
	if sft.CopySteps+t.extraSteps()+t.extraMix() > 0 {
		corpus = copyCorpus(demos)
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			ri, ok := t.Policy.(Reinitializer)
			if !ok {
				return fmt.Errorf("warm start: %s phase restarts need a policy that can be reinitialised", t.Extra.Phase)
			}
			if err := ri.Reinit(splitmix.Chain(t.Cfg.Seed, purposeSFT, -5, int64(attempt))); err != nil {
				return fmt.Errorf("warm start: restart %d: %w", attempt, err)
			}
		}
		if err := t.copyPhase(ctx, w, corpus, attempt); err != nil {
			return err
		}
		loss, err := t.extraPhase(ctx, w, corpus, attempt)
		if err != nil {
			return err
		}
		x := t.Extra
		if x == nil || x.Restarts == 0 || loss <= x.Target || attempt == x.Restarts {
			break
		}
		if t.Log != nil {
			fmt.Fprintf(t.Log, "warm start: %s loss %.4g above its target %g after attempt %d; starting again from fresh weights\n", x.Phase, loss, x.Target, attempt)
		}
	}
	return t.imitationPhase(ctx, w, items, corpus)
}

// attemptRand is sftRand for attempt a of a restartable phase: attempt 0
// draws exactly what a warm start without restarts draws.
func (t *Trainer) attemptRand(stream int64, a int) *rand.Rand {
	if a == 0 {
		return t.sftRand(stream)
	}
	return t.sftRand(stream, -6, int64(a))
}

// demonstrations are the expert's episodes on SFT.Episodes training tasks
// drawn from the seed.
func (t *Trainer) demonstrations(ctx context.Context) ([]episode.Episode, error) {
	cfg := t.Cfg
	span := cfg.Seeds.TestSeedStart - cfg.Seeds.TrainSeedStart
	seeds := make([]int64, cfg.SFT.Episodes)
	samples := make([]int64, len(seeds))
	for j := range seeds {
		seeds[j] = cfg.Seeds.TrainSeedStart + splitmix.Chain(cfg.Seed, purposeSFT, int64(j))%span
		samples[j] = splitmix.Chain(cfg.Seed, purposeSFT, int64(j), 1)
	}
	demos, err := t.Expert.Demonstrations(ctx, seeds, samples, cfg.SFT.ExpertP)
	if err != nil {
		return nil, fmt.Errorf("warm start demonstrations: %w", err)
	}
	return demos, nil
}

// openCurve starts RUN_DIR/sft.jsonl afresh. A warm start always runs
// whole (it has no checkpoint of its own): a restarted one rewrites its
// curve rather than appending to the killed one's.
func (t *Trainer) openCurve() (*metricsWriter, error) {
	curve := filepath.Join(t.Cfg.Run.Dir, "sft.jsonl")
	if err := os.Remove(curve); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("warm start: %w", err)
	}
	return openMetrics(curve)
}

// sftRand is the generator of one warm-start draw, fixed by the seed and
// the draw's indices.
func (t *Trainer) sftRand(idx ...int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(splitmix.Chain(append([]int64{t.Cfg.Seed, purposeSFT}, idx...)...)), 0))
}

// CopyBatchSize is the number of sequences of a copy step: CopyBatch,
// else BatchSize.
func (c SFTConfig) CopyBatchSize() int {
	if c.CopyBatch == 0 {
		return c.BatchSize
	}
	return c.CopyBatch
}

// extraSteps and extraMix are the ExtraExamples' steps of their own and
// sequences a mixed imitation batch (0 without them).
func (t *Trainer) extraSteps() int {
	if t.Extra == nil {
		return 0
	}
	return t.Extra.Steps
}

func (t *Trainer) extraMix() int {
	if t.Extra == nil {
		return 0
	}
	return t.Extra.Mix
}

// copyPhase is CopySteps of induction pretraining (copyBatch); the gap
// grows over the first 60% of the steps: induction forms on near copies
// and then stretches across the window.
func (t *Trainer) copyPhase(ctx context.Context, w *metricsWriter, corpus [][]int, attempt int) error {
	sft := t.Cfg.SFT
	if sft.CopySteps == 0 {
		return nil
	}
	r := t.attemptRand(-2, attempt)
	step := 0
	next := func() []*item {
		reach := min(1, float64(step)/(0.6*float64(sft.CopySteps)))
		step++
		return copyBatch(corpus, sft.CopyBatchSize(), sft.CopyLen, reach, r)
	}
	_, err := t.sftPhase(ctx, w, "copy", "copy pretraining", attempt, sft.CopySteps, next)
	return err
}

// extraPhase is the ExtraExamples' Steps steps of their own, on Batch
// sequences a step, each draw told its step of the phase; it returns the
// mean loss of the phase's last 100 steps (0 without the phase).
func (t *Trainer) extraPhase(ctx context.Context, w *metricsWriter, corpus [][]int, attempt int) (float64, error) {
	x := t.Extra
	if x == nil || x.Steps == 0 {
		return 0, nil
	}
	r := t.attemptRand(-3, attempt)
	step := 0
	next := func() []*item {
		d := ExampleDraw{N: x.Batch, Step: step, Steps: x.Steps}
		step++
		return t.extraItems(corpus, d, r)
	}
	return t.sftPhase(ctx, w, x.Phase, x.Title, attempt, x.Steps, next)
}

// imitationPhase is Steps of SFT on batches of BatchSize demonstration
// segments, walking through seeded permutations of them, each batch joined
// by the ExtraExamples' Mix sequences.
func (t *Trainer) imitationPhase(ctx context.Context, w *metricsWriter, items []*item, corpus [][]int) error {
	sft := t.Cfg.SFT
	var order []*item
	epoch := 0
	var mixRand *rand.Rand
	if t.extraMix() > 0 {
		mixRand = t.sftRand(-4)
	}
	next := func() []*item {
		for len(order) < sft.BatchSize {
			p := append([]*item(nil), items...)
			r := t.sftRand(-1, int64(epoch))
			r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
			order = append(order, p...)
			epoch++
		}
		batch := order[:min(sft.BatchSize, len(items))]
		order = order[len(batch):]
		if mixRand != nil {
			batch = append(slices.Clone(batch), t.extraItems(corpus, ExampleDraw{N: t.Extra.Mix, Mixed: true}, mixRand)...)
		}
		return batch
	}
	_, err := t.sftPhase(ctx, w, "sft", "warm start (SFT)", 0, sft.Steps, next)
	return err
}

// sftPhase runs steps optimiser steps of the weighted negative
// log-likelihood (sftStep) on the batches next returns, learning rate
// SFT.LR with a linear warm-up over the first tenth of the steps, one
// SFTRecord per step. It returns the mean loss of the last 100 steps.
func (t *Trainer) sftPhase(ctx context.Context, w *metricsWriter, phase, title string, attempt, steps int, next func() []*item) (float64, error) {
	if attempt > 0 {
		title = fmt.Sprintf("%s (restart %d)", title, attempt)
	}
	bar := progress.New(t.Progress, title, steps)
	defer bar.Done()
	warm := max(1, steps/10)
	var last []float64
	for step := 0; step < steps; step++ {
		rec, err := t.sftStep(ctx, next(), lr(t.Cfg.SFT.LR, warm, step))
		if err != nil {
			return 0, fmt.Errorf("%s step %d: %w", title, step, err)
		}
		rec.Phase, rec.Step, rec.Attempt = phase, step, attempt
		if phase != "sft" {
			rec.MixedLoss = nil // only mixed-in extra sequences have a loss of their own
		}
		if err := w.Write(rec); err != nil {
			return 0, err
		}
		if last = append(last, rec.Loss); len(last) > 100 {
			last = last[1:]
		}
		bar.Set(step+1, steps)
	}
	var sum float64
	for _, l := range last {
		sum += l
	}
	return sum / float64(max(1, len(last))), nil
}

// sftStep is one optimiser step at learning rate rate of
//
//	L = −Σ_{t∈M} w_t log π_θ(t),  w_t = 1/|M| (token-mean over the batch)
//
// with the weights fixed over the whole batch before micro-batching. Its
// record has the loss, |M|, the gradient norm, the rate, and the mean
// −log π over the extra sequences' targets if the batch has any.
func (t *Trainer) sftStep(ctx context.Context, batch []*item, rate float64) (SFTRecord, error) {
	n, err := weigh(batch, rl.TokenMean, policyToks)
	if err != nil {
		return SFTRecord{}, err
	}
	var loss, extraNLL float64
	extraToks := 0
	if _, err := t.forEachMicro(ctx, t.Policy, batch, true, func(it *item, out Output) ([]float64, error) {
		if len(out.Logprobs) != len(it.seq.Response) {
			return nil, fmt.Errorf("policy returned %d log-probs for %d response tokens", len(out.Logprobs), len(it.seq.Response))
		}
		d := make([]float64, len(it.seq.Response))
		for _, tk := range it.toks {
			loss -= tk.Weight * out.Logprobs[tk.Pos]
			d[tk.Pos] = -tk.Weight
			if it.extra {
				extraNLL -= out.Logprobs[tk.Pos]
				extraToks++
			}
		}
		return d, nil
	}); err != nil {
		return SFTRecord{}, err
	}
	gn, err := t.Policy.Step(ctx, rate)
	if err != nil {
		return SFTRecord{}, err
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return SFTRecord{}, fmt.Errorf("loss %v", loss)
	}
	rec := SFTRecord{Loss: loss, Tokens: n, GradNorm: gn, LR: rate}
	if extraToks > 0 {
		v := extraNLL / float64(extraToks)
		rec.MixedLoss = &v
	}
	return rec, nil
}

// extraItems are the ExampleSource's sequences of draw d as items, the
// loss on their targets.
func (t *Trainer) extraItems(corpus [][]int, d ExampleDraw, r *rand.Rand) []*item {
	exs := t.Extra.Source.Examples(corpus, d, r)
	items := make([]*item, len(exs))
	for i, ex := range exs {
		it := &item{ep: i, seq: ex.Sequence, extra: true}
		for _, p := range ex.Targets {
			it.toks = append(it.toks, rl.Token{Ep: i, Pos: p})
		}
		items[i] = it
	}
	return items
}

// copyCorpus is the text of induction pretraining: every demonstration
// segment's prompt ⊕ response of at least 2 tokens.
func copyCorpus(demos []episode.Episode) [][]int {
	var segs [][]int
	for ei := range demos {
		for si := range demos[ei].Segments {
			if all := segmentTokens(&demos[ei].Segments[si]); len(all) >= 2 {
				segs = append(segs, all)
			}
		}
	}
	return segs
}

// copyBatch is a batch of induction pretraining: n sequences w ⊕ g ⊕ w of
// at most length tokens, w a random window of a random corpus sequence of
// 64 … length/2 tokens, g a gap of other corpus text filling a random part
// (at most the fraction reach) of the rest, the targets the second copy of
// w after its first token. The copies end up as far apart as the window
// allows, so the policy learns to copy across its whole window (a head
// that learned to copy only nearby tokens does not carry the task from the
// top of the context to a summary at its end). With initializer_range
// about 0.5/√dim, a randomly initialised policy learns from these, in a few
// hundred steps, the induction heads it needs to copy keys and values into
// summaries and answers; from the demonstrations alone, where a few tokens
// per segment are copies, it did not learn them within the demo's budget
// (docs/results.md).
func copyBatch(segs [][]int, n, length int, reach float64, r *rand.Rand) []*item {
	if len(segs) == 0 {
		return nil
	}
	window := func(l int) []int {
		all := segs[r.IntN(len(segs))]
		l = min(l, len(all))
		lo := r.IntN(len(all) - l + 1)
		return all[lo : lo+l]
	}
	batch := make([]*item, n)
	for i := range batch {
		lw := max(2, length/2)
		if lw > 64 {
			lw = 64 + r.IntN(lw-64+1)
		}
		w := window(lw)
		gap := window(r.IntN(int(reach*float64(length-2*len(w))) + 1))
		prompt := append(append(append([]int(nil), w...), gap...), w[0])
		it := &item{ep: i, seq: Sequence{Prompt: prompt, Response: append([]int(nil), w[1:]...)}}
		for p := range it.seq.Response {
			it.toks = append(it.toks, rl.Token{Ep: i, Pos: p})
		}
		batch[i] = it
	}
	return batch
}

// lmItems are the demonstrations as plain language-model data: every token
// of each segment's prompt ⊕ response after the first is a target.
func lmItems(demos []episode.Episode) []*item {
	var items []*item
	for ei := range demos {
		e := &demos[ei]
		if !e.Status.Scored() {
			continue
		}
		for si := range e.Segments {
			seg := &e.Segments[si]
			all := segmentTokens(seg)
			if len(all) < 2 {
				continue
			}
			it := &item{ep: ei, seg: si, seq: Sequence{Prompt: all[:1], Response: all[1:]}}
			for p := range it.seq.Response {
				it.toks = append(it.toks, rl.Token{Ep: ei, Seg: si, Pos: p})
			}
			items = append(items, it)
		}
	}
	return items
}

// segmentTokens returns a new slice holding a segment's prompt ⊕ response.
func segmentTokens(seg *episode.Segment) []int {
	return append(append(make([]int, 0, len(seg.PromptIDs)+len(seg.ResponseIDs)), seg.PromptIDs...), seg.ResponseIDs...)
}

package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/rl"
)

// SFTRecord is one line of RUN_DIR/sft.jsonl: one warm-start step.
type SFTRecord struct {
	Step     int     `json:"step"`
	Loss     float64 `json:"loss"` // mean −log π over the step's optimised tokens
	Tokens   int     `json:"tokens"`
	GradNorm float64 `json:"grad_norm"`
	LR       float64 `json:"lr"`
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
		if e.Status == episode.StatusInfraError {
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

// warmStart is the supervised warm start: Steps optimiser steps of
//
//	L = −(1/|M|) Σ_{t∈M} log π_θ(t)
//
// over batches of BatchSize demonstration segments (token-mean over the
// batch, fixed before micro-batching), learning rate SFT.LR with a linear
// warm-up over the first tenth of the steps. Batches walk through
// seeded permutations of the segments.
func (t *Trainer) warmStart(ctx context.Context) error {
	cfg := t.Cfg
	defer func() { _ = t.Policy.Publish(ctx) }()
	if t.Expert == nil || cfg.SFT.Steps == 0 {
		return nil
	}
	span := cfg.Suite.TestSeedStart - cfg.Suite.TrainSeedStart
	seeds := make([]int64, cfg.SFT.Episodes)
	for j := range seeds {
		seeds[j] = cfg.Suite.TrainSeedStart + mix(cfg.Seed, purposeSFT, int64(j))%span
	}
	demos, err := t.Expert.Demonstrations(ctx, seeds, cfg.SFT.ExpertP)
	if err != nil {
		return fmt.Errorf("warm start demonstrations: %w", err)
	}
	items := sftItems(demos, cfg.SFT.LMLoss)
	if len(items) == 0 {
		return fmt.Errorf("warm start: the %d demonstrations have no optimised tokens", len(demos))
	}
	w, err := openMetrics(filepath.Join(cfg.Run.Dir, "sft.jsonl"))
	if err != nil {
		return err
	}
	defer w.Close()
	bar := newBar(t.Progress, "warm start (SFT)", cfg.SFT.Steps)
	defer bar.Done()
	var order []*item
	epoch := 0
	warm := max(1, cfg.SFT.Steps/10)
	for step := 0; step < cfg.SFT.Steps; step++ {
		for len(order) < cfg.SFT.BatchSize {
			p := append([]*item(nil), items...)
			r := rand.New(rand.NewPCG(uint64(mix(cfg.Seed, purposeSFT, -1, int64(epoch))), 0))
			r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
			order = append(order, p...)
			epoch++
		}
		batch := order[:min(cfg.SFT.BatchSize, len(items))]
		order = order[len(batch):]
		n, err := weigh(batch, rl.TokenMean)
		if err != nil {
			return err
		}
		var loss float64
		if _, err := t.forEachMicro(ctx, t.Policy, batch, true, func(it *item, out Output) ([]float64, error) {
			if len(out.Logprobs) != len(it.seq.Response) {
				return nil, fmt.Errorf("policy returned %d log-probs for %d response tokens", len(out.Logprobs), len(it.seq.Response))
			}
			d := make([]float64, len(it.seq.Response))
			for _, tk := range it.toks {
				loss -= tk.Weight * out.Logprobs[tk.Pos]
				d[tk.Pos] = -tk.Weight
			}
			return d, nil
		}); err != nil {
			return fmt.Errorf("warm start step %d: %w", step, err)
		}
		rate := lr(cfg.SFT.LR, warm, step)
		gn, err := t.Policy.Step(ctx, rate)
		if err != nil {
			return fmt.Errorf("warm start step %d: %w", step, err)
		}
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return fmt.Errorf("warm start step %d: loss %v", step, loss)
		}
		if err := w.Write(SFTRecord{Step: step, Loss: loss, Tokens: n, GradNorm: gn, LR: rate}); err != nil {
			return err
		}
		bar.Set(step+1, cfg.SFT.Steps)
	}
	return nil
}

// lmItems are the demonstrations as plain language-model data: every token
// of each segment's prompt ⊕ response after the first is a target.
func lmItems(demos []episode.Episode) []*item {
	var items []*item
	for ei := range demos {
		e := &demos[ei]
		if e.Status == episode.StatusInfraError {
			continue
		}
		for si := range e.Segments {
			seg := &e.Segments[si]
			all := append(append([]int(nil), seg.PromptIDs...), seg.ResponseIDs...)
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

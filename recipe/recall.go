package recipe

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/vault"
	"github.com/compactrl/compactrl/internal/field"
	"github.com/compactrl/compactrl/train"
)

// RecallConfig is recall pretraining, the vault suite's extra warm-start
// sequences (train.ExtraExamples): demonstration windows with synthetic
// record lines spliced in, then a found line querying their facts, the
// loss on the values — the key → value lookup summaries and answers need.
// Its keys are the sft section's recall_* (Config inlines it beside
// train.SFTConfig); RecallSource turns it into the trainer's schedule.
type RecallConfig struct {
	// RecallSteps optimiser steps of recall pretraining follow copy
	// pretraining: demonstration segments with up to RecallExtra
	// synthetic record lines spliced in, then a found line querying every
	// record fact of the context, the loss on the values (0: none).
	RecallSteps int `yaml:"recall_steps"`
	RecallExtra int `yaml:"recall_extra"`
	// RecallKeys is the key pool of the synthetic record lines: the first
	// RecallKeys of the vault's 32 key words (0: the suite's pool). A
	// wider pool than the suite's gives more queries a sequence and a
	// lookup that cannot lean on a handful of memorised keys.
	RecallKeys int `yaml:"recall_keys"`
	// RecallLen is the longest recall sequence (0: sft.copy_len). Shorter
	// sequences cost less a step for the same number of queried values.
	RecallLen   int `yaml:"recall_len"`
	RecallBatch int `yaml:"recall_batch"` // sequences a recall step (0: sft.copy_batch, else sft.batch_size)
	// RecallMix recall sequences over whole windows join every SFT batch,
	// so that imitating the demonstrations does not unlearn the lookup
	// (0: none).
	RecallMix int `yaml:"recall_mix"`
	// RecallUnknown also queries keys with no record in the recall
	// context, answered "?" as a summary does (off: every query has a
	// value in the context).
	RecallUnknown bool `yaml:"recall_unknown"`
	// RecallGoal makes every recall sequence a summary's goal and found
	// lines: the goal of the demonstration the window comes from, then its
	// keys in task order, each answered with its value where the context
	// shows one (a record line, real or spliced, or an earlier found line)
	// and "?" where it does not; the loss on the values and "?" only (off:
	// the found line queries the context's record facts). It replaces
	// recall_unknown, which it cannot be combined with.
	RecallGoal bool `yaml:"recall_goal"`
	// RecallRestarts starts copy and recall pretraining over from fresh
	// weights (a new draw of the seed's stream) when recall ends with the
	// mean loss of its last 100 steps above RecallTarget, up to
	// RecallRestarts times (train.ExtraExamples); whether the lookup forms
	// in recall depends on the initialisation (docs/results.md, section 8).
	RecallRestarts int     `yaml:"recall_restarts"`
	RecallTarget   float64 `yaml:"recall_target"`
}

// maxRecallRestarts bounds sft.recall_restarts: each restart repeats the
// copy and recall phases.
const maxRecallRestarts = 16

// validate checks the recall knobs, by their YAML paths, against the
// trainer's warm start sft and the suite's key count.
func (c RecallConfig) validate(sft train.SFTConfig, suiteKeys int) error {
	keys := vault.KeyWords()
	if c.RecallKeys > keys {
		return field.Errorf("sft.recall_keys", "%d is more than the vault's %d key words", c.RecallKeys, keys)
	}
	for _, f := range []field.Int{
		{Path: "sft.recall_steps", V: c.RecallSteps, Max: train.MaxSteps}, {Path: "sft.recall_extra", V: c.RecallExtra, Max: train.MaxBatch},
		{Path: "sft.recall_keys", V: c.RecallKeys, Max: keys}, {Path: "sft.recall_len", V: c.RecallLen, Max: agent.MaxContextTokens},
		{Path: "sft.recall_batch", V: c.RecallBatch, Max: train.MaxBatch}, {Path: "sft.recall_mix", V: c.RecallMix, Max: train.MaxBatch},
	} {
		if err := f.Check(); err != nil {
			return err
		}
	}
	switch {
	case c.used() && sft.CopyLen < 2:
		return field.Errorf("sft.copy_len", "%d must be at least 2 when sft.copy_steps, sft.recall_steps or sft.recall_mix > 0", sft.CopyLen)
	case c.RecallGoal && !c.used():
		return field.Errorf("sft.recall_goal", "needs sft.recall_steps or sft.recall_mix > 0")
	case c.RecallRestarts < 0 || c.RecallRestarts > maxRecallRestarts:
		return field.Errorf("sft.recall_restarts", "%d must be in [0, %d]", c.RecallRestarts, maxRecallRestarts)
	case c.RecallGoal && c.RecallUnknown:
		return field.Errorf("sft.recall_goal", "replaces sft.recall_unknown (a goal's found line already answers \"?\" for absent keys); set only one")
	case math.IsNaN(c.RecallTarget) || math.IsInf(c.RecallTarget, 0) || c.RecallTarget < 0:
		return field.Errorf("sft.recall_target", "%v must be a finite number ≥ 0", c.RecallTarget)
	case c.RecallRestarts > 0 && (c.RecallSteps == 0 || c.RecallTarget == 0):
		return field.Errorf("sft.recall_restarts", "%d needs sft.recall_steps > 0 and a sft.recall_target > 0 to restart on", c.RecallRestarts)
	case c.RecallRestarts == 0 && c.RecallTarget != 0:
		return field.Errorf("sft.recall_target", "%v means nothing without sft.recall_restarts", c.RecallTarget)
	case c.RecallGoal && c.RecallKeys > 0 && c.RecallKeys < suiteKeys:
		// A goal asks for the suite's keys: each must be one recall can write.
		return field.Errorf("sft.recall_goal", "sft.recall_keys %d must be 0 or at least the suite's %d keys (the goals' keys)", c.RecallKeys, suiteKeys)
	}
	return nil
}

// RecallSource is recall pretraining as the trainer's extra warm-start
// sequences: ft's fact language, shaped by c, scheduled over sft's
// batches; nil when c has neither steps nor mixed sequences.
func (c RecallConfig) RecallSource(ft *FactTokens, sft train.SFTConfig) *train.ExtraExamples {
	if !c.used() {
		return nil
	}
	src := recallSource{ft: ft, cfg: c, length: sft.CopyLen}
	if c.RecallLen > 0 {
		src.length = c.RecallLen
	}
	batch := sft.CopyBatchSize()
	if c.RecallBatch > 0 {
		batch = c.RecallBatch
	}
	return &train.ExtraExamples{Source: src, Phase: "recall", Title: "recall pretraining", Steps: c.RecallSteps, Batch: batch, Mix: c.RecallMix,
		Target: c.RecallTarget, Restarts: c.RecallRestarts}
}

// used reports whether the warm start draws recall sequences.
func (c RecallConfig) used() bool { return c.RecallSteps+c.RecallMix > 0 }

// recallSource is a train.ExampleSource of recall sequences.
type recallSource struct {
	ft     *FactTokens
	cfg    RecallConfig
	length int
}

// Examples draws d.N recall sequences: in the phase of their own, over
// windows growing from 5% of the longest over its first 60% of steps;
// mixed into imitation batches, over whole windows.
func (s recallSource) Examples(corpus [][]int, d train.ExampleDraw, r *rand.Rand) []train.Example {
	reach := 1.0
	if !d.Mixed {
		reach = min(1, 0.05+float64(d.Step)/(0.6*float64(d.Steps)))
	}
	return s.ft.RecallBatch(corpus, RecallDraw{N: d.N, Length: s.length, Extra: s.cfg.RecallExtra, Reach: reach,
		Unknown: s.cfg.RecallUnknown, Goal: s.cfg.RecallGoal}, r)
}

// RecallDraw is one draw of recall sequences: N sequences of at most
// Length tokens over windows of Reach (a fraction) of the longest, each
// with 1 … Extra synthetic facts spliced in; with Unknown, facts absent
// from the context are queried too; with Goal, the query is the found line
// of a summary of the window's demonstration: its goal's keys in task
// order, answered with their values in the context or "?".
type RecallDraw struct {
	N, Length, Extra int
	Reach            float64
	Unknown, Goal    bool
}

// FactTokens is the suite's fact language in token ids: the pieces of a
// "record k v" line and of a summary's "found:" line. Recall pretraining
// splices synthetic record lines into demonstration segments and queries
// them with these.
type FactTokens struct {
	Newline, Record, Found []int
	// Goal is " report the values of", the start of a task's or summary
	// goal's key list, GoalLine "\ngoal:", GoalEnd " files." that ends the
	// statement, and Answer the action that lists keys and values as a
	// found line does.
	Goal, GoalLine, GoalEnd, Answer []int
	// Unknown is " ?": a summary's value for an asked key it has not seen.
	Unknown      []int
	Keys, Values [][]int // " k" and " v", as in "record k v"
}

// newFactTokens encodes the fact language of the vault suite cfg with tok. Each
// piece must encode the same alone as inside a line, so that spliced lines
// are token for token what the environment would show.
func newFactTokens(tok agent.LocalTokenizer, cfg vault.Config) (*FactTokens, error) {
	keys, values := vault.FactWords(cfg)
	f := &FactTokens{Newline: tok.Encode("\n"), Record: tok.Encode("record"), Found: tok.Encode("\nfound:"), Unknown: tok.Encode(" ?"),
		Goal: tok.Encode(" report the values of"), GoalLine: tok.Encode("\ngoal:"), GoalEnd: tok.Encode(" files."), Answer: tok.Encode("answer")}
	for _, k := range keys {
		f.Keys = append(f.Keys, tok.Encode(" "+k))
	}
	for _, v := range values {
		f.Values = append(f.Values, tok.Encode(" "+v))
	}
	// A line spliced from pieces must be the line the tokenizer makes.
	line := slices.Concat(f.Record, f.Keys[0], f.Values[0], f.Newline)
	if want := tok.Encode("record " + vault.Fact{Key: keys[0], Value: values[0]}.String() + "\n"); !slices.Equal(line, want) {
		return nil, fmt.Errorf("fact tokens: record line pieces %v do not concatenate to its encoding %v", line, want)
	}
	// So must a found line with an unknown value.
	found := slices.Concat(f.Found, f.Keys[0], f.Unknown, f.Keys[1], f.Values[0])
	if want := tok.Encode("\nfound: " + keys[0] + " ? " + keys[1] + " " + values[0]); !slices.Equal(found, want) {
		return nil, fmt.Errorf("fact tokens: found line pieces %v do not concatenate to its encoding %v", found, want)
	}
	// So must a summary's goal line and an answer.
	goal := slices.Concat(f.GoalLine, f.Goal, f.Keys[0], f.Keys[1], tok.Encode(". the vault has 3"), f.GoalEnd, f.Found, f.Keys[0])
	if want := tok.Encode("\ngoal: report the values of " + keys[0] + " " + keys[1] + ". the vault has 3 files.\nfound: " + keys[0]); !slices.Equal(goal, want) {
		return nil, fmt.Errorf("fact tokens: goal line pieces %v do not concatenate to its encoding %v", goal, want)
	}
	answer := slices.Concat(f.Answer, f.Keys[0], f.Values[0])
	if want := tok.Encode("answer " + vault.Fact{Key: keys[0], Value: values[0]}.String()); !slices.Equal(answer, want) {
		return nil, fmt.Errorf("fact tokens: answer pieces %v do not concatenate to its encoding %v", answer, want)
	}
	if len(f.Newline) != 1 {
		return nil, errors.New("fact tokens: newline must be one token")
	}
	return f, nil
}

// fact is one key and value found in a token sequence.
type fact struct{ key, value int } // indices into Keys, Values; value −1: unknown ("?")

// at reports the fact of a record line starting at position i of seq:
// Record ⊕ key ⊕ value ⊕ Newline.
func (f *FactTokens) at(seq []int, i int) (fact, int, bool) {
	match := func(p []int) bool { return i+len(p) <= len(seq) && slices.Equal(seq[i:i+len(p)], p) }
	if !match(f.Record) {
		return fact{}, 0, false
	}
	start := i
	i += len(f.Record)
	k := slices.IndexFunc(f.Keys, match)
	if k < 0 {
		return fact{}, 0, false
	}
	i += len(f.Keys[k])
	v := slices.IndexFunc(f.Values, func(p []int) bool {
		return match(p) && i+len(p) < len(seq) && seq[i+len(p)] == f.Newline[0]
	})
	if v < 0 {
		return fact{}, 0, false
	}
	i += len(f.Values[v]) + 1
	return fact{k, v}, i - start, true
}

// facts returns the record facts of seq whose key has one value there (a
// key shown with two values cannot be queried), in order of appearance.
func (f *FactTokens) facts(seq []int) []fact {
	var out []fact
	vals := map[int]map[int]bool{}
	for i := 0; i < len(seq); i++ {
		ft, n, ok := f.at(seq, i)
		if !ok {
			continue
		}
		if vals[ft.key] == nil {
			vals[ft.key] = map[int]bool{}
			out = append(out, ft)
		}
		vals[ft.key][ft.value] = true
		i += n - 1
	}
	return slices.DeleteFunc(out, func(ft fact) bool { return len(vals[ft.key]) > 1 })
}

// RecallBatch is a batch of recall pretraining: n sequences c ⊕ q. c is a
// random window of a demonstration segment (reach·length tokens: a
// curriculum from dense short contexts, where the lookup is learnt fast, to
// the whole window) with 1 … extra synthetic record lines
// ("record k v", keys and values drawn from the suite's, keys not in the
// segment) spliced in after random newlines, its start cut so that c ⊕ q
// fits length tokens; q queries every record fact left in c, in a random
// order, as a summary's found line does:
//
//	found: k₁ v₁ k₂ v₂ …
//
// with the targets the values only (the keys are the query). A policy
// learns here the lookup that summaries and answers need — the value that
// follows k somewhere in the context — which the lossy demonstrations
// show too rarely (most of their found-line values are "?") for a small
// model to pick up.
//
// d gives n, length, extra, reach, unknown and goal; RecallSource draws
// it for the trainer.
func (ft *FactTokens) RecallBatch(segs [][]int, d RecallDraw, r *rand.Rand) []train.Example {
	if len(segs) == 0 {
		return nil
	}
	if d.Goal {
		return ft.goalBatch(segs, d, r)
	}
	batch := make([]train.Example, 0, d.N)
	for len(batch) < d.N {
		ctx := ft.splice(window(segs, d, r), d.Extra, r)
		ctx, facts := ft.fit(ctx, d.Length)
		if len(facts) == 0 {
			continue
		}
		queries := ft.queries(ctx, facts, d.Length, d.Unknown, r)
		r.Shuffle(len(queries), func(i, j int) { queries[i], queries[j] = queries[j], queries[i] })
		batch = append(batch, ft.example(ctx, queries))
	}
	return batch
}

// window is a random window of reach·length tokens (at least 8) of a
// random corpus sequence, the whole sequence if shorter.
func window(segs [][]int, d RecallDraw, r *rand.Rand) []int {
	return cut(segs[r.IntN(len(segs))], d, r)
}

// cut is a random window of reach·length tokens (at least 8) of seg, the
// whole of seg if shorter.
func cut(seg []int, d RecallDraw, r *rand.Rand) []int {
	if wl := max(8, int(d.Reach*float64(d.Length))); wl < len(seg) {
		lo := r.IntN(len(seg) - wl + 1)
		seg = seg[lo : lo+wl]
	}
	return seg
}

// splice returns a copy of seg with 1 … extra synthetic record lines
// inserted after random newlines, each of a random key seg does not show
// (a draw of a key already present inserts nothing) with a random value.
func (ft *FactTokens) splice(seg []int, extra int, r *rand.Rand) []int {
	present := map[int]bool{}
	for _, f := range ft.facts(seg) {
		present[f.key] = true
	}
	nls := ft.lineStarts(seg)
	ctx := slices.Clone(seg)
	// Splice at positions from the last to the first so that earlier
	// positions stay valid.
	var at []int
	for range 1 + r.IntN(max(1, extra)) {
		at = append(at, nls[r.IntN(len(nls))])
	}
	slices.Sort(at)
	for j := len(at) - 1; j >= 0; j-- {
		k := r.IntN(len(ft.Keys))
		if present[k] {
			continue
		}
		present[k] = true
		line := slices.Concat(ft.Record, ft.Keys[k], ft.Values[r.IntN(len(ft.Values))], ft.Newline)
		ctx = slices.Insert(ctx, at[j], line...)
	}
	return ctx
}

// fit cuts the start of ctx so that it and the query of its facts (key and
// value tokens of every one) fit length tokens; it returns the context and
// its facts.
func (ft *FactTokens) fit(ctx []int, length int) ([]int, []fact) {
	facts := ft.facts(ctx)
	qlen := len(ft.Found)
	for _, f := range facts {
		qlen += len(ft.Keys[f.key]) + len(ft.Values[f.value])
	}
	if over := len(ctx) + qlen - length; over > 0 {
		ctx = ctx[min(over, len(ctx)):]
		facts = ft.facts(ctx)
	}
	return ctx, facts
}

// queries are the facts of ctx and, with unknown, up to len(facts) random
// keys ctx never shows, answered "?" as a summary does (as many as fit
// length): a lookup that always copies some value (for a key it has not
// seen, the value of one it has) makes the policy answer before it has
// read the vault.
func (ft *FactTokens) queries(ctx []int, facts []fact, length int, unknown bool, r *rand.Rand) []fact {
	shown := map[int]bool{}
	for i := 0; i < len(ctx); i++ {
		if f, n, ok := ft.at(ctx, i); ok {
			shown[f.key] = true
			i += n - 1
		}
	}
	var absent []int
	for k := range ft.Keys {
		if unknown && !shown[k] {
			absent = append(absent, k)
		}
	}
	r.Shuffle(len(absent), func(i, j int) { absent[i], absent[j] = absent[j], absent[i] })
	room := length - len(ctx) - len(ft.Found)
	for _, f := range facts {
		room -= len(ft.Keys[f.key]) + len(ft.Values[f.value])
	}
	if len(absent) == 0 {
		return facts
	}
	ask := absent[:min(len(absent), r.IntN(len(facts)+1))]
	if len(ask) == 0 {
		return facts // the draws of a batch without unknown keys, as before they existed
	}
	queries := slices.Clone(facts)
	for _, k := range ask {
		if room -= len(ft.Keys[k]) + len(ft.Unknown); room < 0 {
			break
		}
		queries = append(queries, fact{key: k, value: -1})
	}
	return queries
}

// example is the recall sequence ctx ⊕ found k₁ v₁ k₂ v₂ … of queries, the
// prompt ending at the first key, the values (or "?") its targets.
func (ft *FactTokens) example(ctx []int, queries []fact) train.Example {
	prompt := slices.Concat(ctx, ft.Found, ft.Keys[queries[0].key])
	ex := train.Example{Sequence: train.Sequence{Prompt: prompt}}
	for j, f := range queries {
		if j > 0 {
			ex.Response = append(ex.Response, ft.Keys[f.key]...)
		}
		value := ft.Unknown
		if f.value >= 0 {
			value = ft.Values[f.value]
		}
		for _, id := range value {
			ex.Targets = append(ex.Targets, len(ex.Response))
			ex.Response = append(ex.Response, id)
		}
	}
	return ex
}

// lineStarts lists where a line may be spliced into seg: after each of its
// newlines, or at 0 when it has none.
func (ft *FactTokens) lineStarts(seg []int) []int {
	var at []int
	for i, id := range seg {
		if id == ft.Newline[0] {
			at = append(at, i+1)
		}
	}
	if len(at) == 0 {
		at = []int{0}
	}
	return at
}

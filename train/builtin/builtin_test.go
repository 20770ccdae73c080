package builtin

import (
	"context"
	"math"
	"reflect"
	"testing"

	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/train"
)

// testPolicy is a small policy of seed 1 on arch (closed with the test).
func testPolicy(t *testing.T, arch model.Config) *Builtin {
	t.Helper()
	m, err := model.New(arch, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewPolicy(m, Options{GradClip: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func TestBuiltinSaveLoadRoundTrip(t *testing.T) {
	arch := model.Config{Vocab: 50, Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, FFN: 32, MaxSeq: 32, RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}
	b := testPolicy(t, arch)
	ctx := context.Background()
	seqs := []train.Sequence{{Prompt: []int{1, 2, 3}, Response: []int{4, 5}}, {Prompt: []int{7}, Response: []int{8, 9, 10}}}
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
	b2, err := NewPolicy(m2, Options{GradClip: 1})
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

func TestModelArchOverrides(t *testing.T) {
	mc, err := Arch(ModelConfig{Preset: "tiny", Dim: 64, Heads: 2, KVHeads: 1, RopeTheta: 5e5, InitRange: 0.05}, 300, 512)
	if err != nil {
		t.Fatal(err)
	}
	if mc.Dim != 64 || mc.Heads != 2 || mc.KVHeads != 1 || mc.RopeTheta != 5e5 || mc.InitRange != 0.05 || mc.Vocab != 300 || mc.MaxSeq < 512 {
		t.Fatalf("overrides not applied: %+v", mc)
	}
	if mc, _ := Arch(ModelConfig{Preset: "tiny"}, 300, 512); mc.RopeTheta != 10000 {
		t.Fatalf("rope_theta 0 should keep the preset's 10000, got %g", mc.RopeTheta)
	}
}

// Reinit gives the weights model.New draws from the seed and a fresh optimiser.
func TestBuiltinReinit(t *testing.T) {
	arch := model.Config{Vocab: 50, Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, FFN: 32, MaxSeq: 32, RopeTheta: 10000, NormEps: 1e-5}
	b := testPolicy(t, arch)
	ctx := context.Background()
	seqs := []train.Sequence{{Prompt: []int{1, 2, 3}, Response: []int{4, 5}}}
	out, err := b.Forward(ctx, seqs, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Backward(ctx, [][]float64{make([]float64, len(out[0].Logprobs))}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Step(ctx, 1e-2); err != nil || b.OptimizerSteps() != 1 {
		t.Fatalf("step: %v, %d optimiser steps", err, b.OptimizerSteps())
	}
	if err := b.Reinit(7); err != nil {
		t.Fatal(err)
	}
	want, err := model.New(arch, 7, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, w := b.M.Params(), want.Params(); !reflect.DeepEqual(got[0].Data, w[0].Data) || !reflect.DeepEqual(got[len(got)-1].Data, w[len(w)-1].Data) {
		t.Fatal("Reinit(7) did not give model.New's seed-7 weights")
	}
	if b.OptimizerSteps() != 0 {
		t.Fatalf("optimiser kept %d steps", b.OptimizerSteps())
	}
}

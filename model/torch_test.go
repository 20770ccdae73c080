package model

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/internal/testenv"
)

const python = "/usr/bin/python3"

// needTorch skips (locally) or fails (CI=true) when PyTorch is missing.
func needTorch(t *testing.T) {
	t.Helper()
	testenv.MustHaveTorch(t, python)
}

// relErr is max|a−b| / max|b|.
func relErr(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		num = math.Max(num, math.Abs(float64(a[i])-float64(b[i])))
		den = math.Max(den, math.Abs(float64(b[i])))
	}
	return num / math.Max(den, 1e-30)
}

func TestTorchParity(t *testing.T) {
	needTorch(t)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"untied-mha", Config{Vocab: 67, Dim: 32, Layers: 2, Heads: 4, KVHeads: 4, FFN: 48, MaxSeq: 256, RopeTheta: 10000, NormEps: 1e-5}},
		{"tied-gqa", Config{Vocab: 53, Dim: 48, Layers: 3, Heads: 6, KVHeads: 2, FFN: 40, MaxSeq: 256, RopeTheta: 500000, NormEps: 1e-6, TiedEmbeddings: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(21, 22))
			m, err := New(tc.cfg, 5, false)
			if err != nil {
				t.Fatal(err)
			}
			perturbed(m, rng, 0.15)
			dir := t.TempDir()
			if err := m.Save(dir); err != nil {
				t.Fatal(err)
			}
			var seqs [][]int
			var coef [][]float64
			for _, T := range []int{17, 5, 150} {
				ids := make([]int, T)
				for i := range ids {
					ids[i] = rng.IntN(tc.cfg.Vocab)
				}
				c := make([]float64, T-1)
				for i := range c {
					c[i] = rng.NormFloat64()
				}
				seqs, coef = append(seqs, ids), append(coef, c)
			}
			b, _ := json.Marshal(map[string]any{"seqs": seqs, "coef": coef})
			if err := os.WriteFile(filepath.Join(dir, "inputs.json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(python, "testdata/torch_ref.py", dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("torch_ref.py: %v\n%s", err, out)
			}
			ts, _, err := format.ReadSafetensors(filepath.Join(dir, "out.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			ref := make(map[string][]float32)
			for _, x := range ts {
				ref[x.Name] = x.Data
			}

			sc := m.NewScorer()
			for s, ids := range seqs {
				rows, err := sc.Logits(ids)
				if err != nil {
					t.Fatal(err)
				}
				var got []float32
				for _, r := range rows {
					got = append(got, r...)
				}
				want := ref["logits."+string(rune('0'+s))]
				if len(want) != len(got) {
					t.Fatalf("sequence %d: torch gave %d logits, we %d", s, len(want), len(got))
				}
				e := relErr(got, want)
				t.Logf("sequence %d: logits relative error %.2g", s, e)
				if e > 1e-4 {
					t.Errorf("sequence %d: logits relative error %.3g > 1e-4", s, e)
				}
			}
			batch := make([]Seq, len(seqs))
			for s, ids := range seqs {
				batch[s] = Seq{Tokens: ids, From: 1}
			}
			if _, err := sc.Forward(batch); err != nil {
				t.Fatal(err)
			}
			m.ZeroGrad()
			if err := sc.Backward(coef); err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for _, p := range m.Params() {
				want, ok := ref["grad."+p.Name]
				if !ok {
					t.Fatalf("torch gave no gradient for %s", p.Name)
				}
				e := relErr(p.Grad, want)
				worst = math.Max(worst, e)
				if e > 1e-3 {
					t.Errorf("%s: gradient relative error %.3g > 1e-3", p.Name, e)
				}
			}
			t.Logf("worst gradient relative error %.2g", worst)
		})
	}
}

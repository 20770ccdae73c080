package model

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	for _, value := range []bool{false, true} {
		cfg := Presets["tiny"]
		cfg.Layers = 1
		m, err := New(cfg, 9, value)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := m.Save(dir); err != nil {
			t.Fatal(err)
		}
		got, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got.Cfg != m.Cfg || got.Value != value {
			t.Fatalf("config %+v value %v, want %+v %v", got.Cfg, got.Value, m.Cfg, value)
		}
		for i, p := range got.Params() {
			if p.Name != m.Params()[i].Name || !slices.Equal(p.Data, m.Params()[i].Data) {
				t.Fatalf("tensor %s differs after round trip", p.Name)
			}
		}
	}
}

func TestLoadRejectsBadWeights(t *testing.T) {
	cfg := Config{Vocab: 10, Dim: 8, Layers: 1, Heads: 2, KVHeads: 2, FFN: 8, MaxSeq: 16, RopeTheta: 10000, NormEps: 1e-5}
	m, _ := New(cfg, 1, false)
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	other, _ := New(Config{Vocab: 10, Dim: 8, Layers: 1, Heads: 2, KVHeads: 1, FFN: 8, MaxSeq: 16, RopeTheta: 10000, NormEps: 1e-5}, 1, false)
	ts := other.Tensors()
	if err := m.SetTensors(ts); err == nil || !strings.Contains(err.Error(), "k_proj") {
		t.Fatalf("shape mismatch not reported: %v", err)
	}
	if err := m.SetTensors(ts[:3]); err == nil {
		t.Fatal("missing tensors not reported")
	}
	if err := os.Remove(filepath.Join(dir, WeightsFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("missing weights file: %v", err)
	}
}

func TestPresetsValidAndCounted(t *testing.T) {
	for name, cfg := range Presets {
		if err := cfg.Validate(); err != nil {
			t.Fatalf("preset %s: %v", name, err)
		}
		if n := cfg.NumParams(); n < 500_000 || n > 35_000_000 {
			t.Errorf("preset %s has %d parameters, outside ~1M–30M", name, n)
		}
		if name == "medium" {
			continue // 100 MB: counted above, not allocated
		}
		m, err := alloc(cfg, false)
		if err != nil {
			t.Fatal(err)
		}
		if m.NumParams() != cfg.NumParams() {
			t.Errorf("preset %s: Config.NumParams %d, model has %d", name, cfg.NumParams(), m.NumParams())
		}
	}
	if _, err := Preset("nope"); err == nil || !strings.Contains(err.Error(), "tiny") {
		t.Fatalf("unknown preset: %v", err)
	}
	bad := Presets["tiny"]
	bad.KVHeads = 3
	if _, err := New(bad, 1, false); err == nil {
		t.Fatal("kv_heads not dividing heads accepted")
	}
}

// InitRange sets the standard deviation of the random weights and travels
// through config.json as initializer_range.
func TestInitRange(t *testing.T) {
	cfg := Config{Vocab: 64, Dim: 32, Layers: 1, Heads: 2, KVHeads: 2, FFN: 64, MaxSeq: 16, RopeTheta: 10000, NormEps: 1e-5, InitRange: 0.1}
	m, err := New(cfg, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	var ss float64
	n := 0
	for _, p := range m.params {
		if len(p.Shape) == 2 {
			for _, v := range p.Data {
				ss += float64(v) * float64(v)
				n++
			}
		}
	}
	if std := math.Sqrt(ss / float64(n)); math.Abs(std-0.1) > 0.005 {
		t.Fatalf("weight std %.4f, want 0.1", std)
	}
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if back.Cfg != cfg {
		t.Fatalf("loaded config %+v, want %+v", back.Cfg, cfg)
	}
	cfg.InitRange = -1
	if _, err := New(cfg, 1, false); err == nil {
		t.Fatal("negative initializer_range accepted")
	}
}

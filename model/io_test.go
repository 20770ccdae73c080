package model

import (
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

package format

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestReadWeightsSharded(t *testing.T) {
	dir := t.TempDir()
	a := []Tensor{{Name: "model.norm.weight", Shape: []int{2}, Data: []float32{1, 2}}}
	b := []Tensor{{Name: "lm_head.weight", Shape: []int{1, 2}, Data: []float32{3, 4}}}
	WriteSafetensors(filepath.Join(dir, "model-00001-of-00002.safetensors"), a, nil)
	WriteSafetensors(filepath.Join(dir, "model-00002-of-00002.safetensors"), b, nil)
	index := `{"metadata":{"total_size":16},"weight_map":{"model.norm.weight":"model-00001-of-00002.safetensors","lm_head.weight":"model-00002-of-00002.safetensors"}}`
	os.WriteFile(filepath.Join(dir, WeightsIndexFile), []byte(index), 0o644)
	ts, err := ReadWeights(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(b, a...); !reflect.DeepEqual(ts, want) {
		t.Errorf("got %+v, want %+v", ts, want)
	}
	// an index naming a tensor its shard lacks
	os.WriteFile(filepath.Join(dir, WeightsIndexFile), []byte(`{"weight_map":{"model.norm.weight":"model-00001-of-00002.safetensors","x":"model-00001-of-00002.safetensors","lm_head.weight":"model-00002-of-00002.safetensors"}}`), 0o644)
	if _, err := ReadWeights(dir); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("missing tensor: %v", err)
	}
	os.WriteFile(filepath.Join(dir, WeightsIndexFile), []byte(`{"weight_map":{"model.norm.weight":"../evil.safetensors"}}`), 0o644)
	if _, err := ReadWeights(dir); err == nil || !strings.Contains(err.Error(), "file name") {
		t.Errorf("path escape: %v", err)
	}
	// a single file wins
	WriteSafetensors(filepath.Join(dir, WeightsFile), a, nil)
	if ts, err := ReadWeights(dir); err != nil || len(ts) != 1 {
		t.Errorf("single file: %v %v", ts, err)
	}
	if _, err := ReadWeights(t.TempDir()); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Errorf("empty dir: %v", err)
	}
}

// NaN weights: export to GGUF refuses them (naming the tensor), and a NaN
// config field is an error naming config.json, not a bare JSON error.
func TestNonFiniteRefused(t *testing.T) {
	ts := []Tensor{{Name: "model.norm.weight", Shape: []int{2}, Data: []float32{1, float32(math.NaN())}}}
	if err := checkFinite(ts); err == nil || !strings.Contains(err.Error(), "model.norm.weight") {
		t.Fatalf("checkFinite: %v", err)
	}
	cfg := NewLlamaConfig(8, 4, 8, 1, 2, 2, 16)
	if err := WriteGGUF(filepath.Join(t.TempDir(), "m.gguf"), cfg, ts, nil); err == nil || !strings.Contains(err.Error(), "not finite") {
		t.Fatal("WriteGGUF accepted NaN weights")
	}
	cfg.InitializerRange = math.NaN()
	dir := t.TempDir()
	if err := WriteConfig(dir, cfg); err == nil || !strings.Contains(err.Error(), "config.json") || !strings.Contains(err.Error(), "initializer_range") {
		t.Fatalf("WriteConfig with NaN: %v", err)
	}
	if err := cfg.Validate(); err == nil {
		t.Fatal("Validate accepted a NaN initializer_range")
	}
}

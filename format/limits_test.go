package format

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeJSONConfig(t *testing.T, dir string, c LlamaConfig, set map[string]any) {
	t.Helper()
	b, _ := json.Marshal(c)
	var m map[string]any
	json.Unmarshal(b, &m)
	for k, v := range set {
		m[k] = v
	}
	b, _ = json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// An absurd dimension in config.json is refused at load, naming the file,
// the field and the value (before, any positive value passed, and the
// model or the exporter sized its arrays from it: "fatal error: out of
// memory").
func TestAbsurdConfigDimensions(t *testing.T) {
	base := NewLlamaConfig(256, 64, 172, 2, 4, 2, 512)
	for _, c := range []struct {
		field string
		v     any
	}{
		{"vocab_size", 10_000_000_000}, {"hidden_size", 1 << 20}, {"intermediate_size", 1 << 30},
		{"num_hidden_layers", 1_000_000_000}, {"num_attention_heads", 1 << 16}, {"num_key_value_heads", 1 << 16},
		{"head_dim", 1 << 20}, {"max_position_embeddings", 1 << 40},
	} {
		dir := t.TempDir()
		writeJSONConfig(t, dir, base, map[string]any{c.field: c.v})
		_, err := ReadConfig(dir)
		if err == nil || !strings.Contains(err.Error(), ConfigFile) || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), "above the limit") {
			t.Errorf("%s = %v: %v", c.field, c.v, err)
		}
	}
}

// A config within the bounds that the weights file does not match is an
// error naming the file and the tensor, from the header alone; a config
// whose weights exceed the memory ceiling is refused, naming the ceiling.
func TestConfigCheckedAgainstTensorsAndMemory(t *testing.T) {
	dir := t.TempDir()
	c := NewLlamaConfig(8, 4, 8, 1, 2, 2, 16)
	c.TieWordEmbeddings = true
	var ts []Tensor
	for name, shape := range c.TensorShapes(false) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		ts = append(ts, Tensor{Name: name, Shape: shape, Data: make([]float32, n)})
	}
	path := filepath.Join(dir, WeightsFile)
	if err := WriteSafetensors(path, ts, nil); err != nil {
		t.Fatal(err)
	}
	hdr, err := ReadSafetensorsHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckTensors(path, hdr); err != nil {
		t.Fatalf("matching config: %v", err)
	}
	big := c
	big.VocabSize = 4_000_000 // within the bounds, not the file's
	if err := big.CheckTensors(path, hdr); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "model.embed_tokens.weight") || !strings.Contains(err.Error(), "vocab_size 4000000") {
		t.Fatalf("vocab mismatch: %v", err)
	}
	deep := c
	deep.NumHiddenLayers = 1000
	if err := deep.CheckTensors(path, hdr); err == nil || !strings.Contains(err.Error(), "num_hidden_layers 1000") || !strings.Contains(err.Error(), "and 8986 more") {
		t.Fatalf("layers mismatch: %v", err)
	}
	huge := NewLlamaConfig(MaxVocabSize, MaxHiddenSize, MaxIntermediateSize, MaxHiddenLayers, 64, 64, 1<<20)
	if err := huge.Validate(); err != nil {
		t.Fatalf("a config at the bounds: %v", err)
	}
	if err := huge.CheckMemory("x/config.json"); err == nil || !strings.Contains(err.Error(), "x/config.json") || !strings.Contains(err.Error(), "memory ceiling") {
		t.Fatalf("memory ceiling: %v", err)
	}
	if err := c.CheckMemory("x/config.json"); err != nil {
		t.Fatal(err)
	}
}

package format

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestConfigRoundTrip(t *testing.T) {
	dir := t.TempDir()
	c := NewLlamaConfig(256, 64, 172, 2, 4, 2, 512)
	bos, eos := 1, 2
	c.BosTokenID, c.EosTokenID = &bos, &eos
	c.TieWordEmbeddings = true
	if err := WriteConfig(dir, c); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	for _, key := range []string{`"architectures": [`, `"LlamaForCausalLM"`, `"model_type": "llama"`, `"hidden_act": "silu"`, `"rms_norm_eps": 0.00001`, `"rope_theta": 10000`, `"tie_word_embeddings": true`, `"torch_dtype": "float32"`, `"bos_token_id": 1`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("config.json lacks %s:\n%s", key, b)
		}
	}
	got, err := ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("round trip\n got %+v\nwant %+v", got, c)
	}
	if got.HeadDimension() != 16 || got.KVHeads() != 2 {
		t.Errorf("head dim %d kv %d", got.HeadDimension(), got.KVHeads())
	}
}

func TestReadConfigHFDefaultsAndErrors(t *testing.T) {
	dir := t.TempDir()
	// A Llama-3 style config: eos list, no num_key_value_heads, no rms_norm_eps.
	js := `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":32,"intermediate_size":64,
"num_attention_heads":4,"num_hidden_layers":1,"vocab_size":10,"max_position_embeddings":16,"eos_token_id":[7,8],
"rope_scaling":null,"torch_dtype":"bfloat16"}`
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(js), 0o644)
	c, err := ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.NumKeyValueHeads != 4 || c.RMSNormEps != 1e-6 || c.RopeTheta != 10000 || *c.EosTokenID != 7 || !reflect.DeepEqual(c.EosTokenIDs, []int{7, 8}) {
		t.Errorf("defaults: %+v", c)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"gpt2","hidden_size":30,"num_attention_heads":4}`), 0o644)
	_, err = ReadConfig(dir)
	for _, want := range []string{"config.json", `model_type "gpt2"`, "not divisible", "vocab_size must be positive"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if _, err := ReadConfig(t.TempDir()); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("missing config: %v", err)
	}
}

package model

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/compactrl/compactrl/format"
)

// WeightsFile is the safetensors file of a checkpoint directory.
const WeightsFile = "model.safetensors"

// LlamaConfig converts cfg to Hugging Face config.json fields. A critic is
// described as LlamaForSequenceClassification.
func (m *Model) LlamaConfig() format.LlamaConfig {
	c := m.Cfg
	lc := format.NewLlamaConfig(c.Vocab, c.Dim, c.FFN, c.Layers, c.Heads, c.KVHeads, c.MaxSeq)
	lc.RMSNormEps, lc.RopeTheta, lc.TieWordEmbeddings = c.NormEps, c.RopeTheta, c.TiedEmbeddings
	lc.InitializerRange = c.initStd()
	if m.Value {
		lc.Architectures = []string{"LlamaForSequenceClassification"}
	}
	return lc
}

// configFromLlama converts a Hugging Face config to a Config.
func configFromLlama(lc format.LlamaConfig) (Config, error) {
	c := Config{
		Vocab: lc.VocabSize, Dim: lc.HiddenSize, Layers: lc.NumHiddenLayers, Heads: lc.NumAttentionHeads,
		KVHeads: lc.KVHeads(), FFN: lc.IntermediateSize, MaxSeq: lc.MaxPositionEmbeddings,
		RopeTheta: lc.RopeTheta, NormEps: lc.RMSNormEps, TiedEmbeddings: lc.TieWordEmbeddings,
	}
	if lc.InitializerRange != 0.02 {
		c.InitRange = lc.InitializerRange // 0.02 is the default: kept as 0
	}
	if lc.HeadDim != 0 && lc.HeadDim*lc.NumAttentionHeads != lc.HiddenSize {
		return Config{}, fmt.Errorf("head_dim %d × heads %d ≠ hidden_size %d is unsupported", lc.HeadDim, lc.NumAttentionHeads, lc.HiddenSize)
	}
	if len(lc.RopeScaling) > 0 && string(lc.RopeScaling) != "null" {
		return Config{}, fmt.Errorf("rope_scaling %s is unsupported", lc.RopeScaling)
	}
	return c, c.Validate()
}

// Tensors returns the weights as format tensors (sharing memory with m).
func (m *Model) Tensors() []format.Tensor {
	ts := make([]format.Tensor, len(m.params))
	for i, p := range m.params {
		ts[i] = format.Tensor{Name: p.Name, Shape: slices.Clone(p.Shape), Data: p.Data}
	}
	return ts
}

// SetTensors copies named tensors into the weights. Every parameter must
// be present with its exact shape; unknown names are an error.
func (m *Model) SetTensors(ts []format.Tensor) error {
	byName := make(map[string]*Param, len(m.params))
	for _, p := range m.params {
		byName[p.Name] = p
	}
	seen := make(map[string]bool, len(ts))
	for _, t := range ts {
		p, ok := byName[t.Name]
		if !ok {
			return fmt.Errorf("unexpected tensor %q", t.Name)
		}
		if !slices.Equal(p.Shape, t.Shape) || len(t.Data) != len(p.Data) {
			return fmt.Errorf("tensor %q has shape %v, want %v", t.Name, t.Shape, p.Shape)
		}
		copy(p.Data, t.Data)
		seen[t.Name] = true
	}
	for _, p := range m.params {
		if !seen[p.Name] {
			return fmt.Errorf("missing tensor %q", p.Name)
		}
	}
	return nil
}

// Save writes dir/config.json and dir/model.safetensors, creating dir.
func (m *Model) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save model %s: %w", dir, err)
	}
	if err := format.WriteConfig(dir, m.LlamaConfig()); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	if err := format.WriteSafetensors(filepath.Join(dir, WeightsFile), m.Tensors(), map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	return nil
}

// Load reads a checkpoint written by Save (or a Hugging Face Llama
// checkpoint in one safetensors file), or a llama GGUF file (any type
// format.Dequantize reads, to float32; format.ReadGGUFCheckpoint). It is a
// critic when the weights hold score.weight.
func Load(dir string) (*Model, error) {
	if format.IsGGUF(dir) {
		return loadGGUF(dir)
	}
	lc, err := format.ReadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	cfg, err := configFromLlama(lc)
	if err != nil {
		return nil, fmt.Errorf("load model %s: config: %w", dir, err)
	}
	// Before anything is allocated: the config's weights must fit the
	// memory ceiling, and the file's header must hold exactly the tensors
	// the config implies (an absurd config.json would otherwise size the
	// model from its numbers and end in "fatal error: out of memory").
	if err := lc.CheckMemory(filepath.Join(dir, format.ConfigFile)); err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	path := filepath.Join(dir, WeightsFile)
	hdr, err := format.ReadSafetensorsHeader(path)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	if err := lc.CheckTensors(path, hdr); err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	ts, _, err := format.ReadSafetensors(path)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	value := slices.ContainsFunc(ts, func(t format.Tensor) bool { return t.Name == "score.weight" })
	if cfg.TiedEmbeddings && !value {
		// Some exporters write lm_head.weight even when tied: drop the copy.
		ts = slices.DeleteFunc(ts, func(t format.Tensor) bool { return t.Name == "lm_head.weight" })
	}
	m, err := alloc(cfg, value)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	if err := m.SetTensors(ts); err != nil {
		return nil, fmt.Errorf("load model %s: %s: %w", dir, path, err)
	}
	return m, nil
}

// GGUFConfig is the architecture a GGUF model file's metadata describes
// (format.GGUFLlamaConfig), reading no tensor data.
func GGUFConfig(path string) (Config, error) {
	f, err := format.ReadGGUFMeta(path)
	if err != nil {
		return Config{}, err
	}
	lc, err := format.GGUFLlamaConfig(f)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return configFromLlama(lc)
}

// loadGGUF reads a GGUF file as a policy (format.ReadGGUFCheckpoint).
func loadGGUF(path string) (*Model, error) {
	lc, ts, err := format.ReadGGUFCheckpoint(path)
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	cfg, err := configFromLlama(lc)
	if err != nil {
		return nil, fmt.Errorf("load model %s: config: %w", path, err)
	}
	m, err := alloc(cfg, false)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", path, err)
	}
	if err := m.SetTensors(ts); err != nil {
		return nil, fmt.Errorf("load model %s: %w", path, err)
	}
	return m, nil
}

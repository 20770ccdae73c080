package format_test

import (
	"path/filepath"
	"testing"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/model"
)

// builtinLogits runs the built-in model (package model) on ids with the
// checkpoint's weights (its products in bfloat16 with bf16: model.Model.BF16).
func builtinLogits(t *testing.T, cfg format.LlamaConfig, ts []format.Tensor, ids []int, bf16 bool) [][]float64 {
	dir := t.TempDir()
	if err := format.WriteConfig(dir, cfg); err != nil {
		t.Fatal(err)
	}
	if err := format.WriteSafetensors(filepath.Join(dir, model.WeightsFile), ts, nil); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatalf("built-in model: %v", err)
	}
	m.BF16 = bf16
	rows, err := m.NewScorer().Logits(ids)
	if err != nil {
		t.Fatalf("built-in model: %v", err)
	}
	out := make([][]float64, len(rows))
	for i, row := range rows {
		out[i] = make([]float64, len(row))
		for j, v := range row {
			out[i][j] = float64(v)
		}
	}
	return out
}

package format

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Weights file names of a Hugging Face checkpoint directory.
const (
	WeightsFile      = "model.safetensors"
	WeightsIndexFile = "model.safetensors.index.json"
)

// ReadWeights reads the tensors of a checkpoint directory: dir/model.safetensors,
// or, when that is absent, the shards listed by dir/model.safetensors.index.json
// (its weight_map: tensor name → shard file). Every tensor the index names
// must be in its shard, and no tensor may appear in two files. Tensors are
// returned sorted by name.
func ReadWeights(dir string) ([]Tensor, error) {
	single := filepath.Join(dir, WeightsFile)
	if _, err := os.Stat(single); err == nil {
		ts, _, err := ReadSafetensors(single)
		return ts, err
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read weights: %w", err)
	}
	indexPath := filepath.Join(dir, WeightsIndexFile)
	b, err := os.ReadFile(indexPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read weights %s: neither %s nor %s", dir, WeightsFile, WeightsIndexFile)
		}
		return nil, fmt.Errorf("read weights: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("read weights %s: %w", indexPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("read weights %s: empty weight_map", indexPath)
	}
	shards := map[string]bool{}
	for name, shard := range idx.WeightMap {
		if shard == "" || filepath.Base(shard) != shard {
			return nil, fmt.Errorf("read weights %s: tensor %q: shard %q must be a file name in the directory", indexPath, name, shard)
		}
		shards[shard] = true
	}
	files := make([]string, 0, len(shards))
	for s := range shards {
		files = append(files, s)
	}
	sort.Strings(files)
	var all []Tensor
	from := map[string]string{}
	for _, s := range files {
		ts, _, err := ReadSafetensors(filepath.Join(dir, s))
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if prev, dup := from[t.Name]; dup {
				return nil, fmt.Errorf("read weights %s: tensor %q in both %s and %s", dir, t.Name, prev, s)
			}
			if want, ok := idx.WeightMap[t.Name]; !ok || want != s {
				return nil, fmt.Errorf("read weights %s: tensor %q found in %s, index says %q", dir, t.Name, s, want)
			}
			from[t.Name] = s
			all = append(all, t)
		}
	}
	for name, s := range idx.WeightMap {
		if _, ok := from[name]; !ok {
			return nil, fmt.Errorf("read weights %s: tensor %q listed in the index is missing from %s", dir, name, s)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all, nil
}

// ReadWeightsHeader reads only the headers of a checkpoint directory's
// weights (dir/model.safetensors, or the shards its index lists): what
// tensors the files hold and their shapes, with no tensor data read. path
// is the file (or index) they come from, for error messages.
func ReadWeightsHeader(dir string) (ts []TensorInfo, path string, err error) {
	single := filepath.Join(dir, WeightsFile)
	if _, err := os.Stat(single); err == nil {
		ts, err := ReadSafetensorsHeader(single)
		return ts, single, err
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, single, fmt.Errorf("read weights: %w", err)
	}
	indexPath := filepath.Join(dir, WeightsIndexFile)
	b, err := os.ReadFile(indexPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, indexPath, fmt.Errorf("read weights %s: neither %s nor %s", dir, WeightsFile, WeightsIndexFile)
		}
		return nil, indexPath, fmt.Errorf("read weights: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, indexPath, fmt.Errorf("read weights %s: %w", indexPath, err)
	}
	shards := map[string]bool{}
	for name, shard := range idx.WeightMap {
		if shard == "" || filepath.Base(shard) != shard {
			return nil, indexPath, fmt.Errorf("read weights %s: tensor %q: shard %q must be a file name in the directory", indexPath, name, shard)
		}
		shards[shard] = true
	}
	files := make([]string, 0, len(shards))
	for s := range shards {
		files = append(files, s)
	}
	sort.Strings(files)
	for _, s := range files {
		h, err := ReadSafetensorsHeader(filepath.Join(dir, s))
		if err != nil {
			return nil, indexPath, err
		}
		ts = append(ts, h...)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	return ts, indexPath, nil
}

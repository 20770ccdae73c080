package recipe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/tokenizer"
	"github.com/compactrl/compactrl/train"
	"github.com/compactrl/compactrl/train/builtin"
)

// checkpointTokenizer prefers the run directory's tokenizer.json (the
// checkpoint's grandparent), else the config's.
func checkpointTokenizer(ckpt string, cfg Config) (*tokenizer.Tokenizer, Layout, error) {
	p := filepath.Join(ckpt, "..", "..", TokenizerFile)
	if _, err := os.Stat(p); err == nil {
		mc := cfg.Model
		mc.Tokenizer = p
		return loadTokenizer(mc)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, Layout{}, err
	}
	return loadTokenizer(cfg.Model)
}

// EvalOptions override a checkpoint's evaluation settings (zero keeps the
// checkpoint config's).
type EvalOptions struct {
	Episodes    int
	Workers     int
	Temperature float64 // used when SetTemperature
	SetTemp     bool
	// Range, if set, is the evaluation range (train.RangeDev or
	// train.RangeTest); SeedOffset moves the tasks within it
	// (run.eval_seed_offset).
	Range      string
	SeedOffset int64
	Progress   io.Writer
	// Config is the run config a GGUF model file is evaluated with (its
	// suite and agent settings; model.init and model.tokenizer become the
	// file). It is required for a GGUF and refused for a directory.
	Config string
}

// EvaluateCheckpoint loads a checkpoint's policy with its run's config and
// tokenizer and evaluates it on the held-out seeds, with compaction and in
// a single window.
func EvaluateCheckpoint(ctx context.Context, dir string, o EvalOptions) (train.EvalResult, Config, error) {
	cfg, tok, lay, policyDir, err := loadCheckpoint(dir, o.Config)
	if err != nil {
		return train.EvalResult{}, cfg, err
	}
	o.apply(&cfg)
	if err := cfg.Train().Validate(); err != nil {
		return train.EvalResult{}, cfg, err
	}
	suite, err := NewSuite(cfg, tok, lay)
	if err != nil {
		return train.EvalResult{}, cfg, err
	}
	m, err := model.Load(policyDir)
	if err != nil {
		return train.EvalResult{}, cfg, err
	}
	m.BF16 = cfg.Model.Precision == "bf16" // as the run sampled
	pol, err := builtin.NewPolicy(m, builtin.Options{MaxBatch: max(64, cfg.Run.Workers)})
	if err != nil {
		return train.EvalResult{}, cfg, err
	}
	defer pol.Close()
	tr := &train.Trainer{Cfg: cfg.Train(), Policy: pol, Collector: suite, Progress: o.Progress}
	ev, err := tr.Evaluate(ctx, "eval "+filepath.Base(policyDir))
	return ev, cfg, err
}

// loadCheckpoint reads what evaluating dir needs: a base policy directory's
// recipe and tokenizer, or a run's (or checkpoint's) config and tokenizer,
// and the directory of the policy's weights.
func loadCheckpoint(dir, config string) (cfg Config, tok *tokenizer.Tokenizer, lay Layout, policyDir string, err error) {
	if format.IsGGUF(dir) {
		if config == "" {
			return cfg, nil, lay, "", fmt.Errorf("%s is a GGUF model: give the run config to evaluate it with (--config FILE.yaml)", dir)
		}
		if cfg, err = LoadConfig(config); err != nil {
			return cfg, nil, lay, "", err
		}
		cfg.Model.Init, cfg.Model.Tokenizer = dir, dir
		tok, lay, err = loadTokenizer(cfg.Model)
		return cfg, tok, lay, dir, err
	}
	if config != "" {
		return cfg, nil, lay, "", fmt.Errorf("--config %s: only a GGUF model takes a run config; %s carries its own", config, dir)
	}
	if isBase(dir) {
		if cfg, err = LoadBase(dir); err != nil {
			return cfg, nil, lay, "", err
		}
		tok, lay, err = loadTokenizer(cfg.Model)
		return cfg, tok, lay, dir, err
	}
	ckpt, err := train.ResolveCheckpoint(dir)
	if err != nil {
		return cfg, nil, lay, "", err
	}
	if cfg, err = LoadConfig(filepath.Join(ckpt, "config.yaml")); err != nil {
		return cfg, nil, lay, "", err
	}
	tok, lay, err = checkpointTokenizer(ckpt, cfg)
	return cfg, tok, lay, filepath.Join(ckpt, "policy"), err
}

// apply sets the options' overrides in cfg.
func (o EvalOptions) apply(cfg *Config) {
	if o.Range != "" {
		cfg.Run.EvalRange = o.Range
	}
	cfg.Run.EvalSeedOffset += o.SeedOffset
	if o.Episodes > 0 {
		cfg.Run.EvalEpisodes = o.Episodes
	}
	if o.Workers > 0 {
		cfg.Run.Workers = o.Workers
	}
	if o.SetTemp {
		cfg.Agent.EvalTemperature = o.Temperature
	}
}

// EvaluateExpert evaluates the suite's scripted expert (summaries keep each
// fact with probability p) on the run's held-out seeds: the reference for
// what summaries alone can gain on the suite.
func EvaluateExpert(ctx context.Context, cfg Config, p float64, progress io.Writer) (train.EvalResult, error) {
	tok, lay, err := loadTokenizer(cfg.Model)
	if err != nil {
		return train.EvalResult{}, err
	}
	suite, err := NewSuite(cfg, tok, lay)
	if err != nil {
		return train.EvalResult{}, err
	}
	ex, err := suite.expert(p)
	if err != nil {
		return train.EvalResult{}, err
	}
	tr := &train.Trainer{Cfg: cfg.Train(), Collector: suite, Progress: progress}
	return tr.EvaluateWith(ctx, ex, fmt.Sprintf("expert p=%.2f", p))
}

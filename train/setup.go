package train

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/vault"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/tokenizer"
	"github.com/compactrl/compactrl/transcript"
)

// TokenizerFile is where a run directory keeps its tokenizer.
const TokenizerFile = "tokenizer.json"

// LoadTokenizer returns the run's tokenizer: the file Model.Tokenizer
// names, else the vault suite's default (trained deterministically).
func LoadTokenizer(c ModelConfig) (*tokenizer.Tokenizer, agent.Template, error) {
	if c.Tokenizer == "" {
		return vault.DefaultTokenizer()
	}
	tok, err := tokenizer.Load(c.Tokenizer)
	if err != nil {
		return nil, agent.Template{}, fmt.Errorf("model.tokenizer: %w", err)
	}
	tmpl, err := agent.TemplateFrom(tok.SpecialID)
	if err != nil {
		return nil, agent.Template{}, fmt.Errorf("model.tokenizer %s: %w", c.Tokenizer, err)
	}
	return tok, tmpl, nil
}

// ModelArch resolves the preset with its overrides; the vocabulary is the
// tokenizer's and the longest sequence at least the context window.
func ModelArch(c ModelConfig, vocab, window int) (model.Config, error) {
	mc, err := model.Preset(c.Preset)
	if err != nil {
		return mc, fmt.Errorf("model.preset: %w", err)
	}
	mc.Vocab = vocab
	for _, o := range []struct {
		dst *int
		v   int
	}{{&mc.Dim, c.Dim}, {&mc.Layers, c.Layers}, {&mc.Heads, c.Heads}, {&mc.KVHeads, c.KVHeads}, {&mc.FFN, c.FFN}, {&mc.MaxSeq, c.MaxSeq}} {
		if o.v > 0 {
			*o.dst = o.v
		}
	}
	if c.RopeTheta > 0 {
		mc.RopeTheta = c.RopeTheta
	}
	if c.InitRange > 0 {
		mc.InitRange = c.InitRange
	}
	if mc.MaxSeq < window {
		if c.MaxSeq > 0 {
			return mc, fmt.Errorf("model.max_seq: %d is below agent.context %d", c.MaxSeq, window)
		}
		mc.MaxSeq = window
	}
	if err := mc.Validate(); err != nil {
		return mc, fmt.Errorf("model: %w", err)
	}
	return mc, nil
}

// Setup is a run assembled from its config: tokenizer, suite, policy and
// the trainer over them.
type Setup struct {
	Cfg     Config
	Tok     *tokenizer.Tokenizer
	Tmpl    agent.Template
	Suite   *Suite
	Policy  *Builtin
	Trainer *Trainer
}

// Close stops the policy's sampler.
func (s *Setup) Close() {
	if s.Policy != nil {
		s.Policy.Close()
	}
}

// Build assembles a run: the tokenizer (saved into the run directory), the
// vault suite with the agent's budget checked, the policy (random weights
// from the seed, or Model.Init's checkpoint) and a trainer whose critic is
// initialised from the policy.
func Build(cfg Config, progress, log io.Writer) (*Setup, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tok, tmpl, err := LoadTokenizer(cfg.Model)
	if err != nil {
		return nil, err
	}
	suite, err := NewSuite(cfg, tok, tmpl)
	if err != nil {
		return nil, err
	}
	var m *model.Model
	if cfg.Model.Init != "" {
		if m, err = model.Load(cfg.Model.Init); err != nil {
			return nil, fmt.Errorf("model.init: %w", err)
		}
		if m.Value || m.Cfg.Vocab != tok.VocabSize() || m.Cfg.MaxSeq < cfg.Agent.Context {
			return nil, fmt.Errorf("model.init %s: need a policy with vocab %d and max_seq ≥ %d, have vocab %d, max_seq %d, critic %v", cfg.Model.Init, tok.VocabSize(), cfg.Agent.Context, m.Cfg.Vocab, m.Cfg.MaxSeq, m.Value)
		}
	} else {
		arch, err := ModelArch(cfg.Model, tok.VocabSize(), cfg.Agent.Context)
		if err != nil {
			return nil, err
		}
		if m, err = model.New(arch, mix(cfg.Seed, 0x6d6f64656c), false); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
	}
	opts := BuiltinOptions{GradClip: cfg.RL.GradClip, WeightDecay: cfg.RL.WeightDecay, MaxBatch: max(64, cfg.Run.Workers)}
	pol, err := NewBuiltinPolicy(m, opts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Run.Dir, 0o755); err != nil {
		pol.Close()
		return nil, fmt.Errorf("run dir %s: %w", cfg.Run.Dir, err)
	}
	if err := tok.Save(filepath.Join(cfg.Run.Dir, TokenizerFile)); err != nil {
		pol.Close()
		return nil, fmt.Errorf("run dir %s: %w", cfg.Run.Dir, err)
	}
	var facts *FactTokens
	if cfg.SFT.RecallSteps+cfg.SFT.RecallMix > 0 {
		vc := VaultConfig(cfg.Suite)
		if cfg.SFT.RecallKeys > 0 {
			vc.Keys = cfg.SFT.RecallKeys
		}
		if facts, err = NewFactTokens(tok, vc); err != nil {
			pol.Close()
			return nil, fmt.Errorf("sft.recall_steps: %w", err)
		}
	}
	tr := &Trainer{
		Cfg: cfg, Policy: pol, Collector: suite, Expert: suite, Facts: facts, Progress: progress, Log: log,
		Transcribe: func(ep *episode.Episode) string {
			var b strings.Builder
			transcript.Write(&b, ep, tok, tmpl, false)
			return b.String()
		},
		NewCritic: func(ctx context.Context, p Policy) (Model, error) {
			b, ok := p.(*Builtin)
			if !ok {
				return nil, fmt.Errorf("critic: policy is %T, not the built-in model", p)
			}
			return NewBuiltinCritic(b.M, opts), nil
		},
	}
	return &Setup{Cfg: cfg, Tok: tok, Tmpl: tmpl, Suite: suite, Policy: pol, Trainer: tr}, nil
}

package recipe

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
	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/internal/field"
	"github.com/compactrl/compactrl/internal/splitmix"
	"github.com/compactrl/compactrl/tokenizer"
	"github.com/compactrl/compactrl/train"
	"github.com/compactrl/compactrl/train/builtin"
	"github.com/compactrl/compactrl/transcript"
)

// TokenizerFile is where a run directory keeps its tokenizer.
const TokenizerFile = "tokenizer.json"

// Layout is how a run's contexts are laid out: the built-in model's
// six-id Template, or, for a real model, its own chat template (Chat).
type Layout struct {
	Tmpl agent.Template
	Chat *agent.ChatFormat // nil: Tmpl
	// Desc says which template lays the prompts out (a real model's).
	Desc string
}

// loadTokenizer returns the run's tokenizer and layout: the file
// Model.Tokenizer names (a tokenizer.json with compactrl's six special
// tokens, or a real model's tokenizer.json or GGUF with its own chat
// template, verified), else the vault suite's default (trained
// deterministically).
func loadTokenizer(c builtin.ModelConfig) (*tokenizer.Tokenizer, Layout, error) {
	if c.Tokenizer == "" {
		tok, tmpl, err := vault.DefaultTokenizer()
		return tok, Layout{Tmpl: tmpl}, err
	}
	tok, err := format.ReadTokenizer(c.Tokenizer)
	if err != nil {
		return nil, Layout{}, fmt.Errorf("model.tokenizer: %w", err)
	}
	if tmpl, err := agent.TemplateFrom(tok.SpecialID); err == nil {
		return tok, Layout{Tmpl: tmpl}, nil
	}
	from := format.TokenizerConfigPath(c.Tokenizer)
	tc, err := format.ReadTokenizerConfig(from)
	if err != nil {
		return nil, Layout{}, fmt.Errorf("model.tokenizer %s: not compactrl's six-token vocabulary, and no chat template: %w", c.Tokenizer, err)
	}
	f, desc, err := agent.ModelFormat(tok, tc, from)
	if err != nil {
		return nil, Layout{}, fmt.Errorf("model.tokenizer %s: %w", c.Tokenizer, err)
	}
	return tok, Layout{Chat: f, Desc: desc}, nil
}

// Setup is a run assembled from its config: tokenizer, suite, policy and
// the trainer over them.
type Setup struct {
	Cfg     Config
	Tok     *tokenizer.Tokenizer
	Lay     Layout
	Suite   *Suite
	Policy  *builtin.Builtin
	Trainer *train.Trainer
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
	tok, lay, err := loadTokenizer(cfg.Model)
	if err != nil {
		return nil, err
	}
	suite, err := NewSuite(cfg, tok, lay)
	if err != nil {
		return nil, err
	}
	m, err := builtin.NewModel(cfg.Model, tok.VocabSize(), cfg.Agent.Context, splitmix.Chain(cfg.Seed, 0x6d6f64656c))
	if err != nil {
		return nil, err
	}
	opts := builtin.Options{GradClip: cfg.RL.GradClip, WeightDecay: cfg.RL.WeightDecay, MaxBatch: max(64, cfg.Run.Workers)}
	pol, err := builtin.NewPolicy(m, opts)
	if err != nil {
		return nil, err
	}
	s := &Setup{Cfg: cfg, Tok: tok, Lay: lay, Suite: suite, Policy: pol}
	if s.Trainer, err = s.newTrainer(opts, progress, log); err != nil {
		pol.Close()
		return nil, err
	}
	return s, nil
}

// newTrainer saves the tokenizer into the run directory and returns the
// trainer of the setup: its suite as Collector and ExpertCollector, the
// suite's fact language as RecallSource when the warm start uses one, the
// critic initialised from the policy with opts.
func (s *Setup) newTrainer(opts builtin.Options, progress, log io.Writer) (*train.Trainer, error) {
	cfg := s.Cfg
	if err := s.saveTokenizer(); err != nil {
		return nil, err
	}
	y, err := cfg.YAML()
	if err != nil {
		return nil, err
	}
	tr := &train.Trainer{
		Cfg: cfg.Train(), Policy: s.Policy, Collector: s.Suite, Expert: s.Suite, ConfigYAML: y,
		Progress: progress, Log: log,
		Transcribe: func(ep *episode.Episode) string {
			var b strings.Builder
			if s.Lay.Chat != nil {
				transcript.WritePlain(&b, ep, s.Tok)
			} else {
				transcript.Write(&b, ep, s.Tok, s.Lay.Tmpl, false)
			}
			return b.String()
		},
		NewCritic: func(ctx context.Context, p train.Policy) (train.Model, error) {
			b, ok := p.(*builtin.Builtin)
			if !ok {
				return nil, fmt.Errorf("critic: policy is %T, not the built-in model", p)
			}
			return builtin.NewCritic(b.M, opts), nil
		},
	}
	if tr.Extra, err = s.recall(); err != nil {
		return nil, err
	}
	if cfg.Model.Init != "" && !format.IsGGUF(cfg.Model.Init) {
		tr.BaseCurve = filepath.Join(cfg.Model.Init, BaseCurveFile)
	}
	return tr, nil
}

// saveTokenizer writes the tokenizer to RUN_DIR/TokenizerFile, making the
// run directory.
func (s *Setup) saveTokenizer() error {
	dir := s.Cfg.Run.Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("run dir %s: %w", dir, err)
	}
	if format.IsGGUF(s.Cfg.Model.Tokenizer) {
		return nil // the model's GGUF, which config.yaml names, is its tokenizer
	}
	if err := s.Tok.Save(filepath.Join(dir, TokenizerFile)); err != nil {
		return fmt.Errorf("run dir %s: %w", dir, err)
	}
	return nil
}

// recall is recall pretraining in the suite's fact language (sft.recall_keys
// keys, if set) when the warm start has recall steps or mixes recall in;
// nil otherwise.
func (s *Setup) recall() (*train.ExtraExamples, error) {
	cfg := s.Cfg
	if !cfg.SFT.used() {
		return nil, nil
	}
	vc := cfg.Suite.Config
	if cfg.SFT.RecallKeys > 0 {
		vc.Keys = cfg.SFT.RecallKeys
	}
	f, err := newFactTokens(s.Tok, vc)
	if err != nil {
		return nil, field.Under("sft.recall_steps", err)
	}
	return cfg.SFT.RecallSource(f, cfg.SFT.SFTConfig), nil
}

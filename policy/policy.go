// Package policy opens a policy to play a generated suite's episodes with
// (`compactrl rollout --policy`): the suite's scripted policy
// (tasks.Scripter) or a checkpoint of the built-in model, each with the
// tokenizer and the turn layout it speaks.
//
// Data flow: a spec "scripted[:OPTS]" or "checkpoint:DIR" → the tokenizer
// (an explicit file, else the checkpoint's own — a GGUF carries its
// vocabulary and chat template, a directory's tokenizer.json is found by
// train.CheckpointTokenizers — else the suite's, tasks.DefaultTokenizer) →
// its layout (compactrl's six-token Template when the tokenizer has those
// special tokens, else the model's chat format, agent.ChooseFormat) → the
// sampler (the suite's script, or infer/local over the loaded model).
package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/infer/local"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/train"
)

// Suite is a generated suite with its registered name.
type Suite struct {
	tasks.Suite
	Name string
}

// Policy is a sampler with the tokenizer and layout it speaks.
type Policy struct {
	Sampler infer.Sampler
	Tok     agent.LocalTokenizer
	Tmpl    agent.Template
	Format  agent.Format // a real model's chat format (a tokenizer without compactrl's six ids); nil: Tmpl
	Chat    string       // which template lays out the turns, for the episodes' meta
	TokName string       // the tokenizer's file, or SUITE-default
	Vocab   int
	close   func()
}

// Close frees the sampler's resources.
func (p *Policy) Close() {
	if p.close != nil {
		p.close()
	}
}

// Agent is the agent loop cfg over the policy, in its layout.
func (p *Policy) Agent(ctx context.Context, cfg agent.Config) (*agent.Agent, error) {
	if p.Format != nil {
		return agent.NewWithFormat(ctx, cfg, agent.Local(p.Tok), p.Format, p.Sampler)
	}
	return agent.New(ctx, cfg, agent.Local(p.Tok), p.Tmpl, p.Sampler)
}

// Open parses spec: "scripted[:OPTS]" (the suite's tasks.Scripter) or
// "checkpoint:DIR" (the built-in model saved in DIR, batching up to
// workers sequences, accepting contextTokens). tokPath overrides the
// tokenizer.
func Open(spec, tokPath string, workers, contextTokens int, s Suite) (*Policy, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "scripted":
		return scripted(spec, arg, tokPath, s)
	case "checkpoint":
		return checkpoint(spec, arg, tokPath, workers, contextTokens, s)
	}
	return nil, fmt.Errorf("--policy %q: want scripted[:OPTS] or checkpoint:DIR", spec)
}

// scripted is the suite's scripted policy with options opts.
func scripted(spec, opts, tokPath string, s Suite) (*Policy, error) {
	sc, ok := s.Suite.(tasks.Scripter)
	if !ok {
		return nil, fmt.Errorf("--policy %s: the %s suite has no scripted policy (tasks.Scripter)", spec, s.Name)
	}
	pol, err := Tokenizer(tokPath, "", s)
	if err != nil {
		return nil, err
	}
	if pol.Format != nil {
		return nil, fmt.Errorf("--policy %s: the scripted policy reads compactrl's six-token layout; %s lays turns out with a chat template (%s)", spec, tokPath, pol.Chat)
	}
	if pol.Sampler, err = sc.Scripted(opts, pol.Tok, pol.Tmpl); err != nil {
		return nil, fmt.Errorf("--policy %s: %w", spec, err)
	}
	return pol, nil
}

// checkpoint samples the built-in model saved in dir; its tokenizer must
// fit the model's vocabulary and the model the context of contextTokens.
func checkpoint(spec, dir, tokPath string, workers, contextTokens int, suite Suite) (*Policy, error) {
	if dir == "" {
		return nil, errors.New("--policy checkpoint:DIR needs a directory")
	}
	m, err := model.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	pol, err := Tokenizer(tokPath, dir, suite)
	if err != nil {
		return nil, err
	}
	if v := pol.Vocab; v > m.Cfg.Vocab {
		return nil, fmt.Errorf("--policy %s: tokenizer %s has %d ids, the model only %d", spec, pol.TokName, v, m.Cfg.Vocab)
	}
	if m.Cfg.MaxSeq < contextTokens {
		return nil, fmt.Errorf("--policy %s: model accepts %d tokens, below --context %d", spec, m.Cfg.MaxSeq, contextTokens)
	}
	smp, err := local.New(m, local.Options{MaxBatch: max(workers, 1)})
	if err != nil {
		return nil, fmt.Errorf("--policy %s: %w", spec, err)
	}
	pol.Sampler, pol.close = smp, smp.Close
	return pol, nil
}

// Tokenizer is a Policy without a sampler holding the tokenizer at path,
// else the checkpoint ckpt's own (a GGUF file, or a tokenizer.json where
// train.CheckpointTokenizers looks), else the suite's
// (tasks.DefaultTokenizer, named SUITE-default).
func Tokenizer(path, ckpt string, s Suite) (*Policy, error) {
	if path == "" && ckpt != "" && format.IsGGUF(ckpt) {
		path = ckpt // a GGUF model carries its vocabulary and chat template
	}
	if path == "" && ckpt != "" {
		for _, p := range train.CheckpointTokenizers(ckpt) {
			if _, err := os.Stat(p); err == nil {
				path = p
				break
			}
		}
	}
	pol := &Policy{}
	if path == "" {
		dt, ok := s.Suite.(tasks.DefaultTokenizer)
		if !ok {
			return nil, fmt.Errorf("--tokenizer is required: the %s suite has no tokenizer of its own (tasks.DefaultTokenizer)", s.Name)
		}
		tok, tmpl, err := dt.DefaultTokenizer()
		if err != nil {
			return nil, fmt.Errorf("%s suite's tokenizer: %w", s.Name, err)
		}
		pol.Tok, pol.Tmpl, pol.TokName, pol.Vocab = tok, tmpl, s.Name+"-default", tok.VocabSize()
		return pol, nil
	}
	tok, err := format.ReadTokenizer(path)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %w", err)
	}
	pol.Tok, pol.TokName, pol.Vocab = tok, path, tok.VocabSize()
	if pol.Tmpl, err = agent.TemplateFrom(tok.SpecialID); err == nil {
		return pol, nil
	}
	// A real model's tokenizer: its own chat template lays the turns out.
	if pol.Format, pol.Chat, err = agent.ChooseFormat(tok, path, ""); err != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", path, err)
	}
	return pol, nil
}

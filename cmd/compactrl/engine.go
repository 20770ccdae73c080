package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/infer/remote"
	"github.com/compactrl/compactrl/tokenizer"
)

// engineFlags bound what a slow or failing engine can cost: one attempt's
// deadline and the attempts per request (so a hung engine costs at most
// about timeout × retries per request, plus the backoff), and the
// vocabulary size against which every id is checked.
type engineFlags struct {
	timeout time.Duration
	retries int
	vocab   int
}

// Defaults of --engine-timeout and --engine-retries: a hung engine costs an
// episode at most about 6 minutes a request (it was 5 min × 5 attempts).
const (
	defaultEngineTimeout = 2 * time.Minute
	defaultEngineRetries = 3
)

func (f *engineFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.timeout, "engine-timeout", defaultEngineTimeout, "deadline of one engine request attempt")
	fs.IntVar(&f.retries, "engine-retries", defaultEngineRetries, "attempts per engine request, across endpoints, before the episode is infra_error")
	fs.IntVar(&f.vocab, "engine-vocab", 0, "the model's vocabulary size: ids outside it are engine faults (0: from --tokenizer, else unchecked)")
}

func (f engineFlags) validate() error {
	if f.timeout <= 0 {
		return fmt.Errorf("--engine-timeout %v must be > 0", f.timeout)
	}
	if f.retries < 1 {
		return fmt.Errorf("--engine-retries %d must be ≥ 1", f.retries)
	}
	if f.vocab < 0 {
		return fmt.Errorf("--engine-vocab %d must be ≥ 0", f.vocab)
	}
	return nil
}

// engineSpec is everything buildEngineAgent needs.
type engineSpec struct {
	urls, kind, model string
	maxConc           int
	tok               tokenFlags
	seed              int64
	flags             engineFlags
}

// buildEngineAgent builds the agent loop over a pool of HTTP engines. The
// remote tokenizer (nil with --tokenizer) spans every endpoint, with the
// pool's failover; its swallowed failures must taint the episodes they
// happen in (rollout.Config.Taint).
func buildEngineAgent(ctx context.Context, cfg agent.Config, s engineSpec, wrap ...samplerWrap) (*agent.Agent, *remote.Tokenizer, error) {
	if s.urls == "" {
		return nil, nil, errors.New("--engine URL[,URL…] is required with --policy engine (or use --policy oracle|empty)")
	}
	if err := s.flags.validate(); err != nil {
		return nil, nil, err
	}
	var eps []remote.Endpoint
	for _, u := range strings.Split(s.urls, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		spec := s.kind + "=" + u
		if s.model != "" {
			spec += ",model=" + s.model
		}
		ep, err := remote.ParseEndpoint(spec)
		if err != nil {
			return nil, nil, fmt.Errorf("--engine: %w", err)
		}
		ep.MaxConcurrent = s.maxConc
		eps = append(eps, ep)
	}
	if len(eps) == 0 {
		return nil, nil, fmt.Errorf("--engine %q: no URL", s.urls)
	}
	var tmpl agent.Template
	haveTmpl := false
	if s.tok.template != "" {
		var err error
		if tmpl, err = parseTemplate(s.tok.template); err != nil {
			return nil, nil, err
		}
		haveTmpl = true
	}
	if err := s.tok.check(); err != nil {
		return nil, nil, err
	}
	var format agent.Format // a real model's chat template, chosen by formatFor
	vocab := s.flags.vocab
	var tok agent.Tokenizer
	var rt *remote.Tokenizer
	if s.tok.path != "" {
		t, err := tokenizer.Load(s.tok.path)
		if err != nil {
			return nil, nil, fmt.Errorf("--tokenizer: %w", err)
		}
		tok = t
		if vocab == 0 {
			vocab = t.VocabSize()
		}
		if !haveTmpl {
			if format, err = formatFor(t, s.tok.path, s.tok.chat); err != nil {
				return nil, nil, err
			}
		}
	} else {
		if !haveTmpl {
			return nil, nil, errors.New("--template system,user,assistant,observation,summary,end (token ids of the engine's vocabulary) is required without --tokenizer")
		}
		var err error
		if rt, err = remote.DialTokenizer(nil, eps...); err != nil {
			return nil, nil, fmt.Errorf("--engine: %w (give --tokenizer FILE)", err)
		}
		rt.Bind(ctx)
		rt.Timeout = min(rt.Timeout, s.flags.timeout)
		rt.Attempts = max(s.flags.retries, len(eps))
		tok = rt
	}
	pool, err := remote.Dial(remote.PoolConfig{Seed: s.seed, Timeout: s.flags.timeout, MaxAttempts: s.flags.retries, VocabSize: vocab}, nil, eps...)
	if err != nil {
		return nil, nil, fmt.Errorf("--engine: %w", err)
	}
	if format != nil {
		a, err := agent.NewWithFormat(cfg, tok, format, wrapSampler(pool, wrap))
		return a, rt, err
	}
	a, err := agent.New(cfg, tok, tmpl, wrapSampler(pool, wrap))
	return a, rt, err
}

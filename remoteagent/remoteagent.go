// Package remoteagent builds the agent loop over a pool of HTTP inference
// engines (llama.cpp, vLLM, SGLang, …), for `compactrl eval` and
// `compactrl serve`.
//
// Data flow: a Spec (endpoints already validated, how text becomes the
// engine's token ids, the pool's settings) → each endpoint's sampling and
// seed checks → the encoding (a local tokenizer with compactrl's six-token
// template or the model's chat format, else the engines' own /tokenize
// with the template) → remote.Dial (the pool with failover) → the
// optional sampler wrappers → agent.New or agent.NewWithFormat.
package remoteagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/infer/remote"
)

// Spec describes the engines and how the agent speaks to them.
type Spec struct {
	Endpoints []remote.Endpoint // at least one, each Validate'd
	// Tokenizer is a tokenizer.json or GGUF file of the served model; ""
	// tokenizes through the engines' /tokenize (Template is then needed).
	Tokenizer string
	// Template is compactrl's six-token template as token ids
	// "system,user,assistant,observation,summary,end" (agent.ParseTemplate);
	// "" with a Tokenizer: its own six ids, else the model's chat format.
	Template string
	// ChatTemplate picks the chat format (agent.ChooseChatFormat's spec);
	// it needs Tokenizer and excludes Template.
	ChatTemplate string
	Seed         int64         // the pool's seed (request seeds derive from the episode's)
	Timeout      time.Duration // one request attempt's deadline (> 0)
	Retries      int           // attempts per request across endpoints (≥ 1)
	Vocab        int           // ids at or past it are engine faults (0: the Tokenizer's size, else unchecked)
	Warn         io.Writer     // start-up warnings (nil: os.Stderr)
	// Chat, when set, is told which template lays out the prompts.
	Chat func(template string)
	// Client makes every call to the engines (nil: a fresh client).
	Client *http.Client
	// Wrap decorate the pool's sampler, in order (serve times every call).
	Wrap []func(infer.Sampler) infer.Sampler
}

// ErrSampling marks a sampling configuration an engine cannot record
// log-probabilities for.
var ErrSampling = errors.New("sampling")

// Build builds the agent loop cfg over the engines of s. Without a
// Tokenizer the agent tokenizes through the engines' /tokenize, spanning
// every endpoint with the pool's failover; a failed call ends only the
// episode that made it. ctx bounds the calls made while building.
func Build(ctx context.Context, cfg agent.Config, s Spec) (*agent.Agent, error) {
	switch {
	case len(s.Endpoints) == 0:
		return nil, errors.New("--engine URL[,URL…] is required with --policy engine (or use --policy oracle|empty)")
	}
	if err := s.CheckPool(); err != nil {
		return nil, err
	}
	if err := s.CheckEncoding(); err != nil {
		return nil, err
	}
	for _, e := range s.Endpoints {
		if err := remote.CheckSampling(e, cfg.Temperature, cfg.TopP); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSampling, err)
		}
	}
	if err := s.checkSeeds(ctx); err != nil {
		return nil, err
	}
	enc, err := s.encoding()
	if err != nil {
		return nil, err
	}
	pool, err := remote.Dial(remote.PoolConfig{Seed: s.Seed, Timeout: s.Timeout, MaxAttempts: s.Retries, VocabSize: enc.vocab}, s.Client, s.Endpoints...)
	if err != nil {
		return nil, fmt.Errorf("--engine: %w", err)
	}
	if s.Chat != nil {
		s.Chat(enc.template)
	}
	var sampler infer.Sampler = pool
	for _, w := range s.Wrap {
		sampler = w(sampler)
	}
	if enc.format != nil {
		return agent.NewWithFormat(ctx, cfg, enc.tok, enc.format, sampler)
	}
	return agent.New(ctx, cfg, enc.tok, enc.tmpl, sampler)
}

// CheckPool checks the pool's settings: Timeout > 0, Retries ≥ 1,
// Vocab ≥ 0 (the command line checks its flags with it at start-up).
func (s Spec) CheckPool() error {
	switch {
	case s.Timeout <= 0:
		return fmt.Errorf("--engine-timeout %v must be > 0", s.Timeout)
	case s.Retries < 1:
		return fmt.Errorf("--engine-retries %d must be ≥ 1", s.Retries)
	case s.Vocab < 0:
		return fmt.Errorf("--engine-vocab %d must be ≥ 0", s.Vocab)
	}
	return nil
}

// CheckEncoding refuses a chat template without a local tokenizer (the
// engines' /tokenize cannot encode its special tokens) or beside a
// six-token template.
func (s Spec) CheckEncoding() error {
	if s.ChatTemplate != "" && (s.Tokenizer == "" || s.Template != "") {
		return errors.New("--chat-template needs --tokenizer and excludes --template")
	}
	return nil
}

// checkSeeds asks every endpoint whose engine may ignore or refuse seeds
// (remote.SeedChecker: SGLang) whether it honours them: one that would
// fail every request is refused; one that ignores the seed is said once
// (its episodes are not reproducible from their seeds), as is one that
// cannot be asked.
func (s Spec) checkSeeds(ctx context.Context) error {
	w := s.Warn
	if w == nil {
		w = os.Stderr
	}
	for _, e := range s.Endpoints {
		eng, err := e.Engine(s.Client)
		if err != nil {
			return fmt.Errorf("--engine: %w", err)
		}
		c, ok := eng.(remote.SeedChecker)
		if !ok {
			continue
		}
		warning, err := c.CheckSeeds(ctx)
		if err != nil {
			return fmt.Errorf("--engine %s: %w", e.URL, err)
		}
		if warning != "" {
			fmt.Fprintf(w, "warning: %s\n", warning)
		}
	}
	return nil
}

// encoding is how the agent turns text into the engine's token ids and
// lays out its turns.
type encoding struct {
	tok      agent.Tokenizer
	tmpl     agent.Template // Template's six ids
	format   agent.Format   // a real model's chat format; nil with Template
	template string         // which template lays out the prompts
	vocab    int            // ids at or past it are engine faults (0: unchecked)
}

// encoding is the Tokenizer (with Template, or the chat format
// agent.ChooseFormat picks), else the engines' own /tokenize with Template.
func (s Spec) encoding() (encoding, error) {
	enc := encoding{vocab: s.Vocab}
	if s.Template != "" {
		var err error
		enc.template = "--template " + s.Template
		if enc.tmpl, err = agent.ParseTemplate(s.Template); err != nil {
			return enc, err
		}
	}
	if s.Tokenizer == "" {
		if s.Template == "" {
			return enc, errors.New("--template system,user,assistant,observation,summary,end (token ids of the engine's vocabulary) is required without --tokenizer")
		}
		rt, err := remote.DialTokenizer(s.Client, s.Endpoints...)
		if err != nil {
			return enc, fmt.Errorf("--engine: %w (give --tokenizer FILE)", err)
		}
		rt.Timeout = min(rt.Timeout, s.Timeout)
		rt.Attempts = max(s.Retries, len(s.Endpoints))
		enc.tok = rt
		return enc, nil
	}
	t, err := format.ReadTokenizer(s.Tokenizer)
	if err != nil {
		return enc, fmt.Errorf("--tokenizer: %w", err)
	}
	enc.tok = agent.Local(t)
	if enc.vocab == 0 {
		enc.vocab = t.VocabSize()
	}
	if s.Template == "" {
		enc.format, enc.template, err = agent.ChooseFormat(t, s.Tokenizer, s.ChatTemplate)
	}
	return enc, err
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/infer/remote"
)

// engineFlags bound what a slow or failing engine can cost: one attempt's
// deadline and the attempts per request (so a hung engine costs at most
// about timeout × retries per request, plus the backoff), and the
// vocabulary size against which every id is checked.
type engineFlags struct {
	timeout time.Duration
	retries int
	vocab   int
	// seed is whether requests carry their seed (remote.SeedRequest,
	// remote.SeedNone).
	seed string
	// options are the engine kinds' own settings (remote.KindOptions), by
	// option name, each from its flag; one missing has its default.
	options map[string]string
}

// optionFlag is the flag of one engine kind's option, stored in an
// engineFlags' options.
type optionFlag struct {
	m    map[string]string
	name string
}

func (o optionFlag) String() string { return o.m[o.name] } // nil m: the zero value, for flag's help
func (o optionFlag) Set(v string) error {
	o.m[o.name] = v
	return nil
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
	f.options = map[string]string{}
	for _, o := range remote.KindOptions() {
		f.options[o.Name] = o.Default()
		fs.Var(optionFlag{f.options, o.Name}, o.Flag, o.Usage+" ("+o.Kind+" engines)")
	}
	fs.StringVar(&f.seed, "engine-seed", remote.SeedRequest, "engine seeds: "+remote.SeedRequest+" (each request carries its seed, derived from the episode's) or "+
		remote.SeedNone+" (none sent; for an SGLang without sampling_seed)")
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
	for _, o := range remote.KindOptions() {
		if err := o.Check(f.options[o.Name]); err != nil {
			return fmt.Errorf("--%s %w", o.Flag, err)
		}
	}
	switch f.seed {
	case "", remote.SeedRequest, remote.SeedNone:
	default:
		return fmt.Errorf("--engine-seed %q: want %s or %s", f.seed, remote.SeedRequest, remote.SeedNone)
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
	warn              io.Writer // where start-up warnings go (nil: os.Stderr)
	// chat, when set, is told which template lays out the prompts
	// (formatFor's description; --template's ids otherwise).
	chat func(template string)
	// client makes every call to the engines (nil: a fresh client); serve
	// passes one that dials only its --engine-allow addresses.
	client *http.Client
}

// errSampling marks a sampling configuration an engine cannot record
// log-probabilities for (serve answers it naming the sampling field).
var errSampling = errors.New("sampling")

// buildEngineAgent builds the agent loop over a pool of HTTP engines.
// Without --tokenizer the agent tokenizes through the engines' /tokenize,
// spanning every endpoint with the pool's failover; a failed call ends
// only the episode that made it. ctx bounds the calls made while building.
func buildEngineAgent(ctx context.Context, cfg agent.Config, s engineSpec, wrap ...samplerWrap) (*agent.Agent, error) {
	if s.urls == "" {
		return nil, errors.New("--engine URL[,URL…] is required with --policy engine (or use --policy oracle|empty)")
	}
	if err := s.flags.validate(); err != nil {
		return nil, err
	}
	eps, err := s.endpoints()
	if err != nil {
		return nil, err
	}
	for _, e := range eps {
		if err := remote.CheckSampling(e, cfg.Temperature, cfg.TopP); err != nil {
			return nil, fmt.Errorf("%w: %v", errSampling, err)
		}
	}
	if err := s.checkSeeds(ctx, eps); err != nil {
		return nil, err
	}
	enc, err := s.encoding(eps)
	if err != nil {
		return nil, err
	}
	pool, err := remote.Dial(remote.PoolConfig{Seed: s.seed, Timeout: s.flags.timeout, MaxAttempts: s.flags.retries, VocabSize: enc.vocab}, s.client, eps...)
	if err != nil {
		return nil, fmt.Errorf("--engine: %w", err)
	}
	if s.chat != nil {
		s.chat(enc.template)
	}
	if enc.format != nil {
		return agent.NewWithFormat(ctx, cfg, enc.tok, enc.format, wrapSampler(pool, wrap))
	}
	return agent.New(ctx, cfg, enc.tok, enc.tmpl, wrapSampler(pool, wrap))
}

// endpoints parses --engine's comma-separated URLs as endpoints of
// --engine-kind (with --model, --engine-concurrency, --engine-seed and the
// kind's own option flags).
func (s engineSpec) endpoints() ([]remote.Endpoint, error) {
	var eps []remote.Endpoint
	for _, u := range strings.Split(s.urls, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		ep := remote.Endpoint{Kind: s.kind, URL: u, Model: s.model, MaxConcurrent: s.maxConc, Seed: s.flags.seed}
		for _, o := range remote.KindOptions() {
			if v := s.flags.options[o.Name]; o.Kind == ep.Kind && v != "" {
				if ep.Options == nil {
					ep.Options = map[string]string{}
				}
				ep.Options[o.Name] = v
			}
		}
		if err := ep.Validate(); err != nil {
			return nil, fmt.Errorf("--engine: %w", err)
		}
		eps = append(eps, ep)
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("--engine %q: no URL", s.urls)
	}
	return eps, nil
}

// checkSeeds asks every endpoint whose engine may ignore or refuse seeds
// (remote.SeedChecker: SGLang) whether it honours them: one that would
// fail every request is refused; one that ignores the seed is said once
// (its episodes are not reproducible from their seeds), as is one that
// cannot be asked.
func (s engineSpec) checkSeeds(ctx context.Context, eps []remote.Endpoint) error {
	w := s.warn
	if w == nil {
		w = os.Stderr
	}
	for _, e := range eps {
		eng, err := e.Engine(s.client)
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

// engineEncoding is how the agent turns text into the engine's token ids
// and lays out its turns.
type engineEncoding struct {
	tok      agent.Tokenizer
	tmpl     agent.Template // --template's six ids
	format   agent.Format   // a real model's chat format (formatFor); nil with --template
	template string         // which template lays out the prompts
	vocab    int            // ids at or past it are engine faults (0: unchecked)
}

// encoding is --tokenizer (with --template, or the chat format formatFor
// picks), else the engines' own /tokenize with --template.
func (s engineSpec) encoding(eps []remote.Endpoint) (engineEncoding, error) {
	enc := engineEncoding{vocab: s.flags.vocab}
	haveTmpl := s.tok.template != ""
	if haveTmpl {
		var err error
		enc.template = "--template " + s.tok.template
		if enc.tmpl, err = parseTemplate(s.tok.template); err != nil {
			return enc, err
		}
	}
	if err := s.tok.check(); err != nil {
		return enc, err
	}
	if s.tok.path == "" {
		if !haveTmpl {
			return enc, errors.New("--template system,user,assistant,observation,summary,end (token ids of the engine's vocabulary) is required without --tokenizer")
		}
		rt, err := remote.DialTokenizer(s.client, eps...)
		if err != nil {
			return enc, fmt.Errorf("--engine: %w (give --tokenizer FILE)", err)
		}
		rt.Timeout = min(rt.Timeout, s.flags.timeout)
		rt.Attempts = max(s.flags.retries, len(eps))
		enc.tok = rt
		return enc, nil
	}
	t, err := format.ReadTokenizer(s.tok.path)
	if err != nil {
		return enc, fmt.Errorf("--tokenizer: %w", err)
	}
	enc.tok = agent.Local(t)
	if enc.vocab == 0 {
		enc.vocab = t.VocabSize()
	}
	if !haveTmpl {
		enc.format, enc.template, err = formatFor(t, s.tok.path, s.tok.chat)
	}
	return enc, err
}

package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/compactrl/compactrl/infer/remote"
	"github.com/compactrl/compactrl/remoteagent"
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
		fs.Var(optionFlag{f.options, o.Name}, o.Flag(), o.Usage+" ("+o.Kind+" engines)")
	}
	fs.StringVar(&f.seed, "engine-seed", remote.SeedRequest, "engine seeds: "+remote.SeedRequest+" (each request carries its seed, derived from the episode's) or "+
		remote.SeedNone+" (none sent; for an SGLang without sampling_seed)")
}

func (f engineFlags) validate() error {
	if err := (remoteagent.Spec{Timeout: f.timeout, Retries: f.retries, Vocab: f.vocab}).CheckPool(); err != nil {
		return err
	}
	for _, o := range remote.KindOptions() {
		if err := o.Check(f.options[o.Name]); err != nil {
			return fmt.Errorf("--%s %w", o.Flag(), err)
		}
	}
	switch f.seed {
	case "", remote.SeedRequest, remote.SeedNone:
	default:
		return fmt.Errorf("--engine-seed %q: want %s or %s", f.seed, remote.SeedRequest, remote.SeedNone)
	}
	return nil
}

// endpoints parses --engine's comma-separated URLs as endpoints of kind
// (with model, maxConc, --engine-seed and the kind's own option flags).
func (f engineFlags) endpoints(urls, kind, model string, maxConc int) ([]remote.Endpoint, error) {
	var eps []remote.Endpoint
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		ep := remote.Endpoint{Kind: kind, URL: u, Model: model, MaxConcurrent: maxConc, Seed: f.seed}
		for _, o := range remote.KindOptions() {
			if v := f.options[o.Name]; o.Kind == ep.Kind && v != "" {
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
	if len(eps) == 0 && urls != "" {
		return nil, fmt.Errorf("--engine %q: no URL", urls)
	}
	return eps, nil
}

// spec is the remoteagent.Spec of eps with the token and engine flags.
func (f engineFlags) spec(eps []remote.Endpoint, tok tokenFlags, seed int64) remoteagent.Spec {
	return remoteagent.Spec{Endpoints: eps, Tokenizer: tok.path, Template: tok.template, ChatTemplate: tok.chat,
		Seed: seed, Timeout: f.timeout, Retries: f.retries, Vocab: f.vocab}
}

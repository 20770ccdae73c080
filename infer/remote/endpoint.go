package remote

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/compactrl/compactrl/infer"
)

// The engine kinds of this package (each registers itself: RegisterKind).
const (
	KindLlamaCpp = "llamacpp"
	KindVLLM     = "vllm"
	KindSGLang   = "sglang"
)

// Endpoint describes one inference server.
type Endpoint struct {
	Kind          string // a registered EngineKind: KindLlamaCpp, KindVLLM, KindSGLang, …
	URL           string // base URL, e.g. http://10.0.0.5:8000
	Model         string // vLLM's model name; unused by the others
	MaxConcurrent int    // in-flight limit in a Pool; ≤ 0: DefaultMaxConcurrent
	// Options are settings of the endpoint's kind (EngineKind.Options, by
	// KindOption.Name), e.g. vLLM's "logprobs" (OptLogprobs); an absent
	// one has its default. Only the kind's own options may be set.
	Options map[string]string
	// Seed is SeedRequest ("" too: every request carries its seed) or
	// SeedNone (no seed is sent; the engine draws from its own randomness).
	Seed string
}

// ParseEndpoint reads
// "KIND=URL[,model=NAME][,max=N][,seed=request|none][,OPTION=VALUE…]", the
// OPTIONs being the kind's own (EngineKind.Options), for example
// "vllm=http://10.0.0.5:8000,model=Qwen/Qwen3-8B,max=64,logprobs=processed_logprobs".
func ParseEndpoint(spec string) (Endpoint, error) {
	parts := strings.Split(spec, ",")
	kind, u, ok := strings.Cut(parts[0], "=")
	if !ok {
		return Endpoint{}, fmt.Errorf("endpoint %q: want KIND=URL[,model=NAME][,max=N][,seed=request|none][,OPTION=VALUE…]", spec)
	}
	e := Endpoint{Kind: strings.TrimSpace(kind), URL: strings.TrimSpace(u)}
	if err := CheckKind(e.Kind); err != nil {
		return Endpoint{}, fmt.Errorf("endpoint %q: %w", spec, err)
	}
	pu, err := url.Parse(e.URL)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return Endpoint{}, fmt.Errorf("endpoint %q: URL %q is not an http(s) URL", spec, e.URL)
	}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return Endpoint{}, fmt.Errorf("endpoint %q: option %q is not key=value", spec, kv)
		case k == "model":
			e.Model = v
		case k == "max":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return Endpoint{}, fmt.Errorf("endpoint %q: max=%q is not a positive integer", spec, v)
			}
			e.MaxConcurrent = n
		case k == "seed":
			if err := checkSeedMode(v); err != nil {
				return Endpoint{}, fmt.Errorf("endpoint %q: %w", spec, err)
			}
			e.Seed = v
		default:
			if e.Options == nil {
				e.Options = map[string]string{}
			}
			e.Options[k] = v
			if err := e.checkOption(k); err != nil {
				return Endpoint{}, fmt.Errorf("endpoint %q: %w", spec, err)
			}
		}
	}
	return e, nil
}

// Validate checks an Endpoint built in code (a command line's flags, a
// rollout request) as ParseEndpoint checks a spec: a registered kind, an
// http(s) URL with a host, a seed mode, and only the kind's own options
// with valid values. Its fields are taken as they are: a model name may
// hold any character, a comma included.
func (e Endpoint) Validate() error {
	if err := CheckKind(e.Kind); err != nil {
		return fmt.Errorf("endpoint %s: %w", e.URL, err)
	}
	pu, err := url.Parse(e.URL)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return fmt.Errorf("endpoint: URL %q is not an http(s) URL", e.URL)
	}
	if e.Seed != "" {
		if err := checkSeedMode(e.Seed); err != nil {
			return fmt.Errorf("endpoint %s: %w", e.URL, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(e.Options)) {
		if err := e.checkOption(name); err != nil {
			return fmt.Errorf("endpoint %s: %w", e.URL, err)
		}
	}
	return nil
}

// checkOption checks e.Options[name]: an option of e's kind (naming the
// kind that owns it otherwise) with one of its values.
func (e Endpoint) checkOption(name string) error {
	o, ok := LookupOption(name)
	switch {
	case !ok:
		return fmt.Errorf("unknown option %q", name)
	case o.Kind != e.Kind:
		return fmt.Errorf("option %s is a setting of %s engines, not of %s", name, o.Kind, e.Kind)
	}
	if err := o.Check(e.Options[name]); err != nil {
		return fmt.Errorf("%s=%w", name, err)
	}
	return nil
}

// Option is e's value of its kind's option name, the option's default
// when unset ("" when the kind has no such option).
func (e Endpoint) Option(name string) string {
	if v := e.Options[name]; v != "" {
		return v
	}
	if o, ok := LookupOption(name); ok && o.Kind == e.Kind {
		return o.Default()
	}
	return ""
}

// ParseEndpoints reads several endpoint specs separated by ';' or
// whitespace, e.g. "vllm=http://a:8000,model=M;vllm=http://b:8000,model=M".
func ParseEndpoints(specs string) ([]Endpoint, error) {
	fields := strings.FieldsFunc(specs, func(r rune) bool { return r == ';' || r == ' ' || r == '\t' || r == '\n' })
	if len(fields) == 0 {
		return nil, fmt.Errorf("endpoints %q: none given", specs)
	}
	out := make([]Endpoint, 0, len(fields))
	for _, f := range fields {
		e, err := ParseEndpoint(f)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Engine returns the single-attempt engine for e. A nil client means a
// fresh http.Client.
func (e Endpoint) Engine(client *http.Client) (infer.Sampler, error) {
	if err := checkSeedMode(e.Seed); err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", e.URL, err)
	}
	k, ok := LookupKind(e.Kind)
	if !ok {
		return nil, fmt.Errorf("endpoint %s: unknown kind %q", e.URL, e.Kind)
	}
	for _, name := range slices.Sorted(maps.Keys(e.Options)) {
		if err := e.checkOption(name); err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", e.URL, err)
		}
	}
	return k.New(e, httpClient(client)), nil
}

// Dial builds a Pool over endpoints, sharing client (nil: a fresh one).
func Dial(cfg PoolConfig, client *http.Client, endpoints ...Endpoint) (*Pool, error) {
	client = httpClient(client)
	bs := make([]Backend, len(endpoints))
	for i, e := range endpoints {
		s, err := e.Engine(client)
		if err != nil {
			return nil, err
		}
		bs[i] = Backend{Name: e.Kind + "=" + e.URL, Sampler: s, MaxConcurrent: e.MaxConcurrent}
	}
	return NewPool(cfg, bs...)
}

// EndpointKey is an Endpoint in comparable form: two endpoints that behave
// the same have equal keys (their options in sorted order).
type EndpointKey struct {
	Kind, URL, Model, Seed string
	MaxConcurrent          int
	Options                string // "name=value" pairs, sorted, NUL-separated
}

// Key is e's EndpointKey (for caches of what is built from an endpoint).
func (e Endpoint) Key() EndpointKey {
	opts := make([]string, 0, len(e.Options))
	for k, v := range e.Options {
		opts = append(opts, k+"="+v)
	}
	slices.Sort(opts)
	return EndpointKey{Kind: e.Kind, URL: e.URL, Model: e.Model, Seed: e.Seed, MaxConcurrent: e.MaxConcurrent, Options: strings.Join(opts, "\x00")}
}

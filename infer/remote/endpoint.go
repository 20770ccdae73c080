package remote

import (
	"fmt"
	"net/http"
	"net/url"
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
	// LogprobsMode is the log-probability mode the vLLM server was started
	// with (its --logprobs-mode): LogprobsRaw (vLLM's default, also what ""
	// means) or LogprobsProcessed. It decides which sampling settings the
	// endpoint may serve (CheckSampling). Unused by the other kinds.
	LogprobsMode string
	// Seed is SeedRequest ("" too: every request carries its seed) or
	// SeedNone (no seed is sent; the engine draws from its own randomness).
	Seed string
}

// ParseEndpoint reads
// "KIND=URL[,model=NAME][,max=N][,logprobs=MODE][,seed=request|none]", for
// example "vllm=http://10.0.0.5:8000,model=Qwen/Qwen3-8B,max=64,logprobs=processed_logprobs".
func ParseEndpoint(spec string) (Endpoint, error) {
	parts := strings.Split(spec, ",")
	kind, u, ok := strings.Cut(parts[0], "=")
	if !ok {
		return Endpoint{}, fmt.Errorf("endpoint %q: want KIND=URL[,model=NAME][,max=N][,logprobs=MODE][,seed=request|none]", spec)
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
		case k == "logprobs":
			if err := checkLogprobsMode(v); err != nil {
				return Endpoint{}, fmt.Errorf("endpoint %q: %w", spec, err)
			}
			e.LogprobsMode = v
		case k == "seed":
			if err := checkSeedMode(v); err != nil {
				return Endpoint{}, fmt.Errorf("endpoint %q: %w", spec, err)
			}
			e.Seed = v
		default:
			return Endpoint{}, fmt.Errorf("endpoint %q: unknown option %q", spec, k)
		}
	}
	return e, nil
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
	if err := checkLogprobsMode(e.LogprobsMode); err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", e.URL, err)
	}
	if err := checkSeedMode(e.Seed); err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", e.URL, err)
	}
	k, ok := LookupKind(e.Kind)
	if !ok {
		return nil, fmt.Errorf("endpoint %s: unknown kind %q", e.URL, e.Kind)
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

package remote

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/compactrl/compactrl/infer"
)

// EngineKind is one kind of inference server: the name an Endpoint (and
// --engine-kind, serve's engine.kind, ParseEndpoint's KIND=) gives it, and
// how to build the engine that samples from it. What an engine can do
// beyond infer.Sampler it says by implementing the optional capabilities
// SamplingChecker, SeedChecker and TextCodec.
//
// # Adding an engine kind
//
// One new file or package and one registration line: the engine (an
// infer.Sampler, token ids in, ids and log-probs out, one attempt per
// Sample; see LlamaCpp) and, in an init function,
//
//	func init() {
//		remote.RegisterKind(remote.EngineKind{Name: "myengine", New: func(e remote.Endpoint, c *http.Client) infer.Sampler {
//			return NewMyEngine(e.URL, e.Model, c)
//		}})
//	}
//
// A package outside remote is linked into the command line with a blank
// import in cmd/compactrl. The CLI's flags, serve's API validation,
// ParseEndpoint and their error messages all read the registry.
//
// A kind whose servers are started with a setting that changes what
// compactrl may ask of them declares it as a KindOption in the same
// registration; the engine reads it from Endpoint.Options:
//
//	remote.RegisterKind(remote.EngineKind{Name: "myengine",
//		Options: []remote.KindOption{{Name: "scores", Field: "scores",
//			Values: []string{"raw", "processed"}, Usage: "what the myengine servers' log-probs are"}},
//		New: func(e remote.Endpoint, c *http.Client) infer.Sampler {
//			return NewMyEngine(e.URL, e.Model, e.Option("scores"), c)
//		}})
//
// With that line, "myengine=http://h:8000,scores=processed" parses,
// compactrl eval and serve take --engine-scores, serve's requests take
// engine.scores, and all three refuse a value outside Values.
type EngineKind struct {
	Name string
	// New returns the single-attempt engine of endpoint e (e.Kind is Name;
	// e.Options and e.Seed are checked). client is shared by every
	// endpoint of a pool and never nil.
	New func(e Endpoint, client *http.Client) infer.Sampler
	// NoTokenizer says why the kind's servers cannot be the agent's remote
	// tokenizer (its engine is no TextCodec); "": a general reason.
	NoTokenizer string
	// Options are the settings this kind's endpoints carry (vLLM's
	// --logprobs-mode): names unique across every registered kind.
	Options []KindOption
}

// KindOption is a setting of one engine kind: how its servers were
// started, which decides what compactrl may ask of them. The registry
// turns it into an endpoint spec key (Name=VALUE, ParseEndpoint), a
// command-line flag (--Flag, default Values[0]) and a field of serve's
// request (engine.Field), each checked against Values.
type KindOption struct {
	Name   string   // ParseEndpoint's key and Endpoint.Options' key
	Field  string   // serve's request field under "engine"; the command line's flag is derived from it (Flag)
	Values []string // the accepted values, the default first
	Usage  string   // the flag's help text
}

// Check accepts "" (the default) and the values of Values.
func (o KindOption) Check(v string) error {
	if v == "" || slices.Contains(o.Values, v) {
		return nil
	}
	return fmt.Errorf("%q: want %s", v, orList(o.Values))
}

// Flag is the command line's flag, without "--": "engine-" and Field
// with dashes for underscores (vLLM's logprobs_mode: engine-logprobs-mode).
func (o KindOption) Flag() string { return "engine-" + strings.ReplaceAll(o.Field, "_", "-") }

// Default is the value an endpoint without the option has: Values[0].
func (o KindOption) Default() string { return o.Values[0] }

// SamplingChecker is an engine that cannot record log q(token), q the
// distribution it samples from, for every sampling setting: CheckSampling
// refuses those it cannot, naming the server or compactrl setting that
// fixes it. Greedy requests (temperature 0) are always accepted. See the
// package function CheckSampling.
type SamplingChecker interface {
	CheckSampling(temperature, topP float64) error
}

// SeedChecker is an engine whose server may ignore or refuse the seeds
// requests carry: CheckSeeds asks it. warning (not an error) says that
// episodes will not be reproducible from their seeds; err that every
// request would fail, and how to start instead.
type SeedChecker interface {
	CheckSeeds(ctx context.Context) (warning string, err error)
}

// TextCodec is an engine whose server turns text into the model's token
// ids and back, special-token text kept plain (no control ids from an
// observation's "<|im_end|>"): one attempt each. DialTokenizer builds the
// remote Tokenizer over such engines.
type TextCodec interface {
	Tokenize(ctx context.Context, text string) ([]int, error)
	Detokenize(ctx context.Context, ids []int) (string, error)
}

var (
	kindsMu sync.RWMutex
	kinds   = map[string]EngineKind{}
)

// Keys every endpoint has, which no KindOption may take: ParseEndpoint's
// and serve's engine fields.
var (
	commonSpecKeys  = []string{"model", "max", "seed"}
	commonFieldKeys = []string{"url", "kind", "model", "seed_mode"}
)

// RegisterKind makes engine kind k available under k.Name. It panics when
// the name is empty or taken, New is nil, or an option is incomplete or
// takes a name, flag or field another kind's option (or every endpoint)
// has: programming errors, found at start-up.
func RegisterKind(k EngineKind) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	switch {
	case k.Name == "" || k.New == nil:
		panic("remote: RegisterKind needs a name and a constructor")
	case kinds[k.Name].New != nil:
		panic("remote: engine kind " + k.Name + " registered twice")
	}
	for i, o := range k.Options {
		if o.Name == "" || o.Field == "" || len(o.Values) == 0 || slices.Contains(o.Values, "") {
			panic("remote: engine kind " + k.Name + ": an option needs a name, a flag, a field and non-empty values")
		}
		if slices.Contains(commonSpecKeys, o.Name) || slices.Contains(commonFieldKeys, o.Field) {
			panic("remote: engine kind " + k.Name + ": option " + o.Name + " takes a key every endpoint has")
		}
		taken := func(p KindOption) bool { return p.Name == o.Name || p.Field == o.Field }
		if slices.ContainsFunc(k.Options[:i], taken) {
			panic("remote: engine kind " + k.Name + ": option " + o.Name + " declared twice")
		}
		for _, other := range kinds {
			if slices.ContainsFunc(other.Options, taken) {
				panic("remote: engine kind " + k.Name + ": option " + o.Name + " collides with kind " + other.Name + "'s")
			}
		}
	}
	kinds[k.Name] = k
}

// KindOptions are every registered kind's options, sorted by name, each
// with the kind that owns it.
func KindOptions() []OwnedOption {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	var out []OwnedOption
	for _, k := range kinds {
		for _, o := range k.Options {
			out = append(out, OwnedOption{Kind: k.Name, KindOption: o})
		}
	}
	slices.SortFunc(out, func(a, b OwnedOption) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// OwnedOption is a registered KindOption with the kind that declares it.
type OwnedOption struct {
	Kind string
	KindOption
}

// LookupOption returns the registered option named name (KindOption.Name),
// with the kind that owns it.
func LookupOption(name string) (OwnedOption, bool) {
	return findOption(func(o KindOption) bool { return o.Name == name })
}

// OptionByField returns the registered option that serve's requests carry
// as engine.field (KindOption.Field), with the kind that owns it.
func OptionByField(field string) (OwnedOption, bool) {
	return findOption(func(o KindOption) bool { return o.Field == field })
}

// findOption is the registered option match accepts (names, flags and
// fields are unique across kinds: RegisterKind).
func findOption(match func(KindOption) bool) (OwnedOption, bool) {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	for _, k := range kinds {
		if i := slices.IndexFunc(k.Options, match); i >= 0 {
			return OwnedOption{Kind: k.Name, KindOption: k.Options[i]}, true
		}
	}
	return OwnedOption{}, false
}

// LookupKind returns the engine kind registered as name.
func LookupKind(name string) (EngineKind, bool) {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	k, ok := kinds[name]
	return k, ok
}

// Kinds are the registered engine kinds' names, sorted.
func Kinds() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// KindList is Kinds for a message: "llamacpp, sglang or vllm".
func KindList() string { return orList(Kinds()) }

// CheckKind returns an error naming the registered kinds unless name is one.
func CheckKind(name string) error {
	if _, ok := LookupKind(name); ok {
		return nil
	}
	return fmt.Errorf("kind %q is not %s", name, KindList())
}

// tokenizerKinds are the kinds whose engines are TextCodecs.
func tokenizerKinds() []string {
	var out []string
	for _, n := range Kinds() {
		k, _ := LookupKind(n)
		if _, ok := k.New(Endpoint{Kind: n, URL: "http://localhost"}, http.DefaultClient).(TextCodec); ok {
			out = append(out, n)
		}
	}
	return out
}

// orList is "a", "a or b", "a, b or c".
func orList(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

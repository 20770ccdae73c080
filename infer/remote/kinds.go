package remote

import (
	"context"
	"fmt"
	"net/http"
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
type EngineKind struct {
	Name string
	// New returns the single-attempt engine of endpoint e (e.Kind is Name;
	// e.LogprobsMode and e.Seed are checked). client is shared by every
	// endpoint of a pool and never nil.
	New func(e Endpoint, client *http.Client) infer.Sampler
	// NoTokenizer says why the kind's servers cannot be the agent's remote
	// tokenizer (its engine is no TextCodec); "": a general reason.
	NoTokenizer string
}

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

// RegisterKind makes engine kind k available under k.Name. It panics when
// the name is empty or taken or New is nil (a programming error, found at
// start-up).
func RegisterKind(k EngineKind) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	switch {
	case k.Name == "" || k.New == nil:
		panic("remote: RegisterKind needs a name and a constructor")
	case kinds[k.Name].New != nil:
		panic("remote: engine kind " + k.Name + " registered twice")
	}
	kinds[k.Name] = k
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

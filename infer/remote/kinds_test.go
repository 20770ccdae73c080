package remote

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/infer"
)

func TestKindsRegistered(t *testing.T) {
	if got := Kinds(); !slices.Equal(got, []string{KindLlamaCpp, KindSGLang, KindVLLM}) {
		t.Fatalf("Kinds = %v", got)
	}
	if KindList() != "llamacpp, sglang or vllm" {
		t.Fatalf("KindList = %q", KindList())
	}
	if err := CheckKind("tgi"); err == nil || !strings.Contains(err.Error(), `kind "tgi" is not llamacpp, sglang or vllm`) {
		t.Fatalf("CheckKind(tgi) = %v", err)
	}
	if _, err := ParseEndpoint("tgi=http://x:1"); err == nil || !strings.Contains(err.Error(), "is not llamacpp, sglang or vllm") {
		t.Fatalf("ParseEndpoint(tgi) = %v", err)
	}
	// Capabilities: which kind does what.
	for kind, want := range map[string][3]bool{KindLlamaCpp: {false, false, true}, KindVLLM: {true, false, false}, KindSGLang: {true, true, false}} {
		s, err := Endpoint{Kind: kind, URL: "http://x:1"}.Engine(nil)
		if err != nil {
			t.Fatal(err)
		}
		_, sc := s.(SamplingChecker)
		_, seed := s.(SeedChecker)
		_, codec := s.(TextCodec)
		if got := [3]bool{sc, seed, codec}; got != want {
			t.Errorf("%s: SamplingChecker, SeedChecker, TextCodec = %v, want %v", kind, got, want)
		}
	}
	if got := tokenizerKinds(); !slices.Equal(got, []string{KindLlamaCpp}) {
		t.Errorf("tokenizerKinds = %v", got)
	}
}

func TestRegisterKindRefusesDuplicatesAndNil(t *testing.T) {
	for name, k := range map[string]EngineKind{
		"twice":  {Name: KindVLLM, New: func(Endpoint, *http.Client) infer.Sampler { return nil }},
		"no new": {Name: "x"},
		"noname": {New: func(Endpoint, *http.Client) infer.Sampler { return nil }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			RegisterKind(k)
		}()
	}
}

// fakeEngine is a kind added the documented way: a sampler and one
// registration.
type fakeEngine struct{ url string }

func (f fakeEngine) Sample(context.Context, infer.Request) (infer.Completion, error) {
	return infer.Completion{Tokens: []int{1}, Logprobs: []float64{-0.5}, FinishReason: infer.FinishLength}, nil
}

// A registered kind is parsed, dialled and sampled from like the built-in
// ones, without any other change.
func TestRegisterKindAddsAnEngine(t *testing.T) {
	RegisterKind(EngineKind{Name: "fake", New: func(e Endpoint, _ *http.Client) infer.Sampler { return fakeEngine{e.URL} }})
	t.Cleanup(func() {
		kindsMu.Lock()
		delete(kinds, "fake")
		kindsMu.Unlock()
	})
	if !strings.Contains(KindList(), "fake") {
		t.Fatalf("KindList = %q", KindList())
	}
	e, err := ParseEndpoint("fake=http://f:1,max=2")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSampling(e, 0.7, 0.9); err != nil {
		t.Fatalf("a kind without SamplingChecker refuses nothing: %v", err)
	}
	if _, err := DialTokenizer(nil, e); err == nil || !strings.Contains(err.Error(), `kind "fake" has no /tokenize endpoint here (want llamacpp)`) {
		t.Fatalf("DialTokenizer(fake) = %v", err)
	}
	p, err := Dial(testPoolConfig(), nil, e)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Sample(context.Background(), infer.Request{Prompt: []int{1}, MaxTokens: 1, Temperature: 1, TopP: 1})
	if err != nil || len(c.Tokens) != 1 {
		t.Fatalf("Sample = %+v, %v", c, err)
	}
}

// scoringEngine is a kind with an option of its own, added the documented
// way: the engine reads its option from the endpoint.
type scoringEngine struct{ scores string }

func (s scoringEngine) Sample(context.Context, infer.Request) (infer.Completion, error) {
	lp := -0.5
	if s.scores == "processed" {
		lp = -0.25
	}
	return infer.Completion{Tokens: []int{1}, Logprobs: []float64{lp}, FinishReason: infer.FinishLength}, nil
}

// registerScoring registers the "scoring" kind for one test.
func registerScoring(t *testing.T) {
	RegisterKind(EngineKind{Name: "scoring",
		Options: []KindOption{{Name: "scores", Field: "scores", Values: []string{"raw", "processed"}, Usage: "u"}},
		New:     func(e Endpoint, _ *http.Client) infer.Sampler { return scoringEngine{e.Option("scores")} }})
	t.Cleanup(func() {
		kindsMu.Lock()
		delete(kinds, "scoring")
		kindsMu.Unlock()
	})
}

// A kind's own option is parsed, checked and handed to its engine (its
// default when unset), listed with its owner, refused on other kinds, and
// cannot take another kind's (or every endpoint's) name, flag or field.
func TestKindOwnsItsOptions(t *testing.T) {
	registerScoring(t)
	var got []string
	for _, o := range KindOptions() {
		got = append(got, o.Kind+":"+o.Name+":"+o.Flag()+":"+o.Field)
	}
	if want := []string{"vllm:logprobs:engine-logprobs-mode:logprobs_mode", "scoring:scores:engine-scores:scores"}; !slices.Equal(got, want) {
		t.Fatalf("KindOptions = %v, want %v", got, want)
	}
	for spec, want := range map[string]float64{"scoring=http://s:1,scores=processed": -0.25, "scoring=http://s:1": -0.5} {
		e, err := ParseEndpoint(spec)
		if err != nil {
			t.Fatal(err)
		}
		s, err := e.Engine(nil)
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := s.Sample(context.Background(), infer.Request{}); c.Logprobs[0] != want {
			t.Errorf("%s: engine saw log-prob %v, want %v", spec, c.Logprobs[0], want)
		}
	}
	for spec, want := range map[string]string{
		"scoring=http://s:1,scores=cooked":   `scores="cooked": want raw or processed`,
		"vllm=http://s:1,scores=raw":         "option scores is a setting of scoring engines, not of vllm",
		"scoring=http://s:1,logprobs=raw_lp": "option logprobs is a setting of vllm engines, not of scoring",
	} {
		if _, err := ParseEndpoint(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", spec, err, want)
		}
	}
	newFn := func(Endpoint, *http.Client) infer.Sampler { return nil }
	for name, o := range map[string]KindOption{
		"same name":    {Name: "logprobs", Field: "f2", Values: []string{"a"}},
		"same field":   {Name: "n2", Field: "logprobs_mode", Values: []string{"a"}},
		"common key":   {Name: "max", Field: "f2", Values: []string{"a"}},
		"common field": {Name: "n2", Field: "seed_mode", Values: []string{"a"}},
		"no values":    {Name: "n2", Field: "f2"},
		"empty value":  {Name: "n2", Field: "f2", Values: []string{""}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: registered", name)
					kindsMu.Lock()
					delete(kinds, "other")
					kindsMu.Unlock()
				}
			}()
			RegisterKind(EngineKind{Name: "other", New: newFn, Options: []KindOption{o}})
		}()
	}
}

// Validate checks an Endpoint built from flags or a request as
// ParseEndpoint checks a spec, and takes a model name as it is (a comma in
// it broke the spec string the command line used to build).
func TestEndpointValidate(t *testing.T) {
	ok := Endpoint{Kind: KindVLLM, URL: "http://10.0.0.5:8000", Model: "org/model,v2", Options: map[string]string{OptLogprobs: LogprobsProcessed}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("%+v: %v", ok, err)
	}
	for _, bad := range []Endpoint{
		{Kind: "nope", URL: "http://a:1"},
		{Kind: KindVLLM, URL: "ftp://a"},
		{Kind: KindVLLM, URL: "http://"},
		{Kind: KindLlamaCpp, URL: "http://a:1", Options: map[string]string{OptLogprobs: LogprobsProcessed}},
		{Kind: KindVLLM, URL: "http://a:1", Seed: "sometimes"},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

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

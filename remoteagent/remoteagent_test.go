package remoteagent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/infer/remote"
)

func llamacpp(urls ...string) []remote.Endpoint {
	var eps []remote.Endpoint
	for _, u := range urls {
		eps = append(eps, remote.Endpoint{Kind: remote.KindLlamaCpp, URL: u})
	}
	return eps
}

// The engine tokenizer spans every endpoint: with the first one dead,
// tokenization (the agent's fixed texts, encoded while it is built) is
// served by the second.
func TestEngineTokenizerUsesEveryEndpoint(t *testing.T) {
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			w.Write([]byte(`{"tokens":[7,8]}`))
			return
		}
		http.Error(w, "no", 404)
	}))
	defer good.Close()
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	dead.Close()
	s := Spec{Endpoints: llamacpp(dead.URL, good.URL), Template: "1,2,3,4,5,6", Timeout: 2 * time.Second, Retries: 2}
	if _, err := Build(context.Background(), agent.DefaultConfig(), s); err != nil {
		t.Fatalf("agent over a dead and a good tokenizer: %v", err)
	}
	for _, bad := range []Spec{{Timeout: 0, Retries: 1}, {Timeout: time.Second, Retries: 0}, {Timeout: time.Second, Retries: 1, Vocab: -1}, {Timeout: time.Second, Retries: 1}} {
		bad.Template = "1,2,3,4,5,6"
		if bad.Retries != 1 || bad.Timeout != time.Second || bad.Vocab != 0 {
			bad.Endpoints = llamacpp(good.URL)
		}
		if _, err := Build(context.Background(), agent.DefaultConfig(), bad); err == nil {
			t.Errorf("spec %+v accepted", bad)
		}
	}
}

// A chat template needs a local tokenizer (the engine's /tokenize cannot
// encode the template's special tokens) and excludes the six-id template.
func TestChatTemplateNeedsTokenizer(t *testing.T) {
	base := Spec{Endpoints: llamacpp("http://127.0.0.1:9"), ChatTemplate: "qwen3", Timeout: time.Second, Retries: 1}
	both := base
	both.Tokenizer, both.Template = "x.json", "1,2,3,4,5,6"
	for _, s := range []Spec{base, both} {
		if _, err := Build(context.Background(), agent.DefaultConfig(), s); err == nil || !strings.Contains(err.Error(), "--chat-template needs --tokenizer") {
			t.Errorf("%+v: err %v", s, err)
		}
	}
}

// A sampling setting an endpoint cannot record log-probabilities for is
// ErrSampling (serve answers it naming the sampling field).
func TestSamplingRefusal(t *testing.T) {
	cfg := agent.DefaultConfig()
	cfg.TopP = 0.9
	s := Spec{Endpoints: []remote.Endpoint{{Kind: remote.KindVLLM, URL: "http://127.0.0.1:9", Model: "m"}}, Template: "1,2,3,4,5,6", Timeout: time.Second, Retries: 1}
	_, err := Build(context.Background(), cfg, s)
	if !errors.Is(err, ErrSampling) {
		t.Fatalf("top_p 0.9 on vLLM raw log-probs: %v", err)
	}
}

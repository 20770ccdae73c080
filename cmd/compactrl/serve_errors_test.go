package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/serve"
)

// A request whose agent configuration cannot make an agent is answered on
// field "agent" because its error is agent.ErrConfig (not by its text);
// the same engine with a valid configuration builds.
func TestServeRunnerAgentConfigField(t *testing.T) {
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			w.Write([]byte(`{"tokens":[7,8]}`))
			return
		}
		http.Error(w, "no", 404)
	}))
	defer eng.Close()
	f := &serveFactory{tok: tokenFlags{template: "1,2,3,4,5,6"}, flags: engineFlags{timeout: time.Second, retries: 1}, agents: map[serveKey]*agent.Agent{}}
	e := serve.Engine{URL: eng.URL, Kind: "llamacpp"}

	cfg := agent.DefaultConfig()
	cfg.Reserve = 8 // below the summary instruction plus the longest summary
	_, field, err := f.Runner(context.Background(), e, cfg)
	if !errors.Is(err, agent.ErrConfig) || field != "agent" {
		t.Fatalf("Runner: field %q, %v; want field agent and agent.ErrConfig", field, err)
	}
	if _, field, err := f.Runner(context.Background(), e, agent.DefaultConfig()); err != nil {
		t.Fatalf("valid config: field %q, %v", field, err)
	}
}

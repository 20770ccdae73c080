package main

import (
	"context"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/infer/remote"
	"github.com/compactrl/compactrl/serve"
)

// scoringKind is an engine kind added the documented way, with an option
// of its own; registered once for the package's tests.
var scoringKind sync.Once

type scoringSampler struct{}

func (scoringSampler) Sample(context.Context, infer.Request) (infer.Completion, error) {
	return infer.Completion{}, nil
}

func registerScoringKind() {
	scoringKind.Do(func() {
		remote.RegisterKind(remote.EngineKind{Name: "scoring",
			Options: []remote.KindOption{{Name: "scores", Field: "scores", Values: []string{"raw", "processed"}, Usage: "what the servers score"}},
			New:     func(remote.Endpoint, *http.Client) infer.Sampler { return scoringSampler{} }})
	})
}

// A registered kind's option becomes eval's and serve's flag (default its
// first value), is checked there, reaches only its own kind's endpoints,
// and a serve request's value overrides the server's flag for that
// request alone; vLLM's --engine-logprobs-mode is one such option.
func TestEngineKindOptionFlags(t *testing.T) {
	registerScoringKind()
	for _, newCmd := range []func() (*cmdLine, *engineFlags){
		func() (*cmdLine, *engineFlags) { c, o := newEvalCmd(); return c, &o.engine },
		func() (*cmdLine, *engineFlags) { c, o := newServeCmd(); return c, &o.engine },
	} {
		fs, ef := newCmd()
		if fs.Lookup("engine-scores") == nil || fs.Lookup("engine-logprobs-mode") == nil {
			t.Fatalf("%s: the kinds' option flags are not registered", fs.Name())
		}
		if ef.options["scores"] != "raw" || ef.options["logprobs"] != remote.LogprobsRaw {
			t.Fatalf("%s: defaults %v", fs.Name(), ef.options)
		}
		if _, err := fs.parse(env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}, []string{"--engine-scores", "cooked"}); err != nil {
			t.Fatal(err)
		}
		if err := ef.validate(); err == nil || err.Error() != `--engine-scores "cooked": want raw or processed` {
			t.Fatalf("%s: validate = %v", fs.Name(), err)
		}
	}

	fs, o := newEvalCmd()
	if _, err := fs.parse(env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}, []string{"--engine-scores", "processed", "--engine-logprobs-mode", remote.LogprobsProcessed}); err != nil {
		t.Fatal(err)
	}
	for kind, want := range map[string]map[string]string{"scoring": {"scores": "processed"}, "vllm": {"logprobs": remote.LogprobsProcessed}, "llamacpp": nil} {
		eps, err := o.engine.endpoints("http://h:1,http://h:2", kind, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range eps {
			if !maps.Equal(ep.Options, want) {
				t.Errorf("%s endpoint: options %v, want %v", kind, ep.Options, want)
			}
		}
	}

	server := o.engine
	req := server.forRequest(serve.Engine{Kind: "scoring", Options: map[string]string{"scores": "raw"}, SeedMode: remote.SeedNone})
	if req.options["scores"] != "raw" || req.seed != remote.SeedNone || server.options["scores"] != "processed" || server.seed != remote.SeedRequest {
		t.Fatalf("forRequest: request %v %q, server %v %q", req.options, req.seed, server.options, server.seed)
	}
}

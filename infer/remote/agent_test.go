package remote

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
)

// countEnv is a tiny task: it answers every reply with a long observation
// and ends after steps replies with reward 1.
type countEnv struct {
	steps, n int
}

func (e *countEnv) Reset(ctx context.Context) (string, error) { return "c0de", nil }

func (e *countEnv) Step(ctx context.Context, reply string) (agent.Step, error) {
	e.n++
	if e.n >= e.steps {
		return agent.Step{Done: true, Reward: 1}, nil
	}
	return agent.Step{Observation: strings.Repeat(fmt.Sprintf("%08x", e.n*2654435761), 8)}, nil
}

// recorder keeps every request and completion that passed through it.
type recorder struct {
	s     infer.Sampler
	mu    sync.Mutex
	calls map[int64][]call
}

type call struct {
	req infer.Request
	c   infer.Completion
}

func (r *recorder) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	c, err := r.s.Sample(ctx, req)
	if err == nil {
		r.mu.Lock()
		r.calls[episodeOf(req)] = append(r.calls[episodeOf(req)], call{req, c})
		r.mu.Unlock()
	}
	return c, err
}

// episodeOf recovers which episode a request belongs to from its prompt:
// each test episode's system prompt is a distinct token.
func episodeOf(req infer.Request) int64 { return int64(req.Prompt[1]) }

// Long episodes against the real server with the random model's 256-token
// window: the agent loop compacts, every segment fits, and the sampled
// tokens and log-probs in the episode are exactly those the server
// reported — checked against a fresh raw-distribution request per call.
func TestAgentLoopCompactsOnLlamaServer(t *testing.T) {
	url := needLlama(t)
	tok, err := NewTokenizer(KindLlamaCpp, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := Dial(PoolConfig{Seed: 2}, nil, Endpoint{Kind: KindLlamaCpp, URL: url, MaxConcurrent: llamaNSlots})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{s: pool, calls: map[int64][]call{}}
	tmpl := agent.Template{System: 120, User: 121, Assistant: 122, Observation: 123, Summary: 124, EndOfTurn: 125}
	cfg := agent.DefaultConfig()
	cfg.Context, cfg.Reserve = llamaCtx, 64
	cfg.MaxActionTokens, cfg.MaxSummaryTokens, cfg.MaxObservationTokens = 8, 16, 16
	cfg.SummaryInstruction, cfg.ResumeText = "2a", "3b"
	cfg.Temperature, cfg.TopP = 1, 1

	systems := []string{"1", "ff", "3b", "1234abcd"}
	eps := make([]episode.Episode, len(systems))
	errs := make([]error, len(systems))
	keys := make([]int64, len(systems))
	var wg sync.WaitGroup
	start := time.Now()
	for i, sys := range systems {
		c := cfg
		c.SystemPrompt = sys
		ids, err := tok.Encode(context.Background(), sys)
		if err != nil || len(ids) == 0 {
			t.Fatalf("encode %q: %v %v", sys, ids, err)
		}
		keys[i] = int64(ids[0])
		a, err := agent.New(context.Background(), c, tok, tmpl, rec)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			eps[i], errs[i] = a.Run(context.Background(), &countEnv{steps: 14}, int64(100+i))
		}()
	}
	wg.Wait()
	t.Logf("episodes done in %v", time.Since(start))
	for i := range eps {
		ep := eps[i]
		if errs[i] != nil || ep.Status != episode.StatusOK || ep.Reward != 1 {
			t.Fatalf("episode %d: %v, status %s (%v)", i, errs[i], ep.Status, ep.Meta)
		}
		if ep.Metrics[agent.MetricCompactions] < 1 || len(ep.Segments) < 2 {
			t.Fatalf("episode %d did not compact: %v, %d segments", i, ep.Metrics, len(ep.Segments))
		}
		if err := ep.Validate(); err != nil {
			t.Fatalf("episode %d: %v", i, err)
		}
		calls := rec.calls[keys[i]]
		t.Logf("episode %d: %d calls, %d segments, elapsed %v", i, len(calls), len(ep.Segments), time.Since(start))
		checkEpisodeAgainstCalls(t, i, ep, calls)
		for k, cl := range calls {
			raw, _ := rawDistribution(t, url, cl.req, 1) // T = 1, top-p 1: π_old is the raw log softmax
			for j, id := range cl.c.Tokens {
				if raw[j].ID != id {
					t.Fatalf("episode %d call %d token %d: episode has %d, the server samples %d for this seed", i, k, j, id, raw[j].ID)
				}
				if math.Abs(cl.c.Logprobs[j]-raw[j].Dist[id]) > 2e-4 {
					t.Fatalf("episode %d call %d token %d: log-prob %v, server's log softmax %v", i, k, j, cl.c.Logprobs[j], raw[j].Dist[id])
				}
			}
		}
	}
}

// checkEpisodeAgainstCalls walks the episode's segments and the calls in
// order: every call's prompt is its segment's prompt ⊕ the response so far,
// its tokens follow with loss mask 1 and its log-probs, and nothing else in
// the episode has loss mask 1.
func checkEpisodeAgainstCalls(t *testing.T, i int, ep episode.Episode, calls []call) {
	t.Helper()
	k := 0
	for si, s := range ep.Segments {
		if n := len(s.PromptIDs) + len(s.ResponseIDs); n > llamaCtx {
			t.Fatalf("episode %d segment %d has %d tokens, window %d", i, si, n, llamaCtx)
		}
		for pos := 0; pos < len(s.ResponseIDs); {
			if s.LossMask[pos] == 0 {
				pos++
				continue
			}
			if k >= len(calls) {
				t.Fatalf("episode %d segment %d: trained tokens at %d beyond the %d calls", i, si, pos, len(calls))
			}
			cl := calls[k]
			ctx := append(append([]int{}, s.PromptIDs...), s.ResponseIDs[:pos]...)
			if !equalInts(cl.req.Prompt, ctx) {
				t.Fatalf("episode %d call %d: prompt differs from segment %d's context at %d", i, k, si, pos)
			}
			for j, id := range cl.c.Tokens {
				if s.ResponseIDs[pos+j] != id || s.LossMask[pos+j] != 1 || s.Logprobs[pos+j] != cl.c.Logprobs[j] {
					t.Fatalf("episode %d call %d token %d: segment %d has id %d mask %d logprob %v, server gave %d %v",
						i, k, j, si, s.ResponseIDs[pos+j], s.LossMask[pos+j], s.Logprobs[pos+j], id, cl.c.Logprobs[j])
				}
			}
			pos += len(cl.c.Tokens)
			k++
		}
	}
	if k != len(calls) {
		t.Fatalf("episode %d: %d calls, %d found in the segments", i, len(calls), k)
	}
}

// byteTok is a stand-in tokenizer for tests that need no server.
type byteTok struct{}

func (byteTok) Encode(s string) []int {
	ids := make([]int, len(s))
	for i := range len(s) {
		ids[i] = int(s[i]) % 100
	}
	return ids
}

func (byteTok) Decode(ids []int) string { return fmt.Sprint(ids) }

// An endpoint that goes down mid-episode (or never was up) ends the
// episode infra_error with reward 0 and the cause recorded: never a silent
// zero-reward "ok".
func TestAgentEpisodeInfraErrorWhenEndpointDown(t *testing.T) {
	tmpl := agent.Template{System: 120, User: 121, Assistant: 122, Observation: 123, Summary: 124, EndOfTurn: 125}
	cfg := agent.DefaultConfig()
	cfg.SystemPrompt, cfg.SummaryInstruction, cfg.ResumeText = "sys", "summarise", "resume"
	for _, okFirst := range []int{0, 3} {
		f := newFaultServer(t, KindVLLM)
		n := 0
		f.pick = func() string {
			n++
			if n <= okFirst {
				return "ok"
			}
			return "500"
		}
		pc := testPoolConfig()
		pc.MaxAttempts = 3
		pool, _ := Dial(pc, nil, Endpoint{Kind: KindVLLM, URL: f.srv.URL, Model: "m"})
		a, err := agent.New(context.Background(), cfg, agent.Local(byteTok{}), tmpl, pool)
		if err != nil {
			t.Fatal(err)
		}
		ep, err := a.Run(context.Background(), &countEnv{steps: 100}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if ep.Status != episode.StatusInfraError || ep.Reward != 0 || !strings.Contains(ep.Meta[agent.MetaError], ErrUnavailable.Error()) {
			t.Fatalf("after %d good answers: status %s reward %v meta %v", okFirst, ep.Status, ep.Reward, ep.Meta)
		}
		if got := int(ep.Metrics[agent.MetricTurns]); got != okFirst {
			t.Fatalf("after %d good answers the episode records %d turns: %v %v", okFirst, got, ep.Metrics, ep.Meta)
		}
	}
}

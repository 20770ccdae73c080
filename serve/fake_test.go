package serve

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/infer/remote"
	"github.com/compactrl/compactrl/rollout"
)

// Test doubles: a fast fake engine, a byte tokenizer, a counting task with
// long observations (so that episodes compact) and a Factory over them.

var testTemplate = agent.Template{System: 250, User: 251, Assistant: 252, Observation: 253, Summary: 254, EndOfTurn: 255}

// byteTok maps each byte to its value modulo 240 (below the template ids).
type byteTok struct{}

func (byteTok) Encode(s string) []int {
	ids := make([]int, len(s))
	for i := range len(s) {
		ids[i] = int(s[i]) % 240
	}
	return ids
}

func (byteTok) Decode(ids []int) string {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte('a' + id%26)
	}
	return string(b)
}

// fakeEngine answers every call with n tokens (the last the stop id), each
// with log-prob −(1+k)/10, after delay (or when release is closed, if set).
type fakeEngine struct {
	n       int
	delay   time.Duration
	release chan struct{}
	calls   atomic.Int64
	started chan struct{} // receives once per call, if not nil (non-blocking)
	routing sync.Map      // X-SMG-Routing-Key values seen in the calls' contexts
}

func (f *fakeEngine) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	f.calls.Add(1)
	f.routing.Store(remote.Headers(ctx).Get(RoutingHeader), true)
	if f.started != nil {
		select {
		case f.started <- struct{}{}:
		default:
		}
	}
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			return infer.Completion{}, ctx.Err()
		}
	}
	if f.delay > 0 {
		t := time.NewTimer(f.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return infer.Completion{}, ctx.Err()
		}
	}
	n := min(f.n, req.MaxTokens)
	c := infer.Completion{Tokens: make([]int, n), Logprobs: make([]float64, n), FinishReason: infer.FinishStop}
	for k := range n {
		c.Tokens[k] = int((req.Seed + int64(k)) % 200)
		if c.Tokens[k] < 0 {
			c.Tokens[k] = -c.Tokens[k]
		}
		c.Logprobs[k] = -float64(1+k) / 10
	}
	c.Tokens[n-1] = req.Stop[0]
	return c, nil
}

// countTask ends after steps replies with reward 1; each observation is
// obsLen bytes.
type countTask struct {
	steps, obsLen, n int
	closed           *atomic.Int64
	once             sync.Once
}

func (e *countTask) Reset(ctx context.Context) (string, error) { return "count the replies", nil }

func (e *countTask) Step(ctx context.Context, reply string) (agent.Step, error) {
	e.n++
	if e.n >= e.steps {
		return agent.Step{Done: true, Reward: 1}, nil
	}
	return agent.Step{Observation: strings.Repeat(fmt.Sprintf("%x", e.n), e.obsLen)[:e.obsLen]}, nil
}

func (e *countTask) Close() error {
	e.once.Do(func() { e.closed.Add(1) })
	return nil
}

// testFactory serves the tasks "count" and "long" over one engine.
type testFactory struct {
	eng    infer.Sampler
	m      *Metrics
	made   atomic.Int64
	closed atomic.Int64
	runs   atomic.Int64 // Runner calls
	mu     sync.Mutex
	agents map[agent.Config]*agent.Agent
}

func (f *testFactory) Runner(ctx context.Context, e Engine, cfg agent.Config) (rollout.Runner, string, error) {
	f.runs.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.agents[cfg]; ok {
		return a, "", nil
	}
	s := f.eng
	if f.m != nil {
		s = f.m.WrapSampler(s)
	}
	a, err := agent.New(ctx, cfg, agent.Local(byteTok{}), testTemplate, s)
	if err != nil {
		return nil, "agent", err
	}
	if f.agents == nil {
		f.agents = map[agent.Config]*agent.Agent{}
	}
	f.agents[cfg] = a
	return a, "", nil
}

func (f *testFactory) HasTask(id string) bool { return id == "count" || id == "long" }

func (f *testFactory) Env(id string, seed int64) (agent.Environment, error) {
	f.made.Add(1)
	steps := 12
	if id == "long" {
		steps = 1 << 30
	}
	return &countTask{steps: steps, obsLen: 40, closed: &f.closed}, nil
}

// testAgentConfig compacts after a few steps of the count task.
func testAgentConfig() agent.Config {
	c := agent.DefaultConfig()
	c.Context, c.Reserve = 256, 96
	c.MaxActionTokens, c.MaxSummaryTokens, c.MaxObservationTokens = 8, 16, 48
	c.MaxTurns, c.MaxCompactions = 1000, 1000
	c.SystemPrompt, c.SummaryInstruction, c.ResumeText = "sys", "sum", "go"
	return c
}

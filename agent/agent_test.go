package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
)

// byteTok is a byte-level tokenizer: specials 0..5, byte b is id b+6.
type byteTok struct{}

func (byteTok) Encode(s string) []int {
	ids := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = int(s[i]) + 6
	}
	return ids
}

func (byteTok) Decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		if id >= 6 && id < 262 {
			b.WriteByte(byte(id - 6))
		}
	}
	return b.String()
}

var testTmpl = Template{System: 0, User: 1, Assistant: 2, Observation: 3, Summary: 4, EndOfTurn: 5}

// call is one recorded sampler call.
type call struct {
	req infer.Request
	out infer.Completion
}

// randSampler samples random byte tokens, sometimes stopping early, with
// made-up negative log-probs; it records every call.
type randSampler struct {
	mu    sync.Mutex
	calls []call
	err   error // returned from call number errAt (1-based) on
	errAt int
	// fixed, when non-empty, is returned (truncated to MaxTokens) instead.
	fixed []int
}

func (s *randSampler) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if err := ctx.Err(); err != nil {
		return infer.Completion{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil && len(s.calls)+1 >= s.errAt {
		return infer.Completion{}, s.err
	}
	rng := rand.New(rand.NewPCG(uint64(req.Seed), 7))
	var c infer.Completion
	if s.fixed != nil {
		c.Tokens = slices.Clone(s.fixed[:min(len(s.fixed), req.MaxTokens)])
	} else {
		n := 1 + rng.IntN(req.MaxTokens)
		for i := 0; i < n; i++ {
			c.Tokens = append(c.Tokens, 6+'a'+rng.IntN(26))
		}
		if rng.IntN(3) > 0 { // stop early: last token becomes the stop token
			c.Tokens[n-1] = req.Stop[0]
		}
	}
	c.FinishReason = infer.FinishLength
	if c.Tokens[len(c.Tokens)-1] == req.Stop[0] {
		c.FinishReason = infer.FinishStop
	}
	for range c.Tokens {
		c.Logprobs = append(c.Logprobs, -0.25-rng.Float64())
	}
	s.calls = append(s.calls, call{req: infer.Request{Prompt: slices.Clone(req.Prompt), MaxTokens: req.MaxTokens}, out: c})
	return c, nil
}

// fakeEnv returns observations of random length (up to obsMax bytes), is
// done after doneAfter steps, and marks replies starting with "z" invalid.
type fakeEnv struct {
	rng       *rand.Rand
	obsMax    int
	doneAfter int
	steps     int
	stepErrAt int
	invalid   func(reply string) bool
	summaries []string
}

func (e *fakeEnv) Reset(ctx context.Context) (string, error) { return "find the thing", nil }

func (e *fakeEnv) Step(ctx context.Context, reply string) (Step, error) {
	e.steps++
	if e.stepErrAt > 0 && e.steps == e.stepErrAt {
		return Step{}, errors.New("disk on fire")
	}
	if e.steps >= e.doneAfter {
		return Step{Done: true, Reward: 1, Observation: "correct"}, nil
	}
	if e.invalid != nil && e.invalid(reply) {
		return Step{Invalid: true, Observation: "cannot parse " + reply}, nil
	}
	n := e.rng.IntN(e.obsMax + 1)
	return Step{Observation: strings.Repeat("x", n)}, nil
}

func (e *fakeEnv) SummaryQuality(s string) float64 {
	e.summaries = append(e.summaries, s)
	return 0.5
}

func testConfig() Config {
	c := DefaultConfig()
	c.Context = 900
	c.Reserve = 360
	c.SystemPrompt = "you are an agent"
	c.SummaryInstruction = "summarise"
	c.ResumeText = "resume"
	c.MaxActionTokens = 24
	c.MaxSummaryTokens = 60
	return c
}

// checkEpisode verifies the structural invariants of an episode produced
// with the recorded sampler calls.
func checkEpisode(t *testing.T, a *Agent, ep episode.Episode, calls []call) {
	t.Helper()
	cfg := a.Config()
	if err := ep.Validate(); err != nil {
		t.Fatalf("invalid episode: %v", err)
	}
	ci := 0
	for si, s := range ep.Segments {
		if n := len(s.PromptIDs) + len(s.ResponseIDs); n > cfg.Context {
			t.Fatalf("segment %d: prompt %d + response %d = %d > window %d", si, len(s.PromptIDs), len(s.ResponseIDs), n, cfg.Context)
		}
		if len(s.LossMask) != len(s.ResponseIDs) || len(s.Logprobs) != len(s.ResponseIDs) {
			t.Fatalf("segment %d: mask %d, logprobs %d, response %d", si, len(s.LossMask), len(s.Logprobs), len(s.ResponseIDs))
		}
		full := append(slices.Clone(s.PromptIDs), s.ResponseIDs...)
		sampled := make([]bool, len(s.ResponseIDs))
		// The calls of this segment: each prompt is a prefix of the
		// segment's full context and is followed there by its tokens.
		for ci < len(calls) {
			c := calls[ci]
			p := c.req.Prompt
			if len(p) < len(s.PromptIDs) || !slices.Equal(p[:len(s.PromptIDs)], s.PromptIDs) {
				break
			}
			if len(p)+len(c.out.Tokens) > len(full) || !slices.Equal(full[:len(p)], p) {
				t.Fatalf("segment %d call %d: prompt is not segment.prompt ⊕ response-so-far", si, ci)
			}
			if !slices.Equal(full[len(p):len(p)+len(c.out.Tokens)], c.out.Tokens) {
				t.Fatalf("segment %d call %d: sampled tokens not in the segment after their prompt", si, ci)
			}
			if len(p)+c.req.MaxTokens > cfg.Context {
				t.Fatalf("segment %d call %d: prompt %d + max_tokens %d > window", si, ci, len(p), c.req.MaxTokens)
			}
			off := len(p) - len(s.PromptIDs)
			for j := range c.out.Tokens {
				sampled[off+j] = true
				if s.Logprobs[off+j] != c.out.Logprobs[j] {
					t.Fatalf("segment %d call %d: logprob %d differs", si, ci, j)
				}
			}
			ci++
			if s.Kind == episode.KindSummary && len(p)+len(c.out.Tokens) == len(full) {
				break // the summary ends the segment
			}
		}
		for j, m := range s.LossMask {
			if (m == 1) != sampled[j] {
				t.Fatalf("segment %d pos %d: mask %d but sampled=%v", si, j, m, sampled[j])
			}
			if m == 0 && s.Logprobs[j] != 0 {
				t.Fatalf("segment %d pos %d: template token with logprob %v", si, j, s.Logprobs[j])
			}
		}
		if s.Kind == episode.KindSummary {
			// The summary is the last policy output and ends the segment.
			last := calls[ci-1]
			q := a.qsum
			p := last.req.Prompt
			if !slices.Equal(p[len(p)-len(q):], q) {
				t.Fatalf("segment %d: last call is not after q_sum", si)
			}
			if len(p)+len(last.out.Tokens) != len(full) {
				t.Fatalf("segment %d: summary is not the end of the segment", si)
			}
			if si+1 < len(ep.Segments) {
				summ := last.out.Tokens
				if summ[len(summ)-1] == testTmpl.EndOfTurn {
					summ = summ[:len(summ)-1]
				}
				next := ep.Segments[si+1].PromptIDs
				want := append(append(slices.Clone(a.system), a.resume...), summ...)
				if !slices.Equal(next[:len(want)], want) || next[len(want)] != testTmpl.EndOfTurn {
					t.Fatalf("segment %d: next prompt is not system ⊕ resume ⊕ summary ⊕ [EOT]", si)
				}
				// The rest is the last k steps, verbatim: a suffix of the
				// steps this segment held (its prompt's steps, then its
				// response before q_sum), starting at a step boundary.
				rest := next[len(want)+1:]
				held := append(slices.Clone(stepsOf(a, s.PromptIDs, si == 0)), s.ResponseIDs[:len(s.ResponseIDs)-len(last.out.Tokens)-len(q)]...)
				if len(rest) > 0 && (rest[0] != testTmpl.Assistant || len(rest) > len(held) || !slices.Equal(held[len(held)-len(rest):], rest)) {
					t.Fatalf("segment %d: re-included steps are not the last steps verbatim", si)
				}
				if len(rest) < len(held) && len(rest) > 0 && held[len(held)-len(rest)-1] != testTmpl.EndOfTurn {
					t.Fatalf("segment %d: re-included steps do not start at a step boundary", si)
				}
			}
		} else if si != len(ep.Segments)-1 {
			t.Fatalf("segment %d of kind %s is not the last", si, s.Kind)
		}
	}
	if ci != len(calls) {
		t.Fatalf("%d of %d calls matched a segment", ci, len(calls))
	}
}

// stepsOf returns the steps part of a segment prompt: after the task for
// the first segment, after resume(S) for later ones.
func stepsOf(a *Agent, prompt []int, first bool) []int {
	if first {
		return nil
	}
	n := len(a.system) + len(a.resume)
	for n < len(prompt) && prompt[n] != testTmpl.EndOfTurn {
		n++
	}
	return prompt[n+1:]
}

func TestSegmentsFitWindowRandom(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 300
	}
	rng := rand.New(rand.NewPCG(1, 2))
	statuses := map[episode.Status]int{}
	compacted := 0
	for i := 0; i < n; i++ {
		cfg := testConfig()
		cfg.Context = 300 + rng.IntN(1200)
		cfg.MaxActionTokens = 1 + rng.IntN(40)
		cfg.MaxSummaryTokens = 1 + rng.IntN(80)
		cfg.KeepLast = rng.IntN(4)
		cfg.MaxCompactions = rng.IntN(5)
		cfg.MaxTurns = 1 + rng.IntN(60)
		cfg.NoCompaction = rng.IntN(5) == 0
		cfg.Reserve = 20 + rng.IntN(cfg.Context/2)
		if rng.IntN(3) == 0 {
			cfg.MaxObservationTokens = 30 + rng.IntN(100)
		}
		s := &randSampler{}
		a, err := New(context.Background(), cfg, Local(byteTok{}), testTmpl, s)
		if err != nil {
			continue // an impossible budget: New's own tests cover the rejection
		}
		obsMax := []int{10, 200, 5 * cfg.Context, 50 * cfg.Context}[rng.IntN(4)]
		env := &fakeEnv{rng: rand.New(rand.NewPCG(uint64(i), 3)), obsMax: obsMax, doneAfter: 1 + rng.IntN(80),
			invalid: func(r string) bool { return r == "" || r[0] < 'a'+8 }}
		ep, err := a.Run(context.Background(), env, int64(i))
		if err != nil {
			t.Fatal(err)
		}
		if ep.Status == episode.StatusInfraError {
			t.Fatalf("episode %d: infra_error %s (cfg %+v)", i, ep.Meta[MetaError], cfg)
		}
		statuses[ep.Status]++
		if ep.Metrics[MetricCompactions] > 0 {
			compacted++
		}
		if int(ep.Metrics[MetricCompactions]) > cfg.MaxCompactions || (cfg.NoCompaction && ep.Metrics[MetricCompactions] > 0) {
			t.Fatalf("episode %d: %v compactions, max %d no=%v", i, ep.Metrics[MetricCompactions], cfg.MaxCompactions, cfg.NoCompaction)
		}
		checkEpisode(t, a, ep, s.calls)
	}
	t.Logf("statuses %v, %d compacted", statuses, compacted)
	if compacted < n/10 || statuses[episode.StatusOK] == 0 || statuses[episode.StatusOverlong] == 0 || statuses[episode.StatusFormatError] == 0 {
		t.Fatalf("random configurations did not exercise the loop: %v, %d compacted", statuses, compacted)
	}
}

// templateStepMarkers is M of a step with Template: [Assistant], an
// EndOfTurn forced when the action hit its limit, [Observation], EndOfTurn.
const templateStepMarkers = 4

func TestBudgetInequalities(t *testing.T) {
	cfg := testConfig()
	a, err := New(context.Background(), cfg, Local(byteTok{}), testTmpl, &randSampler{})
	if err != nil {
		t.Fatal(err)
	}
	b := a.Budget()
	q := len(a.qsum)
	if b.StepMarkers != templateStepMarkers {
		t.Fatalf("step markers %d, want %d", b.StepMarkers, templateStepMarkers)
	}
	if want := cfg.Reserve - q - cfg.MaxSummaryTokens - cfg.MaxActionTokens - templateStepMarkers; b.ObservationCap != want {
		t.Fatalf("observation cap %d, want %d", b.ObservationCap, want)
	}
	if cfg.Reserve < b.SummaryPrompt+cfg.MaxSummaryTokens+b.StepMax {
		t.Fatalf("reserve %d < Q %d + S %d + step %d", cfg.Reserve, b.SummaryPrompt, cfg.MaxSummaryTokens, b.StepMax)
	}
	if cfg.Context-b.ResumeMax < cfg.Reserve {
		t.Fatal("resume does not leave the reserve")
	}
	// An explicit cap above what the reserve allows, a reserve too small for
	// the summary, and a window too small to resume are all rejected.
	bad := cfg
	bad.MaxObservationTokens = b.ObservationCap + 1
	if _, err := New(context.Background(), bad, Local(byteTok{}), testTmpl, &randSampler{}); err == nil {
		t.Fatal("cap above the reserve's room accepted")
	}
	bad = cfg
	bad.Reserve = q + cfg.MaxSummaryTokens + cfg.MaxActionTokens + templateStepMarkers + b.MarkerMax + minObservationCap - 1
	if _, err := New(context.Background(), bad, Local(byteTok{}), testTmpl, &randSampler{}); err == nil {
		t.Fatal("reserve without room for an observation accepted")
	}
	bad.Reserve++
	if _, err := New(context.Background(), bad, Local(byteTok{}), testTmpl, &randSampler{}); err != nil {
		t.Fatalf("smallest valid reserve rejected: %v", err)
	}
	bad = cfg
	bad.Context = b.ResumeMax + cfg.Reserve - 1
	if _, err := New(context.Background(), bad, Local(byteTok{}), testTmpl, &randSampler{}); err == nil {
		t.Fatal("window without room to resume accepted")
	}
	bad.Context++
	if _, err := New(context.Background(), bad, Local(byteTok{}), testTmpl, &randSampler{}); err != nil {
		t.Fatalf("smallest valid window rejected: %v", err)
	}
	for _, f := range []func(*Config){
		func(c *Config) { c.Context = 0 },
		func(c *Config) { c.Reserve = c.Context },
		func(c *Config) { c.MaxTurns = 0 },
		func(c *Config) { c.KeepLast = -1 },
		func(c *Config) { c.MaxActionTokens = 0 },
		func(c *Config) { c.MaxFormatErrors = 0 },
	} {
		c := cfg
		f(&c)
		if _, err := New(context.Background(), c, Local(byteTok{}), testTmpl, &randSampler{}); err == nil {
			t.Fatalf("bad config accepted: %+v", c)
		}
	}
}

func TestCapObservation(t *testing.T) {
	a, err := New(context.Background(), testConfig(), Local(byteTok{}), testTmpl, &randSampler{})
	if err != nil {
		t.Fatal(err)
	}
	ids := byteTok{}.Encode(strings.Repeat("0123456789", 100))
	for _, limit := range []int{1000, 999, 500, 101, 40, 38} {
		out, err := a.capObservation(context.Background(), ids, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > limit {
			t.Fatalf("limit %d: %d ids", limit, len(out))
		}
		if limit >= len(ids) {
			if !slices.Equal(out, ids) {
				t.Fatal("short observation changed")
			}
			continue
		}
		text := byteTok{}.Decode(out)
		var head, tail string
		var n int
		i := strings.Index(text, " …[")
		if i < 0 {
			t.Fatalf("limit %d: no marker in %q", limit, text)
		}
		head = text[:i]
		rest := text[i:]
		if _, err := fmt.Sscanf(rest, " …[%d tokens omitted]… ", &n); err != nil {
			t.Fatalf("limit %d: marker %q: %v", limit, rest, err)
		}
		tail = rest[strings.Index(rest, "]… ")+len("]… "):]
		if len(head)+len(tail)+n != len(ids) {
			t.Fatalf("limit %d: head %d + tail %d + omitted %d ≠ %d", limit, len(head), len(tail), n, len(ids))
		}
		full := byteTok{}.Decode(ids)
		if !strings.HasPrefix(full, head) || !strings.HasSuffix(full, tail) || len(tail) == 0 {
			t.Fatalf("limit %d: head/tail not from the observation", limit)
		}
	}
	if out, err := a.capObservation(context.Background(), ids, 5); err != nil || out != nil {
		t.Fatal("limit below the marker should give nil")
	}
}

func TestSummaryMasksAndResume(t *testing.T) {
	cfg := testConfig()
	cfg.KeepLast = 2
	s := &randSampler{}
	a, err := New(context.Background(), cfg, Local(byteTok{}), testTmpl, s)
	if err != nil {
		t.Fatal(err)
	}
	env := &fakeEnv{rng: rand.New(rand.NewPCG(5, 5)), obsMax: 150, doneAfter: 40}
	ep, err := a.Run(context.Background(), env, 3)
	if err != nil {
		t.Fatal(err)
	}
	checkEpisode(t, a, ep, s.calls)
	if ep.Metrics[MetricCompactions] < 2 || len(ep.Segments) < 3 {
		t.Fatalf("want ≥ 2 compactions, got %v in %d segments", ep.Metrics[MetricCompactions], len(ep.Segments))
	}
	if len(env.summaries) != int(ep.Metrics[MetricCompactions]) || ep.Metrics[MetricSummaryQuality] != 0.5 {
		t.Fatalf("summary quality not reported: %v", ep.Metrics)
	}
	// Re-included steps are prompt in the next segment: the next prompt
	// ends with the last k steps of the previous segment's response,
	// verbatim, and nothing after the resume block is mask 1 anywhere.
	for si := 0; si+1 < len(ep.Segments); si++ {
		next := ep.Segments[si+1].PromptIDs
		turns := testTmpl.Split(next)
		nAssist := 0
		for _, tr := range turns {
			if tr.Marker == testTmpl.Assistant {
				nAssist++
			}
		}
		if nAssist > cfg.KeepLast {
			t.Fatalf("segment %d prompt re-includes %d steps > k=%d", si+1, nAssist, cfg.KeepLast)
		}
		if nAssist == 0 {
			t.Fatalf("segment %d prompt re-includes no step", si+1)
		}
	}
}

func TestActionAtTokenLimitGetsStop(t *testing.T) {
	cfg := testConfig()
	s := &randSampler{fixed: slices.Repeat([]int{6 + 'q'}, 100)}
	a, err := New(context.Background(), cfg, Local(byteTok{}), testTmpl, s)
	if err != nil {
		t.Fatal(err)
	}
	env := &fakeEnv{rng: rand.New(rand.NewPCG(1, 1)), obsMax: 20, doneAfter: 3}
	ep, err := a.Run(context.Background(), env, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkEpisode(t, a, ep, s.calls)
	r := ep.Segments[0]
	// [Assistant] then A sampled tokens then a template EndOfTurn (mask 0).
	if r.ResponseIDs[0] != testTmpl.Assistant || r.ResponseIDs[1+cfg.MaxActionTokens] != testTmpl.EndOfTurn || r.LossMask[1+cfg.MaxActionTokens] != 0 {
		t.Fatalf("truncated action not closed by a template stop: %v", r.ResponseIDs[:cfg.MaxActionTokens+3])
	}
	if ep.Status != episode.StatusOK {
		t.Fatalf("status %s", ep.Status)
	}
}

func TestFormatErrorsEndEpisode(t *testing.T) {
	cfg := testConfig()
	cfg.MaxFormatErrors = 3
	s := &randSampler{fixed: []int{6 + 'z', testTmpl.EndOfTurn}}
	a, _ := New(context.Background(), cfg, Local(byteTok{}), testTmpl, s)
	env := &fakeEnv{rng: rand.New(rand.NewPCG(1, 1)), obsMax: 20, doneAfter: 100, invalid: func(r string) bool { return r == "z" }}
	ep, err := a.Run(context.Background(), env, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Status != episode.StatusFormatError || ep.Metrics[MetricTurns] != 3 || ep.Reward != 0 {
		t.Fatalf("status %s after %v turns", ep.Status, ep.Metrics[MetricTurns])
	}
	// The invalid observation went back to the policy.
	if !strings.Contains(byteTok{}.Decode(s.calls[1].req.Prompt), "cannot parse z") {
		t.Fatal("format error not shown to the policy")
	}
	// Empty replies are passed to the environment as "".
	s2 := &randSampler{fixed: []int{testTmpl.EndOfTurn}}
	a2, _ := New(context.Background(), cfg, Local(byteTok{}), testTmpl, s2)
	env2 := &fakeEnv{rng: rand.New(rand.NewPCG(1, 1)), obsMax: 20, doneAfter: 100, invalid: func(r string) bool { return r == "" }}
	ep2, _ := a2.Run(context.Background(), env2, 1)
	if ep2.Status != episode.StatusFormatError {
		t.Fatalf("empty actions: status %s", ep2.Status)
	}
}

func TestNoCompactionEndsOverlong(t *testing.T) {
	cfg := testConfig()
	cfg.NoCompaction = true
	s := &randSampler{}
	a, _ := New(context.Background(), cfg, Local(byteTok{}), testTmpl, s)
	env := &fakeEnv{rng: rand.New(rand.NewPCG(2, 2)), obsMax: 200, doneAfter: 1000}
	ep, err := a.Run(context.Background(), env, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkEpisode(t, a, ep, s.calls)
	if ep.Status != episode.StatusOverlong || ep.Meta[MetaEndReason] != "window_full" || len(ep.Segments) != 1 {
		t.Fatalf("status %s reason %s segments %d", ep.Status, ep.Meta[MetaEndReason], len(ep.Segments))
	}
	// The window was used: less than one action's room was left.
	seg := ep.Segments[0]
	if left := cfg.Context - len(seg.PromptIDs) - len(seg.ResponseIDs); left >= cfg.MaxActionTokens+a.Budget().ObservationCap+templateStepMarkers {
		t.Fatalf("ended with %d tokens free", left)
	}
}

func TestMaxTurnsAndCompactionsOverlong(t *testing.T) {
	cfg := testConfig()
	cfg.MaxTurns = 5
	a, _ := New(context.Background(), cfg, Local(byteTok{}), testTmpl, &randSampler{})
	ep, _ := a.Run(context.Background(), &fakeEnv{rng: rand.New(rand.NewPCG(2, 2)), obsMax: 5, doneAfter: 1000}, 1)
	if ep.Status != episode.StatusOverlong || ep.Meta[MetaEndReason] != "max_turns" || ep.Metrics[MetricTurns] != 5 {
		t.Fatalf("status %s reason %s turns %v", ep.Status, ep.Meta[MetaEndReason], ep.Metrics[MetricTurns])
	}
	cfg = testConfig()
	cfg.MaxCompactions = 1
	s := &randSampler{}
	a, _ = New(context.Background(), cfg, Local(byteTok{}), testTmpl, s)
	ep, _ = a.Run(context.Background(), &fakeEnv{rng: rand.New(rand.NewPCG(2, 2)), obsMax: 200, doneAfter: 1000}, 1)
	checkEpisode(t, a, ep, s.calls)
	if ep.Status != episode.StatusOverlong || ep.Meta[MetaEndReason] != "max_compactions" || ep.Metrics[MetricCompactions] != 1 {
		t.Fatalf("status %s reason %s compactions %v", ep.Status, ep.Meta[MetaEndReason], ep.Metrics[MetricCompactions])
	}
}

func TestInfraErrors(t *testing.T) {
	cfg := testConfig()
	// Environment error mid-episode: infra_error, partial segments kept.
	s := &randSampler{}
	a, _ := New(context.Background(), cfg, Local(byteTok{}), testTmpl, s)
	ep, err := a.Run(context.Background(), &fakeEnv{rng: rand.New(rand.NewPCG(2, 2)), obsMax: 100, doneAfter: 100, stepErrAt: 4}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Status != episode.StatusInfraError || !strings.Contains(ep.Meta[MetaError], "disk on fire") || len(ep.Segments) == 0 {
		t.Fatalf("env error: status %s meta %v", ep.Status, ep.Meta)
	}
	checkEpisode(t, a, ep, s.calls)
	// Sampler error.
	s = &randSampler{err: errors.New("engine down"), errAt: 3}
	a, _ = New(context.Background(), cfg, Local(byteTok{}), testTmpl, s)
	ep, err = a.Run(context.Background(), &fakeEnv{rng: rand.New(rand.NewPCG(2, 2)), obsMax: 100, doneAfter: 100}, 1)
	if err != nil || ep.Status != episode.StatusInfraError || !strings.Contains(ep.Meta[MetaError], "engine down") {
		t.Fatalf("sampler error: err %v status %s meta %v", err, ep.Status, ep.Meta)
	}
	// A sampler that breaks its contract (more tokens than asked).
	a, _ = New(context.Background(), cfg, Local(byteTok{}), testTmpl, badSampler{})
	ep, err = a.Run(context.Background(), &fakeEnv{rng: rand.New(rand.NewPCG(2, 2)), obsMax: 100, doneAfter: 100}, 1)
	if err != nil || ep.Status != episode.StatusInfraError {
		t.Fatalf("bad sampler: err %v status %s", err, ep.Status)
	}
	// Cancelled context: an error, and the partial episode is infra_error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a, _ = New(context.Background(), cfg, Local(byteTok{}), testTmpl, &randSampler{})
	ep, err = a.Run(ctx, &fakeEnv{rng: rand.New(rand.NewPCG(2, 2)), obsMax: 100, doneAfter: 100}, 1)
	if !errors.Is(err, context.Canceled) || ep.Status != episode.StatusInfraError {
		t.Fatalf("cancelled: err %v status %s", err, ep.Status)
	}
	// A task too long for the window.
	a, _ = New(context.Background(), cfg, Local(byteTok{}), testTmpl, &randSampler{})
	ep, err = a.Run(context.Background(), longTaskEnv{}, 1)
	if err != nil || ep.Status != episode.StatusInfraError {
		t.Fatalf("long task: err %v status %s", err, ep.Status)
	}
}

type badSampler struct{}

func (badSampler) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	n := req.MaxTokens + 1
	return infer.Completion{Tokens: make([]int, n), Logprobs: make([]float64, n)}, nil
}

type longTaskEnv struct{}

func (longTaskEnv) Reset(ctx context.Context) (string, error) { return strings.Repeat("t", 2000), nil }
func (longTaskEnv) Step(ctx context.Context, r string) (Step, error) {
	return Step{}, errors.New("unreachable")
}

func TestSplit(t *testing.T) {
	tm := testTmpl
	ids := []int{tm.System, 10, 11, tm.EndOfTurn, tm.User, 12, tm.EndOfTurn, tm.Assistant}
	got := tm.Split(ids)
	if len(got) != 3 || got[0].Marker != tm.System || !slices.Equal(got[0].IDs, []int{10, 11}) || !got[0].Closed ||
		got[2].Marker != tm.Assistant || got[2].Closed || len(got[2].IDs) != 0 {
		t.Fatalf("split %+v", got)
	}
	if _, err := TemplateFrom(func(n string) (int, bool) { return 0, true }); err == nil {
		t.Fatal("duplicate ids accepted")
	}
	names := SpecialTokenNames()
	tt, err := TemplateFrom(func(n string) (int, bool) { return slices.Index(names, n), true })
	if err != nil || tt != testTmpl {
		t.Fatalf("TemplateFrom: %+v %v", tt, err)
	}
}

// With observations at the cap, two re-included steps do not leave the
// reserve (|s| + |resume(S)| + 2·Step > C − T_comp) but one does: k drops
// to 1.
func TestKeepLastReducedUntilItFits(t *testing.T) {
	cfg := testConfig()
	cfg.KeepLast = 2
	s := &randSampler{}
	a, _ := New(context.Background(), cfg, Local(byteTok{}), testTmpl, s)
	b := a.Budget()
	resumed := len(a.system) + len(a.resume) + cfg.MaxSummaryTokens + 1
	if !(resumed+2*b.StepMax > cfg.Context-cfg.Reserve && resumed+(b.StepMax) <= cfg.Context-cfg.Reserve) {
		t.Fatalf("test budget does not separate k=1 from k=2: resumed %d step %d room %d", resumed, b.StepMax, cfg.Context-cfg.Reserve)
	}
	env := &fakeEnv{rng: rand.New(rand.NewPCG(4, 4)), doneAfter: 30}
	big := &fixedObsEnv{fakeEnv: env, n: 5 * b.ObservationCap}
	ep, err := a.Run(context.Background(), big, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkEpisode(t, a, ep, s.calls)
	if len(ep.Segments) < 2 {
		t.Fatal("no compaction")
	}
	for si, seg := range ep.Segments[1:] {
		n := 0
		for _, tr := range testTmpl.Split(seg.PromptIDs) {
			if tr.Marker == testTmpl.Assistant {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("segment %d re-includes %d steps, want 1", si+2, n)
		}
	}
}

// fixedObsEnv returns observations of exactly n bytes.
type fixedObsEnv struct {
	*fakeEnv
	n int
}

func (e *fixedObsEnv) Step(ctx context.Context, reply string) (Step, error) {
	st, err := e.fakeEnv.Step(ctx, reply)
	if err == nil && !st.Done {
		st.Observation = strings.Repeat("y", e.n)
	}
	return st, err
}

// flakyTok is a Tokenizer that, once armed with failAt, fails from its
// failAt-th call on.
type flakyTok struct {
	calls, failAt int
}

func (f *flakyTok) fail() bool {
	f.calls++
	return f.failAt > 0 && f.calls >= f.failAt
}

func (f *flakyTok) Encode(ctx context.Context, s string) ([]int, error) {
	if f.fail() {
		return nil, errors.New("tokenizer endpoint down")
	}
	return byteTok{}.Encode(s), nil
}

func (f *flakyTok) Decode(ctx context.Context, ids []int) (string, error) {
	if f.fail() {
		return "", errors.New("tokenizer endpoint down")
	}
	return byteTok{}.Decode(ids), nil
}

func TestTokenizerFailureIsInfraError(t *testing.T) {
	cfg := testConfig()
	for _, failAt := range []int{1, 2, 3, 6} {
		s := &randSampler{}
		tok := &flakyTok{}
		a, err := New(context.Background(), cfg, tok, testTmpl, s)
		if err != nil {
			t.Fatal(err)
		}
		tok.calls, tok.failAt = 0, failAt
		env := &fakeEnv{rng: rand.New(rand.NewPCG(3, 3)), obsMax: 100, doneAfter: 100}
		ep, err := a.Run(context.Background(), env, 1)
		if err != nil {
			t.Fatal(err)
		}
		if ep.Status != episode.StatusInfraError || !strings.Contains(ep.Meta[MetaError], "tokenizer endpoint down") {
			t.Fatalf("failAt %d: status %s meta %v", failAt, ep.Status, ep.Meta)
		}
		// The environment never saw a reply the tokenizer failed to decode.
		if env.steps >= tok.calls {
			t.Fatalf("failAt %d: environment stepped %d times after %d tokenizer calls", failAt, env.steps, tok.calls)
		}
	}
}

type hugeTaskEnv struct{ n int }

func (e hugeTaskEnv) Reset(ctx context.Context) (string, error) { return strings.Repeat("t", e.n), nil }
func (hugeTaskEnv) Step(ctx context.Context, r string) (Step, error) {
	return Step{}, errors.New("unreachable")
}

// A task text past MaxTaskBytes ends the episode as infra_error before it
// is tokenized or copied into the episode (a 200 MB instruction.md cost
// 1.8 GB to encode and made a 200 MB episode line): the error names the
// limit, the episode holds no task text and no prompt, and it costs far
// less memory than the text would to encode.
func TestTaskTextLimit(t *testing.T) {
	cfg := testConfig()
	cfg.Context = MaxContextTokens // the window would let it through
	a, err := New(context.Background(), cfg, Local(byteTok{}), testTmpl, &randSampler{})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ep, err := a.Run(context.Background(), hugeTaskEnv{n: 64 << 20}, 1)
	runtime.ReadMemStats(&after)
	if err != nil || ep.Status != episode.StatusInfraError {
		t.Fatalf("err %v status %s", err, ep.Status)
	}
	if msg := ep.Meta[MetaError]; !strings.Contains(msg, "MaxTaskBytes") || !strings.Contains(msg, "67108864 bytes") {
		t.Fatalf("error %q", msg)
	}
	if ep.Task != "" || len(ep.Segments) > 0 && len(ep.Segments[0].PromptIDs) > 0 {
		t.Fatalf("the task text went into the episode: task %d bytes, %d segments", len(ep.Task), len(ep.Segments))
	}
	// The 64 MiB string itself is allocated by the environment; encoding
	// it (8 bytes an id) would cost 512 MiB more.
	if d := after.TotalAlloc - before.TotalAlloc; d > 200<<20 {
		t.Fatalf("allocated %d MiB", d>>20)
	}
	// At the limit it plays.
	cfg.Context = 4 << 20
	a, _ = New(context.Background(), cfg, Local(byteTok{}), testTmpl, &randSampler{})
	ep, _ = a.Run(context.Background(), hugeTaskEnv{n: MaxTaskBytes}, 1)
	if strings.Contains(ep.Meta[MetaError], "MaxTaskBytes") {
		t.Fatalf("task of MaxTaskBytes refused: %s", ep.Meta[MetaError])
	}
}

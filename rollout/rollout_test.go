package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/vault"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/infer/remote"
	"github.com/compactrl/compactrl/tokenizer"
)

var (
	tokOnce sync.Once
	tok     *tokenizer.Tokenizer
	tmpl    agent.Template
	tokErr  error
)

func vaultAgent(t testing.TB, s func(infer.Sampler) infer.Sampler) (*agent.Agent, EnvFactory) {
	t.Helper()
	tokOnce.Do(func() { tok, tmpl, tokErr = vault.DefaultTokenizer() })
	if tokErr != nil {
		t.Fatal(tokErr)
	}
	ex, err := vault.NewExpert(tok, tmpl, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var sampler infer.Sampler = ex
	if s != nil {
		sampler = s(ex)
	}
	cfg := agent.DefaultConfig()
	cfg.SystemPrompt = vault.SystemPrompt
	a, err := agent.New(context.Background(), cfg, agent.Local(tok), tmpl, sampler)
	if err != nil {
		t.Fatal(err)
	}
	envs := func(seed int64) (agent.Environment, error) { return vault.New(vault.DefaultConfig(), seed) }
	return a, envs
}

func readAll(t *testing.T, data []byte) []episode.Episode {
	t.Helper()
	r := episode.NewReader(bytes.NewReader(data))
	var eps []episode.Episode
	for {
		ep, err := r.Next()
		if err == io.EOF {
			return eps
		}
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep)
	}
}

// lineCounter checks, at every progress call, that everything reported is
// already on the underlying writer as complete lines.
type lineCounter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lineCounter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lineCounter) lines() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Count(l.buf.Bytes(), []byte("\n"))
}

func TestPoolWritesEveryEpisodeDeterministically(t *testing.T) {
	n := 64
	if testing.Short() {
		n = 16
	}
	a, envs := vaultAgent(t, nil)
	run := func(workers int) []episode.Episode {
		var out lineCounter
		sink := NewJSONLSink(&out)
		calls := 0
		st, err := Run(context.Background(), Config{Workers: workers, Meta: map[string]string{"policy": "scripted"}},
			Jobs("vault", vault.TestSeeds().Start, n), a, envs, sink, func(s Stats) {
				calls++
				if got := out.lines(); got != s.Episodes {
					t.Errorf("progress at %d episodes but %d lines flushed", s.Episodes, got)
				}
			})
		if err != nil {
			t.Fatal(err)
		}
		if st.Episodes != n || calls != n || st.SuccessRate() < 0.95 || st.MeanCompactions() < 1 || st.TokensPerSecond() <= 0 {
			t.Fatalf("stats %s", st)
		}
		eps := readAll(t, out.buf.Bytes())
		sort.Slice(eps, func(i, j int) bool { return eps[i].ID < eps[j].ID })
		return eps
	}
	one, many := run(1), run(8)
	if len(one) != n || !reflect.DeepEqual(one, many) {
		t.Fatal("episodes differ between 1 and 8 workers")
	}
	if one[0].Meta["policy"] != "scripted" || one[0].Meta["seed"] == "" || one[0].Group != one[0].ID {
		t.Fatalf("meta %v id %s group %s", one[0].Meta, one[0].ID, one[0].Group)
	}
}

// flaky fails in different ways on chosen seeds.
type flaky struct {
	inner Runner
	panic int64
	err   int64
}

func (f flaky) Run(ctx context.Context, env agent.Environment, seed int64) (episode.Episode, error) {
	switch seed {
	case f.panic:
		panic("boom")
	case f.err:
		return episode.Episode{Status: episode.StatusOK}, errors.New("runner broke")
	}
	return f.inner.Run(ctx, env, seed)
}

// errSampler fails every call with a prompt over 150 tokens: the third
// call of every vault episode (after open 1 and read 1 1).
type errSampler struct{ inner infer.Sampler }

func (s errSampler) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if len(req.Prompt) > 150 {
		return infer.Completion{}, errors.New("engine out of memory")
	}
	return s.inner.Sample(ctx, req)
}

func TestFailuresAreInfraErrorsAndOthersContinue(t *testing.T) {
	a, envs := vaultAgent(t, nil)
	first := vault.TestSeeds().Start
	badEnv := func(seed int64) (agent.Environment, error) {
		if seed == first+3 {
			return nil, errors.New("no such vault")
		}
		return envs(seed)
	}
	var out bytes.Buffer
	st, err := Run(context.Background(), Config{Workers: 4}, Jobs("v", first, 20),
		flaky{inner: a, panic: first + 5, err: first + 7}, badEnv, NewJSONLSink(&out), nil)
	if err != nil {
		t.Fatal(err)
	}
	eps := readAll(t, out.Bytes())
	if len(eps) != 20 || st.Statuses[episode.StatusInfraError] != 3 {
		t.Fatalf("%d episodes, stats %s", len(eps), st)
	}
	for _, ep := range eps {
		bad := ep.ID == "v-1000003" || ep.ID == "v-1000005" || ep.ID == "v-1000007"
		if bad != (ep.Status == episode.StatusInfraError) || (bad && ep.Meta[agent.MetaError] == "") || (bad && ep.Reward != 0) {
			t.Fatalf("episode %s: status %s meta %v", ep.ID, ep.Status, ep.Meta)
		}
	}
	// A sampler that errors mid-episode: infra_error with the partial
	// segments, in every episode, and the pool still finishes.
	a2, _ := vaultAgent(t, func(s infer.Sampler) infer.Sampler { return errSampler{s} })
	out.Reset()
	st, err = Run(context.Background(), Config{Workers: 3}, Jobs("v", first, 10), a2, envs, NewJSONLSink(&out), nil)
	if err != nil || st.Episodes != 10 || st.Statuses[episode.StatusInfraError] != 10 {
		t.Fatalf("sampler errors: %v %s", err, st)
	}
	for _, ep := range readAll(t, out.Bytes()) {
		if !strings.Contains(ep.Meta[agent.MetaError], "engine out of memory") || len(ep.Segments) == 0 {
			t.Fatalf("episode %s: %v, %d segments", ep.ID, ep.Meta, len(ep.Segments))
		}
	}
}

// blocker finishes episodes of even seeds at once and blocks the others
// until the context is done.
type blocker struct {
	inner   Runner
	started chan struct{}
}

func (b blocker) Run(ctx context.Context, env agent.Environment, seed int64) (episode.Episode, error) {
	if seed%2 == 1 {
		b.started <- struct{}{}
		<-ctx.Done()
		return episode.Episode{Status: episode.StatusInfraError}, ctx.Err()
	}
	return b.inner.Run(ctx, env, seed)
}

func TestCancelKeepsFinishedEpisodes(t *testing.T) {
	a, envs := vaultAgent(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := blocker{inner: a, started: make(chan struct{}, 100)}
	var out lineCounter
	go func() {
		// Both workers end up blocked on odd seeds: cancel then.
		<-b.started
		<-b.started
		cancel()
	}()
	st, err := Run(ctx, Config{Workers: 2}, Jobs("v", 0, 1000), b, envs, NewJSONLSink(&out), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	eps := readAll(t, out.buf.Bytes())
	if len(eps) != st.Episodes || len(eps) == 0 || len(eps) >= 1000 {
		t.Fatalf("%d episodes written, stats %s", len(eps), st)
	}
	for _, ep := range eps {
		if ep.Status != episode.StatusOK {
			t.Fatalf("an interrupted episode was written: %s %s", ep.ID, ep.Status)
		}
	}
	// A context cancelled before the start writes nothing and says so.
	st, err = Run(ctx, Config{Workers: 2}, Jobs("v", 0, 10), a, envs, NewJSONLSink(io.Discard), nil)
	if !errors.Is(err, context.Canceled) || st.Episodes != 0 {
		t.Fatalf("pre-cancelled: %v %s", err, st)
	}
}

type failSink struct{ after, n int }

func (f *failSink) Write(ep *episode.Episode) error {
	f.n++
	if f.n > f.after {
		return errors.New("disk full")
	}
	return nil
}

func TestSinkErrorStopsThePool(t *testing.T) {
	a, envs := vaultAgent(t, nil)
	st, err := Run(context.Background(), Config{Workers: 4}, Jobs("v", 0, 200), a, envs, &failSink{after: 5}, nil)
	if err == nil || !strings.Contains(err.Error(), "disk full") || st.Episodes != 5 {
		t.Fatalf("err %v stats %s", err, st)
	}
	if _, err := Run(context.Background(), Config{Workers: 0}, nil, a, envs, &failSink{}, nil); err == nil {
		t.Fatal("0 workers accepted")
	}
}

func TestStatsLine(t *testing.T) {
	st := Stats{Statuses: map[episode.Status]int{}}
	for _, ep := range []episode.Episode{
		{Status: episode.StatusOK, Reward: 1, Metrics: map[string]float64{"compactions": 2, "turns": 10, "summary_quality": 1, "sampled_tokens": 100}},
		{Status: episode.StatusOverlong, Metrics: map[string]float64{"compactions": 3, "turns": 20, "summary_quality": 0.5, "sampled_tokens": 300}},
		{Status: episode.StatusOK, Reward: 0, Metrics: map[string]float64{"turns": 3, "sampled_tokens": 0}},
	} {
		st.add(&ep)
	}
	st.Elapsed = 2e9
	if st.SuccessRate() != 1.0/3 || st.MeanCompactions() != 5.0/3 || st.MeanTurns() != 11 || st.MeanSummaryQuality() != 0.75 || st.TokensPerSecond() != 200 || st.EpisodesPerSecond() != 1.5 {
		t.Fatalf("stats %s", st)
	}
	if !strings.Contains(st.String(), "success 0.333") || !strings.Contains(st.String(), "ok=2 overlong=1") {
		t.Fatal(st.String())
	}
	if _, err := json.Marshal(st); err != nil {
		t.Fatal(err)
	}
}

// chaos corrupts the expert's replies by request seed: unparseable text,
// empty actions, and actions filling the token limit without a stop token.
type chaos struct {
	inner infer.Sampler
	tok   agent.LocalTokenizer
}

func (c chaos) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	out, err := c.inner.Sample(ctx, req)
	if err != nil {
		return out, err
	}
	var ids []int
	switch uint64(req.Seed) % 7 {
	case 0:
		ids = append(c.tok.Encode("look around ~~ \x00 ="), req.Stop[0])
	case 1:
		ids = []int{req.Stop[0]}
	case 2:
		for len(ids) < req.MaxTokens {
			ids = append(ids, c.tok.Encode("read 1 1 ")...)
		}
		ids = ids[:req.MaxTokens]
	default:
		return out, nil
	}
	return infer.Completion{Tokens: ids, Logprobs: make([]float64, len(ids)), FinishReason: infer.FinishLength}, nil
}

func TestBadActionsLoseNothing(t *testing.T) {
	a, envs := vaultAgent(t, func(s infer.Sampler) infer.Sampler { return chaos{inner: s, tok: tok} })
	var out bytes.Buffer
	n := 40
	st, err := Run(context.Background(), Config{Workers: 4}, Jobs("v", 0, n), a, envs, NewJSONLSink(&out), nil)
	if err != nil {
		t.Fatal(err)
	}
	eps := readAll(t, out.Bytes())
	if len(eps) != n || st.Statuses[episode.StatusInfraError] != 0 {
		t.Fatalf("%d episodes, %s", len(eps), st)
	}
	formatErrors := 0
	for _, ep := range eps {
		formatErrors += int(ep.Metrics[agent.MetricFormatErrors])
	}
	if formatErrors == 0 {
		t.Fatalf("chaos produced no format errors: %s", st)
	}
	t.Logf("%s, %d invalid actions", st, formatErrors)
}

func TestEpisodeTimeoutIsInfraError(t *testing.T) {
	a, envs := vaultAgent(t, nil)
	b := blocker{inner: a, started: make(chan struct{}, 100)}
	var out bytes.Buffer
	// The timeout must be far above a real episode's time even under the
	// race detector on a loaded 2-core machine: only the blocked episodes
	// may reach it.
	st, err := Run(context.Background(), Config{Workers: 3, EpisodeTimeout: 400 * time.Millisecond}, Jobs("v", 0, 10), b, envs, NewJSONLSink(&out), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Episodes != 10 || st.Statuses[episode.StatusInfraError] != 5 || st.Statuses[episode.StatusOK] != 5 {
		t.Fatalf("stats %s", st)
	}
	for _, ep := range readAll(t, out.Bytes()) {
		if ep.Status == episode.StatusInfraError && !strings.Contains(ep.Meta[agent.MetaError], "deadline") {
			t.Fatalf("timeout episode %s: %v", ep.ID, ep.Meta)
		}
	}
}

// BenchmarkExpertEpisodes measures whole vault episodes (agent loop +
// scripted expert + JSONL encoding) on one worker.
func BenchmarkExpertEpisodes(b *testing.B) {
	a, envs := vaultAgent(b, nil)
	sink := NewJSONLSink(io.Discard)
	b.ResetTimer()
	st, err := Run(context.Background(), Config{Workers: 1}, Jobs("v", vault.TestSeeds().Start, b.N), a, envs, sink, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(st.EpisodesPerSecond(), "episodes/s")
}

// Success is over scored episodes: infra errors are masked, not failures,
// and a reward that is 1 up to rounding is a success (episode.Success).
func TestStatsSuccessOverScoredOnly(t *testing.T) {
	st := Stats{Statuses: map[episode.Status]int{}}
	for _, ep := range []episode.Episode{
		{Status: episode.StatusOK, Reward: 0.7 + 0.2 + 0.1},
		{Status: episode.StatusInfraError},
		{Status: episode.StatusInfraError},
		{Status: episode.StatusOK, Reward: 0},
	} {
		st.add(&ep)
	}
	if st.Scored != 2 || st.SuccessRate() != 0.5 || st.InfraErrors() != 2 {
		t.Fatalf("scored %d success %v infra %d", st.Scored, st.SuccessRate(), st.InfraErrors())
	}
	if s := st.String(); !strings.Contains(s, "success 0.500 over 2 scored (2 infra_error, masked)") {
		t.Fatal(s)
	}
	none := Stats{Statuses: map[episode.Status]int{}}
	ep := episode.Episode{Status: episode.StatusInfraError}
	none.add(&ep)
	if s := none.String(); !strings.Contains(s, "success n/a (nothing scored)") {
		t.Fatal(s)
	}
}

// tokenizeServer answers llama.cpp's /tokenize and /detokenize with the
// vault tokenizer, except /tokenize of failText, which it fails (503) once
// inFlight episodes, the failing one among them, are running; seen reports
// how many were.
func tokenizeServer(t *testing.T, failText string, inFlight *atomic.Int32, seen chan<- int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Content string `json:"content"`
			Tokens  []int  `json:"tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/tokenize":
			if body.Content == failText {
				deadline := time.Now().Add(5 * time.Second)
				for inFlight.Load() < 2 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				select {
				case seen <- inFlight.Load():
				default:
				}
				http.Error(w, "tokenizer overloaded", http.StatusServiceUnavailable)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"tokens": tok.Encode(body.Content)})
		case "/detokenize":
			json.NewEncoder(w).Encode(map[string]any{"content": tok.Decode(body.Tokens)})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// One failing /tokenize call ends only the episode that made it, as
// infra_error naming the failure; the episodes running beside it through
// the same remote tokenizer finish exactly as with the in-memory one.
func TestTokenizerFailureEndsOnlyItsEpisode(t *testing.T) {
	local, envs := vaultAgent(t, nil)
	jobs := Jobs("v", vault.TestSeeds().Start, 8)
	failSeed := jobs[2].Seed
	env, err := envs(failSeed)
	if err != nil {
		t.Fatal(err)
	}
	failTask, err := env.Reset(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var inFlight atomic.Int32
	seen := make(chan int32, 1)
	srv := tokenizeServer(t, failTask, &inFlight, seen)
	rt, err := remote.NewTokenizer(remote.KindLlamaCpp, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt.Backoff = time.Millisecond
	ex, err := vault.NewExpert(tok, tmpl, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.DefaultConfig()
	cfg.SystemPrompt = vault.SystemPrompt
	a, err := agent.New(context.Background(), cfg, rt, tmpl, ex)
	if err != nil {
		t.Fatal(err)
	}
	counting := RunnerFunc(func(ctx context.Context, env agent.Environment, seed int64) (episode.Episode, error) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		return a.Run(ctx, env, seed)
	})
	remoteEps, _, err := Collect(context.Background(), Config{Workers: 4}, jobs, counting, envs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := <-seen; n < 2 {
		t.Fatalf("%d episodes in flight when the call failed, want the failing one and another", n)
	}
	localEps, _, err := Collect(context.Background(), Config{Workers: 4}, jobs, local, envs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, ep := range remoteEps {
		if jobs[i].Seed == failSeed {
			if ep.Status != episode.StatusInfraError || !strings.Contains(ep.Meta[agent.MetaError], "tokenizer overloaded") {
				t.Errorf("%s: status %s, meta %v; want infra_error from the failed /tokenize", ep.ID, ep.Status, ep.Meta)
			}
			continue
		}
		if ep.Status != episode.StatusOK || !reflect.DeepEqual(ep, localEps[i]) {
			t.Errorf("%s: status %s (%v), or differs from the in-memory tokenizer's episode", ep.ID, ep.Status, ep.Meta)
		}
	}
}

type memSink struct{ eps []episode.Episode }

func (m *memSink) Write(ep *episode.Episode) error {
	m.eps = append(m.eps, *ep)
	return nil
}

// Collect returns the episodes in the order of the jobs although they
// finish out of order (later jobs are faster here), counts progress to the
// total, and refuses jobs that share an ID.
func TestCollectKeepsJobOrder(t *testing.T) {
	a, envs := vaultAgent(t, nil)
	jobs := Jobs("v", 0, 12)
	slow := RunnerFunc(func(ctx context.Context, env agent.Environment, seed int64) (episode.Episode, error) {
		time.Sleep(time.Duration(12-seed) * time.Millisecond)
		return a.Run(ctx, env, seed)
	})
	var calls []int
	eps, st, err := Collect(context.Background(), Config{Workers: 4}, jobs, slow, envs, func(done, total int) {
		if total != len(jobs) {
			t.Errorf("progress total %d, want %d", total, len(jobs))
		}
		calls = append(calls, done)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != len(jobs) || st.Episodes != len(jobs) {
		t.Fatalf("%d episodes, stats %s", len(eps), st)
	}
	for i, ep := range eps {
		if ep.ID != jobs[i].ID || ep.Meta["seed"] != fmt.Sprint(jobs[i].Seed) {
			t.Errorf("episode %d is %s (seed %s), want %s", i, ep.ID, ep.Meta["seed"], jobs[i].ID)
		}
	}
	if want := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; !reflect.DeepEqual(calls, want) {
		t.Errorf("progress %v, want %v", calls, want)
	}
	if _, _, err := Collect(context.Background(), Config{Workers: 1}, append(jobs, jobs[3]), a, envs, nil); err == nil || !strings.Contains(err.Error(), jobs[3].ID) {
		t.Errorf("duplicate job ID: err = %v", err)
	}
}

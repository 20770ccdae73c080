package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestServer(t *testing.T, cfg Config, eng *fakeEngine) (*Server, *testFactory, *httptest.Server) {
	t.Helper()
	f := &testFactory{eng: eng}
	if cfg.Agent.Context == 0 {
		cfg.Agent = testAgentConfig()
	}
	s, err := New(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	f.m = s.Metrics()
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, f, hs
}

func body(task string, rid int64) string {
	return fmt.Sprintf(`{"task_id":%q,"engine":{"url":"http://127.0.0.1:1","kind":"sglang"},"sampling":{"temperature":1,"top_p":1,"max_new_tokens":8,"seed":7},"agent":{"context":256,"reserve":96,"keep_last":2},"rollout_id":%d}`, task, rid)
}

func post(ctx context.Context, url, b string) (*http.Response, []byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/rollouts", strings.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp, out, err
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// One episode in slime's layout: tokens = prompt ⊕ response, loss_mask and
// rollout_log_probs over the response, sampled tokens with mask 1 and the
// engine's log-probs, the rollout_id echoed, and the episode compacted.
func TestServeRolloutLayout(t *testing.T) {
	_, f, hs := newTestServer(t, Config{MaxInFlight: 2}, &fakeEngine{n: 6})
	resp, out, err := post(context.Background(), hs.URL, body("count", 42))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v %s", err, resp, out)
	}
	var r Response
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	if r.RolloutID != 42 || r.TaskID != "count" || r.Status != "ok" || r.Reward != 1 {
		t.Fatalf("response %+v", r)
	}
	if len(r.Segments) < 2 || r.Metrics["compactions"] < 1 || r.Segments[0].Kind != "summary" {
		t.Fatalf("no compaction: %d segments, metrics %v", len(r.Segments), r.Metrics)
	}
	sampled := 0
	for i, s := range r.Segments {
		if s.Index != i || !s.Trainable || len(s.LossMask) != s.ResponseLength || len(s.RolloutLogProbs) != s.ResponseLength || s.ResponseLength >= len(s.Tokens) {
			t.Fatalf("segment %d malformed: %+v", i, s)
		}
		if len(s.Tokens) > 256 {
			t.Fatalf("segment %d: %d tokens > window", i, len(s.Tokens))
		}
		resp := s.Tokens[len(s.Tokens)-s.ResponseLength:]
		k := 0 // position inside the current sampled run
		for j, m := range s.LossMask {
			if m == 0 {
				if s.RolloutLogProbs[j] != 0 {
					t.Fatalf("segment %d token %d: mask 0 with log-prob %v", i, j, s.RolloutLogProbs[j])
				}
				k = 0
				continue
			}
			sampled++
			if want := -float64(1+k) / 10; s.RolloutLogProbs[j] != want {
				t.Fatalf("segment %d token %d (id %d): log-prob %v, engine gave %v", i, j, resp[j], s.RolloutLogProbs[j], want)
			}
			k++
			if resp[j] == testTemplate.EndOfTurn {
				k = 0
			}
		}
	}
	if float64(sampled) != r.Metrics["sampled_tokens"] {
		t.Fatalf("%d tokens with mask 1, sampled_tokens %v", sampled, r.Metrics["sampled_tokens"])
	}
	if f.closed.Load() != 1 {
		t.Fatalf("environment closed %d times", f.closed.Load())
	}
}

// routing_key reaches every engine call of the episode as the SGLang
// router's X-SMG-Routing-Key header (through the context infer/remote
// reads); without it no header is set.
func TestServeRoutingKeyReachesEngineCalls(t *testing.T) {
	eng := &fakeEngine{n: 6}
	_, _, hs := newTestServer(t, Config{MaxInFlight: 2}, eng)
	b := strings.Replace(body("count", 1), `"rollout_id"`, `"routing_key":"session-7","rollout_id"`, 1)
	if resp, out, err := post(context.Background(), hs.URL, b); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v %s", err, resp, out)
	}
	var seen []string
	eng.routing.Range(func(k, _ any) bool { seen = append(seen, k.(string)); return true })
	if len(seen) != 1 || seen[0] != "session-7" || eng.calls.Load() < 2 {
		t.Fatalf("routing keys seen by %d engine calls: %q", eng.calls.Load(), seen)
	}
	eng2 := &fakeEngine{n: 6}
	_, _, hs2 := newTestServer(t, Config{MaxInFlight: 2}, eng2)
	if resp, out, err := post(context.Background(), hs2.URL, body("count", 2)); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v %s", err, resp, out)
	}
	if _, ok := eng2.routing.Load(""); !ok {
		t.Fatal("a routing header was set without routing_key")
	}
	bad := strings.Replace(body("count", 3), `"rollout_id"`, `"routing_key":"a\r\nX: y","rollout_id"`, 1)
	if resp, out, _ := post(context.Background(), hs2.URL, bad); resp == nil || resp.StatusCode != 400 || !strings.Contains(string(out), "routing_key") {
		t.Fatalf("routing_key with CRLF: %v %s", resp, out)
	}
}

// Every malformed request gets 400 with a JSON error naming the field.
func TestServeBadRequest400NamesField(t *testing.T) {
	_, _, hs := newTestServer(t, Config{MaxInFlight: 1}, &fakeEngine{n: 4})
	good := body("count", 1)
	cases := []struct{ body, field string }{
		{`{"task_id":"count"`, ""},
		{``, ""},
		{strings.Replace(good, `"task_id":"count"`, `"task_id":""`, 1), "task_id"},
		{strings.Replace(good, `"task_id":"count"`, `"task_id":"nope"`, 1), "task_id"},
		{strings.Replace(good, `,"rollout_id":1`, ``, 1), "rollout_id"},
		{strings.Replace(good, `"rollout_id":1`, `"rollout_id":"r1"`, 1), "rollout_id"},
		{strings.Replace(good, `"rollout_id":1`, `"rollout_id":1.5`, 1), "rollout_id"},
		{strings.Replace(good, `"kind":"sglang"`, `"kind":"tgi"`, 1), "engine.kind"},
		{strings.Replace(good, `"url":"http://127.0.0.1:1"`, `"url":"ftp://x"`, 1), "engine.url"},
		{strings.Replace(good, `"temperature":1`, `"temperature":-1`, 1), "sampling.temperature"},
		{strings.Replace(good, `"temperature":1`, `"temperature":"hot"`, 1), "sampling.temperature"},
		{strings.Replace(good, `"top_p":1`, `"top_p":0`, 1), "sampling.top_p"},
		{strings.Replace(good, `"max_new_tokens":8`, `"max_new_tokens":0`, 1), "sampling.max_new_tokens"},
		{strings.Replace(good, `"reserve":96`, `"reserve":300`, 1), "agent.reserve"},
		{strings.Replace(good, `"keep_last":2`, `"keep_last":-1`, 1), "agent.keep_last"},
		{strings.Replace(good, `"keep_last":2`, `"keep_lats":2`, 1), "keep_lats"},
		{strings.Replace(good, `"reserve":96`, `"reserve":4`, 1), "agent"}, // the budget check of agent.New
		{good + `{}`, ""},
		// Absurdly large numbers are refused where they are read.
		{strings.Replace(good, `"temperature":1`, `"temperature":1e308`, 1), "sampling.temperature"},
		{strings.Replace(good, `"max_new_tokens":8`, `"max_new_tokens":1000000000000`, 1), "sampling.max_new_tokens"},
		{strings.Replace(good, `"context":256`, `"context":4294967296000`, 1), "agent.context"},
		{strings.Replace(good, `"keep_last":2`, `"keep_last":9000000000`, 1), "agent.keep_last"},
		// One name per knob, checked by agent.Config.Validate on the
		// request merged with the server's defaults.
		{strings.Replace(good, `"keep_last":2`, `"keep_last":2,"max_observation_tokens":-1`, 1), "agent.max_observation_tokens"},
		{strings.Replace(good, `"keep_last":2`, `"keep_last":2,"observation_cap":8`, 1), "observation_cap"}, // never a JSON name
		{strings.Replace(good, `"context":256,"reserve":96`, `"context":0`, 1), "agent.context"},
		{strings.Replace(good, `"context":256,"reserve":96`, `"context":64`, 1), "agent.reserve"}, // the default reserve no longer fits
	}
	for _, c := range cases {
		name := c.field // repeated names get Go's #01, #02 suffixes
		if name == "" {
			name = "malformed-json"
		}
		t.Run(name, func(t *testing.T) {
			resp, out, err := post(context.Background(), hs.URL, c.body)
			if err != nil {
				t.Fatal(err)
			}
			var eb ErrorBody
			if resp.StatusCode != 400 || json.Unmarshal(out, &eb) != nil || eb.Field != c.field || eb.Error == "" {
				t.Errorf("body %s: %d %s, want 400 naming %q", c.body, resp.StatusCode, out, c.field)
			}
		})
	}
}

// Past MaxInFlight running and MaxQueue waiting, a request gets 429 with
// Retry-After; queued requests run once a slot frees.
func TestServeQueueFull429(t *testing.T) {
	eng := &fakeEngine{n: 4, release: make(chan struct{})}
	s, _, hs := newTestServer(t, Config{MaxInFlight: 2, MaxQueue: 1, RetryAfter: 3 * time.Second}, eng)
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _, err := post(context.Background(), hs.URL, body("count", int64(i)))
			if err == nil {
				codes[i] = resp.StatusCode
			}
		}()
	}
	waitFor(t, "2 running + 1 queued", func() bool { return s.m.inFlight.Load() == 2 && s.m.queued.Load() == 1 })
	resp, out, err := post(context.Background(), hs.URL, body("count", 9))
	if err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("4th request: %v %v %s", err, resp, out)
	}
	close(eng.release)
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("request %d: %d", i, c)
		}
	}
	var buf bytes.Buffer
	s.m.WriteText(&buf)
	if !strings.Contains(buf.String(), `compactrl_requests_rejected_total{reason="queue_full"} 1`) ||
		!strings.Contains(buf.String(), `compactrl_episodes_finished_total{status="ok"} 3`) {
		t.Fatalf("metrics:\n%s", buf.String())
	}
}

// A client that disconnects mid-episode cancels it and its environment
// (sandbox) is closed; a queued client that leaves frees its place.
func TestServeClientDisconnectClosesSandbox(t *testing.T) {
	eng := &fakeEngine{n: 4, delay: 2 * time.Millisecond}
	s, f, hs := newTestServer(t, Config{MaxInFlight: 1, MaxQueue: 1}, eng)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := post(ctx, hs.URL, body("long", 1))
		done <- err
	}()
	waitFor(t, "episode running", func() bool { return s.m.SandboxesAlive() == 1 && eng.calls.Load() > 3 })
	qctx, qcancel := context.WithCancel(context.Background())
	go post(qctx, hs.URL, body("count", 2))
	waitFor(t, "queued", func() bool { return s.m.queued.Load() == 1 })
	qcancel()
	waitFor(t, "queue place freed", func() bool { return s.m.queued.Load() == 0 })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("request succeeded after cancel")
	}
	waitFor(t, "sandbox closed", func() bool { return s.m.SandboxesAlive() == 0 && f.closed.Load() == 1 && s.m.InFlight() == 0 })
	waitFor(t, "cancelled counted", func() bool { return s.m.Finished("cancelled") == 2 })
	calls := eng.calls.Load()
	time.Sleep(50 * time.Millisecond)
	if eng.calls.Load() != calls {
		t.Fatal("engine still called after the client left")
	}
}

// An episode past its deadline ends infra_error (answered, masked) and its
// environment is closed.
func TestServeEpisodeDeadline(t *testing.T) {
	eng := &fakeEngine{n: 4, delay: time.Millisecond}
	_, f, hs := newTestServer(t, Config{MaxInFlight: 1, EpisodeTimeout: 100 * time.Millisecond}, eng)
	resp, out, err := post(context.Background(), hs.URL, body("long", 3))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v %s", err, resp, out)
	}
	var r Response
	json.Unmarshal(out, &r)
	if r.Status != "infra_error" || r.Reward != 0 || !strings.Contains(r.Error, "deadline") || f.closed.Load() != 1 {
		t.Fatalf("status %s reward %v error %q closed %d", r.Status, r.Reward, r.Error, f.closed.Load())
	}
}

// Serve drains when its context ends: the episode in flight finishes and
// is answered, new connections are refused, /healthz says draining, and
// Serve returns nil.
func TestServeDrainOnShutdown(t *testing.T) {
	eng := &fakeEngine{n: 4, delay: 3 * time.Millisecond}
	f := &testFactory{eng: eng}
	s, err := New(Config{MaxInFlight: 2, Agent: testAgentConfig()}, f)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, 0) }()
	type result struct {
		code int
		r    Response
	}
	res := make(chan result, 1)
	go func() {
		resp, out, err := post(context.Background(), url, body("count", 5))
		var r Response
		if err == nil {
			json.Unmarshal(out, &r)
			res <- result{resp.StatusCode, r}
			return
		}
		res <- result{}
	}()
	waitFor(t, "episode running", func() bool { return s.m.InFlight() == 1 })
	stop()
	waitFor(t, "draining", func() bool { return s.drain.Load() })
	if _, _, err := post(context.Background(), url, body("count", 6)); err == nil {
		t.Fatal("a new connection was accepted while draining")
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != 503 {
		t.Fatalf("healthz while draining: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/rollouts", strings.NewReader(body("count", 7))))
	if rec.Code != 503 || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("rollout while draining: %d %s", rec.Code, rec.Body)
	}
	got := <-res
	if got.code != 200 || got.r.Status != "ok" || got.r.RolloutID != 5 {
		t.Fatalf("in-flight episode during drain: %+v", got)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// /metrics is Prometheus text: every sample line belongs to a declared
// metric and parses as name{labels} value.
func TestServeMetricsPrometheusText(t *testing.T) {
	_, _, hs := newTestServer(t, Config{MaxInFlight: 1}, &fakeEngine{n: 5})
	if resp, out, err := post(context.Background(), hs.URL, body("count", 1)); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %s", err, out)
	}
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	typed := map[string]string{}
	values := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(line, "# TYPE ") {
			f := strings.Fields(line)
			typed[f[2]] = f[3]
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("line %q", line)
		}
		base := name
		if i := strings.IndexByte(base, '{'); i >= 0 {
			base = base[:i]
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if typed[strings.TrimSuffix(base, suf)] == "histogram" {
				base = strings.TrimSuffix(base, suf)
			}
		}
		if typed[base] == "" {
			t.Fatalf("sample %q of an undeclared metric", line)
		}
		values[name] = val
	}
	for k, v := range map[string]string{
		`compactrl_episodes_finished_total{status="ok"}`: "1",
		"compactrl_episodes_in_flight":                   "0",
		"compactrl_sandboxes_alive":                      "0",
	} {
		if values[k] != v {
			t.Errorf("%s = %q, want %s\n%s", k, values[k], v, b)
		}
	}
	if values["compactrl_compactions_total"] == "0" || values["compactrl_engine_request_seconds_count"] == "0" ||
		values[`compactrl_engine_request_seconds_bucket{le="+Inf"}`] != values["compactrl_engine_request_seconds_count"] {
		t.Errorf("counters not filled:\n%s", b)
	}
	r2, _ := http.Get(hs.URL + "/healthz")
	if r2.StatusCode != 200 {
		t.Fatalf("healthz %d", r2.StatusCode)
	}
	r2.Body.Close()
}

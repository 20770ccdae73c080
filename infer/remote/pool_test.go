package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactrl/compactrl/infer"
)

// expected is the completion the fault server's healthy answer encodes
// for req, so a test can tell a right answer from any other. (The llama.cpp
// fake sees the folded 32-bit seed: equal for seeds below 2³¹.)
func expected(req infer.Request) infer.Completion {
	c := infer.Completion{FinishReason: infer.FinishLength}
	for i := range req.MaxTokens {
		c.Tokens = append(c.Tokens, int((uint64(req.Seed)*7+uint64(i)*3+uint64(req.Prompt[0]))%50)+1)
		c.Logprobs = append(c.Logprobs, -0.125*float64(i+1))
	}
	return c
}

// faultServer imitates llama-server (streamed) or vLLM (JSON) and injects
// the fault named for each request: the script's entry, then pick's.
type faultServer struct {
	kind   string
	delay  time.Duration // before a healthy answer
	mu     sync.Mutex
	script []string
	pick   func() string // after the script; nil means "ok"
	n      int
	cur    atomic.Int32
	peak   atomic.Int32
	srv    *httptest.Server
}

func newFaultServer(t *testing.T, kind string, script ...string) *faultServer {
	f := &faultServer{kind: kind, script: script}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *faultServer) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *faultServer) next() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.n <= len(f.script) {
		return f.script[f.n-1]
	}
	if f.pick != nil {
		return f.pick()
	}
	return "ok"
}

func (f *faultServer) serve(w http.ResponseWriter, r *http.Request) {
	c := f.cur.Add(1)
	defer f.cur.Add(-1)
	for {
		p := f.peak.Load()
		if c <= p || f.peak.CompareAndSwap(p, c) {
			break
		}
	}
	var body struct {
		Prompt    []int   `json:"prompt"`
		MaxTokens int     `json:"max_tokens"`
		Seed      int64   `json:"seed"`
		Temp      float64 `json:"temperature"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	req := infer.Request{Prompt: body.Prompt, MaxTokens: body.MaxTokens, Seed: body.Seed}
	if f.kind == KindLlamaCpp {
		req.Seed = int64(body.Seed) // the fake replies to the seed it was sent
	}
	want := expected(req)
	fault := f.next()
	switch fault {
	case "reset":
		hijackClose(w)
		return
	case "500", "503", "400":
		var code int
		fmt.Sscan(fault, &code)
		http.Error(w, `{"error":{"message":"injected"}}`, code)
		return
	case "429":
		w.Header().Set("Retry-After", "1")
		http.Error(w, `{"error":"slow down"}`, 429)
		return
	case "slow":
		select {
		case <-r.Context().Done():
			return
		case <-time.After(2 * time.Second):
		}
	case "ok":
		if f.delay > 0 {
			time.Sleep(f.delay)
		}
	}
	if f.kind == KindLlamaCpp {
		f.stream(w, want, fault)
	} else {
		f.json(w, want, fault)
	}
}

func hijackClose(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

func (f *faultServer) stream(w http.ResponseWriter, c infer.Completion, fault string) {
	w.Header().Set("Content-Type", "text/event-stream")
	n := len(c.Tokens)
	if fault == "oov" {
		c.Tokens = append([]int{1 << 20}, c.Tokens[1:]...) // an id the model does not have
	}
	switch fault {
	case "wronglen":
		n++ // one token more than max_tokens
		c.Tokens = append(c.Tokens, 1)
		c.Logprobs = append(c.Logprobs, -1)
	case "empty":
		n = 0
	}
	for i := range n {
		if fault == "truncated" && i == n/2 {
			http.NewResponseController(w).Flush()
			hijackClose(w)
			return
		}
		if fault == "malformed" && i == 1 {
			fmt.Fprint(w, "data: {\"choices\":[{\"logprobs\":{\"content\":[{\"id\":3,\n\n")
			return
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"x\",\"index\":0,\"logprobs\":{\"content\":[{\"id\":%d,\"logprob\":%v,\"prob\":%v}]},\"finish_reason\":null}]}\n\n",
			c.Tokens[i], c.Logprobs[i], math.Exp(c.Logprobs[i]))
	}
	fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
}

func (f *faultServer) json(w http.ResponseWriter, c infer.Completion, fault string) {
	if fault == "oov" {
		c.Tokens = append([]int{1 << 20}, c.Tokens[1:]...) // an id the model does not have
	}
	toks := make([]string, len(c.Tokens))
	for i, id := range c.Tokens {
		toks[i] = fmt.Sprintf("token_id:%d", id)
	}
	lps := c.Logprobs
	switch fault {
	case "wronglen":
		lps = lps[:len(lps)-1]
	case "empty":
		c.Tokens, toks, lps = []int{}, []string{}, []float64{}
	}
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{
		"index": 0, "text": "x", "finish_reason": "length", "token_ids": c.Tokens,
		"logprobs": map[string]any{"tokens": toks, "token_logprobs": lps},
	}}})
	switch fault {
	case "malformed":
		b = b[:len(b)-3]
	case "truncated":
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.Write(b[:len(b)/2])
		http.NewResponseController(w).Flush()
		hijackClose(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

func testPoolConfig() PoolConfig {
	return PoolConfig{Timeout: 150 * time.Millisecond, MaxAttempts: 4, BaseBackoff: time.Millisecond,
		MaxBackoff: 5 * time.Millisecond, FailThreshold: 3, Cooldown: time.Minute, Seed: 1, VocabSize: 1 << 12}
}

func sameCompletion(a, b infer.Completion) bool {
	if !equalInts(a.Tokens, b.Tokens) || a.FinishReason != b.FinishReason || len(a.Logprobs) != len(b.Logprobs) {
		return false
	}
	for i := range a.Logprobs {
		if d := a.Logprobs[i] - b.Logprobs[i]; d > 1e-9 || d < -1e-9 {
			return false
		}
	}
	return true
}

var faults = []string{"reset", "500", "503", "429", "slow", "malformed", "truncated", "wronglen", "empty", "oov"}

func TestPoolRecoversFromEachFault(t *testing.T) {
	for _, kind := range []string{KindLlamaCpp, KindVLLM} {
		for _, fault := range faults {
			f := newFaultServer(t, kind, fault)
			p, err := Dial(testPoolConfig(), nil, Endpoint{Kind: kind, URL: f.srv.URL, Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			req := infer.Request{Prompt: []int{4, 5}, MaxTokens: 6, Temperature: 1, Seed: 9}
			c, err := p.Sample(context.Background(), req)
			if err != nil {
				t.Errorf("%s %s: %v", kind, fault, err)
				continue
			}
			if !sameCompletion(c, expected(req)) {
				t.Errorf("%s %s: completion %+v, want %+v", kind, fault, c, expected(req))
			}
			if st := p.Stats()[0]; st.Requests != 2 || st.Failures != 1 || f.requests() != 2 {
				t.Errorf("%s %s: stats %+v, server saw %d requests", kind, fault, st, f.requests())
			}
		}
	}
}

func TestPoolUnavailableWhenFaultPersists(t *testing.T) {
	for _, kind := range []string{KindLlamaCpp, KindVLLM} {
		for _, fault := range faults {
			f := newFaultServer(t, kind)
			f.pick = func() string { return fault }
			cfg := testPoolConfig()
			p, _ := Dial(cfg, nil, Endpoint{Kind: kind, URL: f.srv.URL, Model: "m"})
			c, err := p.Sample(context.Background(), infer.Request{Prompt: []int{1}, MaxTokens: 4, Temperature: 1})
			var ue *UnavailableError
			if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ue) || ue.Attempts != cfg.MaxAttempts {
				t.Errorf("%s %s: err %v, want ErrUnavailable after %d attempts", kind, fault, err, cfg.MaxAttempts)
			}
			if c.Tokens != nil || c.Logprobs != nil || c.FinishReason != "" {
				t.Errorf("%s %s: a failed request returned a completion %+v", kind, fault, c)
			}
			if f.requests() != cfg.MaxAttempts {
				t.Errorf("%s %s: server saw %d attempts", kind, fault, f.requests())
			}
			if p.Stats()[0].Healthy {
				t.Errorf("%s %s: endpoint still healthy after %d failures", kind, fault, cfg.MaxAttempts)
			}
		}
	}
}

func TestPoolPermanentErrorIsNotRetried(t *testing.T) {
	f := newFaultServer(t, KindLlamaCpp, "400")
	p, _ := Dial(testPoolConfig(), nil, Endpoint{Kind: KindLlamaCpp, URL: f.srv.URL})
	_, err := p.Sample(context.Background(), infer.Request{Prompt: []int{1}, MaxTokens: 4})
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 400 || errors.Is(err, ErrUnavailable) || f.requests() != 1 {
		t.Fatalf("400: err %v after %d requests; want the 400 after one", err, f.requests())
	}
	if _, err := p.Sample(context.Background(), infer.Request{Prompt: []int{1}, MaxTokens: 0}); !errors.Is(err, ErrInvalidRequest) || f.requests() != 1 {
		t.Fatalf("MaxTokens 0: %v (server saw %d)", err, f.requests())
	}
}

func TestPoolFailsOverAndCoolsDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close() // connection refused from now on
	good := newFaultServer(t, KindLlamaCpp)
	cfg := testPoolConfig()
	cfg.FailThreshold = 2
	p, _ := Dial(cfg, nil, Endpoint{Kind: KindLlamaCpp, URL: deadURL}, Endpoint{Kind: KindLlamaCpp, URL: good.srv.URL})
	for i := range 20 {
		req := infer.Request{Prompt: []int{i + 1}, MaxTokens: 3, Temperature: 1, Seed: int64(i)}
		c, err := p.Sample(context.Background(), req)
		if err != nil || !sameCompletion(c, expected(req)) {
			t.Fatalf("request %d: %+v %v", i, c, err)
		}
	}
	st := p.Stats()
	if st[0].Healthy || st[0].Requests > int64(cfg.FailThreshold) || !st[1].Healthy || st[1].Requests != 20 {
		t.Fatalf("stats %+v: the dead endpoint should be out after %d failures", st, cfg.FailThreshold)
	}
}

func TestPoolLeastLoadedWithinLimits(t *testing.T) {
	const limit, n = 3, 30
	var srvs []*faultServer
	var eps []Endpoint
	for range 2 {
		f := newFaultServer(t, KindVLLM)
		f.delay = 20 * time.Millisecond
		srvs = append(srvs, f)
		eps = append(eps, Endpoint{Kind: KindVLLM, URL: f.srv.URL, MaxConcurrent: limit})
	}
	cfg := testPoolConfig()
	cfg.Timeout = 5 * time.Second
	p, _ := Dial(cfg, nil, eps...)
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := infer.Request{Prompt: []int{i + 1}, MaxTokens: 2, Temperature: 1, Seed: int64(i)}
			c, err := p.Sample(context.Background(), req)
			if err != nil || !sameCompletion(c, expected(req)) {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d requests failed", bad.Load())
	}
	for i, f := range srvs {
		if pk := f.peak.Load(); pk > limit {
			t.Errorf("server %d saw %d requests at once, limit %d", i, pk, limit)
		}
		if f.requests() < n/3 {
			t.Errorf("server %d got %d of %d requests: not balanced", i, f.requests(), n)
		}
	}
}

// Many episodes at once against flaky endpoints: each ends with its own
// right completion or with ErrUnavailable; none is lost or answered wrong.
func TestPoolChaos(t *testing.T) {
	n := 80
	if testing.Short() {
		n = 40
	}
	var eps []Endpoint
	for k, kind := range []string{KindLlamaCpp, KindVLLM, KindLlamaCpp} {
		f := newFaultServer(t, kind)
		rng := rand.New(rand.NewPCG(uint64(k), 7))
		f.pick = func() string { // called under f.mu
			if rng.Float64() < 0.45 {
				return faults[rng.IntN(len(faults))]
			}
			return "ok"
		}
		eps = append(eps, Endpoint{Kind: kind, URL: f.srv.URL, Model: "m", MaxConcurrent: 4})
	}
	cfg := testPoolConfig()
	cfg.MaxAttempts = 6
	cfg.FailThreshold = 1000 // keep every endpoint in play
	p, _ := Dial(cfg, nil, eps...)
	var ok, unavailable, other atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := infer.Request{Prompt: []int{i%9 + 1}, MaxTokens: 1 + i%5, Temperature: 1, Seed: int64(i)}
			c, err := p.Sample(context.Background(), req)
			switch {
			case err == nil && sameCompletion(c, expected(req)):
				ok.Add(1)
			case errors.Is(err, ErrUnavailable) && c.Tokens == nil:
				unavailable.Add(1)
			default:
				t.Errorf("request %d: %+v, %v", i, c, err)
				other.Add(1)
			}
		}()
	}
	wg.Wait()
	if int(ok.Load()+unavailable.Load()) != n || ok.Load() == 0 {
		t.Fatalf("%d ok, %d unavailable, %d other of %d", ok.Load(), unavailable.Load(), other.Load(), n)
	}
	for _, s := range p.Stats() {
		if s.InFlight != 0 {
			t.Fatalf("slot leak: %+v", s)
		}
	}
}

func TestPoolCancelIsNotAnEndpointFailure(t *testing.T) {
	f := newFaultServer(t, KindLlamaCpp, "slow")
	cfg := testPoolConfig()
	cfg.Timeout = 10 * time.Second
	p, _ := Dial(cfg, nil, Endpoint{Kind: KindLlamaCpp, URL: f.srv.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := p.Sample(ctx, infer.Request{Prompt: []int{1}, MaxTokens: 3})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("cancelled request: %v", err)
	}
	if st := p.Stats()[0]; st.Failures != 0 || !st.Healthy || st.InFlight != 0 {
		t.Fatalf("caller's cancellation counted against the endpoint: %+v", st)
	}
}

func TestPoolWaitsForSlot(t *testing.T) {
	f := newFaultServer(t, KindVLLM)
	f.delay = 30 * time.Millisecond
	cfg := testPoolConfig()
	cfg.Timeout = 5 * time.Second
	p, _ := Dial(cfg, nil, Endpoint{Kind: KindVLLM, URL: f.srv.URL, MaxConcurrent: 1})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Sample(context.Background(), infer.Request{Prompt: []int{i + 1}, MaxTokens: 1}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if f.peak.Load() != 1 {
		t.Fatalf("limit 1, server saw %d at once", f.peak.Load())
	}
	// A caller whose context ends while waiting for the slot gets its error.
	f.delay = 300 * time.Millisecond
	go p.Sample(context.Background(), infer.Request{Prompt: []int{1}, MaxTokens: 1})
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Sample(ctx, infer.Request{Prompt: []int{1}, MaxTokens: 1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting caller: %v", err)
	}
}

func TestBackoff(t *testing.T) {
	cfg := PoolConfig{BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Seed: 3}
	a, _ := NewPool(cfg, Backend{Sampler: NewVLLM("http://x", "", nil)})
	b, _ := NewPool(cfg, Backend{Sampler: NewVLLM("http://x", "", nil)})
	for k := 1; k <= 6; k++ {
		d := min(100*time.Millisecond<<(k-1), time.Second)
		x, y := a.backoff(k, 0), b.backoff(k, 0)
		if x != y {
			t.Fatalf("attempt %d: same seed, delays %v and %v", k, x, y)
		}
		if x < d/2 || x > d {
			t.Fatalf("attempt %d: delay %v outside [%v, %v]", k, x, d/2, d)
		}
	}
	if d := a.backoff(1, 700*time.Millisecond); d != 700*time.Millisecond {
		t.Fatalf("Retry-After 700ms gave %v", d)
	}
	if d := a.backoff(1, time.Minute); d != time.Second {
		t.Fatalf("Retry-After beyond the cap gave %v", d)
	}
	if parseRetryAfter("3") != 3*time.Second || parseRetryAfter("") != 0 || parseRetryAfter("soon") != 0 {
		t.Fatal("parseRetryAfter")
	}
	if d := parseRetryAfter(time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)); d < 59*time.Minute {
		t.Fatalf("HTTP-date Retry-After gave %v", d)
	}
}

func TestParseEndpoint(t *testing.T) {
	e, err := ParseEndpoint("vllm=http://10.0.0.5:8000,model=Qwen/Qwen3-8B,max=64")
	if err != nil || !reflect.DeepEqual(e, Endpoint{Kind: KindVLLM, URL: "http://10.0.0.5:8000", Model: "Qwen/Qwen3-8B", MaxConcurrent: 64}) {
		t.Fatalf("%+v %v", e, err)
	}
	e, err = ParseEndpoint("vllm=http://x:1,logprobs=processed_logprobs,seed=none")
	if err != nil || !reflect.DeepEqual(e, Endpoint{Kind: KindVLLM, URL: "http://x:1", Options: map[string]string{OptLogprobs: LogprobsProcessed}, Seed: SeedNone}) {
		t.Fatalf("%+v %v", e, err)
	}
	if e.Option(OptLogprobs) != LogprobsProcessed || (Endpoint{Kind: KindVLLM}).Option(OptLogprobs) != LogprobsRaw {
		t.Fatalf("Option: %q, default %q", e.Option(OptLogprobs), (Endpoint{Kind: KindVLLM}).Option(OptLogprobs))
	}
	for bad, want := range map[string]string{"http://x": "want KIND=URL", "tgi=http://x": "is not llamacpp", "vllm=ftp://x": "not an http(s) URL",
		"vllm=http://x,max=0": "not a positive integer", "vllm=http://x,foo=1": `unknown option "foo"`, "sglang=http://x,max": "not key=value",
		"vllm=http://x,logprobs=processed": `logprobs="processed": want raw_logprobs or processed_logprobs`, "sglang=http://x,seed=0": "seed mode",
		"sglang=http://x,logprobs=processed_logprobs": "option logprobs is a setting of vllm engines, not of sglang"} {
		if _, err := ParseEndpoint(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", bad, err, want)
		}
	}
	if _, err := (Endpoint{Kind: KindSGLang, URL: "http://x", Options: map[string]string{OptLogprobs: LogprobsRaw}}).Engine(nil); err == nil ||
		!strings.Contains(err.Error(), "setting of vllm engines") {
		t.Errorf("Engine with another kind's option: %v", err)
	}
	es, err := ParseEndpoints("llamacpp=http://a:1; sglang=http://b:2,max=3")
	if err != nil || len(es) != 2 || !reflect.DeepEqual(es[1], Endpoint{Kind: KindSGLang, URL: "http://b:2", MaxConcurrent: 3}) {
		t.Fatalf("ParseEndpoints: %+v %v", es, err)
	}
	if _, err := ParseEndpoints(" ; "); err == nil {
		t.Error("no endpoints accepted")
	}
	if _, err := NewPool(PoolConfig{}); err == nil {
		t.Error("empty pool accepted")
	}
}

// tokenizerServer is a llama.cpp-shaped /tokenize + /detokenize server;
// while fail is set it answers 503.
func tokenizerServer(t *testing.T, fail *atomic.Bool) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail != nil && fail.Load() {
			http.Error(w, "down", 503)
			return
		}
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		switch r.URL.Path {
		case "/tokenize":
			if body["add_special"] != false || body["parse_special"] != false {
				http.Error(w, "bad request", 400)
				return
			}
			n := len(body["content"].(string))
			ids := make([]int, n)
			for i := range ids {
				ids[i] = i + 100
			}
			json.NewEncoder(w).Encode(map[string]any{"tokens": ids})
		case "/detokenize":
			json.NewEncoder(w).Encode(map[string]any{"content": fmt.Sprint(body["tokens"])})
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A failed call returns its error, and the next call that works returns
// its result: one failure does not poison every later episode.
func TestTokenizerFailureNotSticky(t *testing.T) {
	var fail atomic.Bool
	srv := tokenizerServer(t, &fail)
	tok, err := NewTokenizer(KindLlamaCpp, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok.Attempts, tok.Backoff = 2, time.Millisecond
	ctx := context.Background()
	if ids, err := tok.Encode(ctx, "abc"); err != nil || !equalInts(ids, []int{100, 101, 102}) {
		t.Fatalf("Encode = %v, %v", ids, err)
	}
	if s, err := tok.Decode(ctx, []int{1, 2}); err != nil || s != "[1 2]" {
		t.Fatalf("Decode = %q, %v", s, err)
	}
	fail.Store(true)
	if ids, err := tok.Encode(ctx, "abc"); err != nil || len(ids) != 3 { // cached
		t.Fatalf("cached Encode = %v, %v", ids, err)
	}
	if ids, err := tok.Encode(ctx, "new text"); err == nil || ids != nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("failed Encode = %v, %v", ids, err)
	}
	if _, err := tok.Decode(ctx, []int{1}); err == nil {
		t.Fatal("failed Decode returned no error")
	}
	fail.Store(false)
	if ids, err := tok.Encode(ctx, "other"); err != nil || len(ids) != 5 {
		t.Fatalf("Encode after the server recovered = %v, %v", ids, err)
	}
	if _, err := NewTokenizer(KindSGLang, srv.URL, nil); err == nil || !strings.Contains(err.Error(), "tokenize") {
		t.Fatalf("sglang tokenizer: %v", err)
	}
}

// With the first endpoint dead, every call is served by the next one.
func TestTokenizerFailsOver(t *testing.T) {
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hijackClose(w) }))
	dead.Close()
	good := tokenizerServer(t, nil)
	tok, err := DialTokenizer(nil, Endpoint{Kind: KindLlamaCpp, URL: dead.URL}, Endpoint{Kind: KindLlamaCpp, URL: good.URL})
	if err != nil {
		t.Fatal(err)
	}
	tok.Backoff = time.Millisecond
	for _, text := range []string{"a", "bb", "ccc"} {
		ids, err := tok.Encode(context.Background(), text)
		if err != nil || len(ids) != len(text) {
			t.Fatalf("Encode(%q) = %v, %v", text, ids, err)
		}
	}
	if s, err := tok.Decode(context.Background(), []int{7}); err != nil || s != "[7]" {
		t.Fatalf("Decode = %q, %v", s, err)
	}
	if _, err := DialTokenizer(nil, Endpoint{Kind: KindLlamaCpp, URL: good.URL}, Endpoint{Kind: KindVLLM, URL: good.URL}); err == nil {
		t.Fatal("mixed kinds accepted")
	}
}

// Retry sleeps end when the context does.
func TestTokenizerRetriesHonourCancellation(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	srv := tokenizerServer(t, &fail)
	tok, _ := NewTokenizer(KindLlamaCpp, srv.URL, nil)
	tok.Attempts, tok.Backoff = 10, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := tok.Encode(ctx, "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); ccancel() }()
	if _, err := tok.Decode(cctx, []int{1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("cancelled calls took %v (backoff 1s, 2s, 4s … ignored the context)", d)
	}
}

// Ids outside the vocabulary: a prompt with one is an invalid request (not
// retried); an engine that keeps answering one is unavailable (the episode
// is infra_error), never a completion the agent would score as a format
// error.
func TestPoolRejectsOutOfVocabularyIDs(t *testing.T) {
	f := newFaultServer(t, KindVLLM)
	f.pick = func() string { return "oov" }
	cfg := testPoolConfig()
	p, _ := Dial(cfg, nil, Endpoint{Kind: KindVLLM, URL: f.srv.URL, Model: "m"})
	_, err := p.Sample(context.Background(), infer.Request{Prompt: []int{cfg.VocabSize}, MaxTokens: 2})
	if !errors.Is(err, ErrInvalidRequest) || f.requests() != 0 {
		t.Fatalf("prompt id = vocab size: %v (%d requests sent)", err, f.requests())
	}
	_, err = p.Sample(context.Background(), infer.Request{Prompt: []int{1}, MaxTokens: 2})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Fatalf("sampled id outside the vocabulary: %v", err)
	}
}

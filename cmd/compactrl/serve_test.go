package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/internal/testenv"
	"github.com/compactrl/compactrl/serve"
)

// TestMain lets the test binary act as the compactrl command (for the
// serve process the end-to-end tests start and signal, and for the Python
// tests' `compactrl advantages`) when COMPACTRL_TEST_AS_CLI=1.
func TestMain(m *testing.M) {
	if os.Getenv("COMPACTRL_TEST_AS_CLI") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:])
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// llamaCall is one completion the recording proxy saw: the prompt ids and
// the (id, log p) pairs the server streamed.
type llamaCall struct {
	prompt []int
	ids    []int
	lps    []float64
}

// llamaRecorder is a reverse proxy to llama-server that records every
// streamed /v1/completions answer as the server sent it.
type llamaRecorder struct {
	mu    sync.Mutex
	calls []llamaCall
}

func (rec *llamaRecorder) handler(t *testing.T, target string) http.Handler {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			rp.ServeHTTP(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req struct {
			Prompt []int `json:"prompt"`
		}
		json.Unmarshal(b, &req)
		resp, err := http.Post(target+r.URL.Path, "application/json", bytes.NewReader(b))
		if err != nil {
			http.Error(w, err.Error(), 502)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		call := llamaCall{prompt: req.Prompt}
		br := bufio.NewReader(resp.Body)
		fl, _ := w.(http.Flusher)
		for {
			line, err := br.ReadBytes('\n')
			if d, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
				var c struct {
					Choices []struct {
						Logprobs *struct {
							Content []struct {
								ID   int     `json:"id"`
								Prob float64 `json:"prob"`
							} `json:"content"`
						} `json:"logprobs"`
					} `json:"choices"`
				}
				if json.Unmarshal(bytes.TrimSpace(d), &c) == nil && len(c.Choices) == 1 && c.Choices[0].Logprobs != nil {
					for _, tok := range c.Choices[0].Logprobs.Content {
						call.ids = append(call.ids, tok.ID)
						call.lps = append(call.lps, math.Log(tok.Prob))
					}
				}
			}
			if _, werr := w.Write(line); werr != nil || err != nil {
				break
			}
			if fl != nil {
				fl.Flush()
			}
		}
		rec.mu.Lock()
		rec.calls = append(rec.calls, call)
		rec.mu.Unlock()
	})
}

// check verifies that every sampled run of tokens in r (loss mask 1) is
// a completion the server streamed for exactly that context, with the
// server's log-probabilities.
func (rec *llamaRecorder) check(t *testing.T, r serve.Response) {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for si, s := range r.Segments {
		p := len(s.Tokens) - s.ResponseLength
		for pos := 0; pos < s.ResponseLength; {
			if s.LossMask[pos] == 0 {
				pos++
				continue
			}
			end := pos
			for end < s.ResponseLength && s.LossMask[end] == 1 {
				end++
			}
			ctx := s.Tokens[:p+pos]
			found := false
			for _, c := range rec.calls {
				if len(c.ids) < end-pos || !slices.Equal(c.prompt, ctx) || !slices.Equal(c.ids[:end-pos], s.Tokens[p+pos:p+end]) {
					continue
				}
				for j := pos; j < end; j++ {
					if s.RolloutLogProbs[j] != c.lps[j-pos] {
						t.Fatalf("rollout %d segment %d token %d: log-prob %v, server reported %v", r.RolloutID, si, j, s.RolloutLogProbs[j], c.lps[j-pos])
					}
				}
				found = true
				break
			}
			if !found {
				t.Fatalf("rollout %d segment %d: sampled run %d..%d is no completion the server streamed for that context", r.RolloutID, si, pos, end)
			}
			pos = end
		}
	}
}

// serveProc is a `compactrl serve` child process.
type serveProc struct {
	cmd  *exec.Cmd
	url  string
	out  *bytes.Buffer
	done chan error
}

// testServeKey is the API key of the services startServe starts: every
// request of the tests (postRollout, metric, the Python plug-ins through
// $COMPACTRL_SERVE_API_KEY) carries it.
const testServeKey = "compactrl-test-key-0123456789"

func startServe(t *testing.T, tmpdir string, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "COMPACTRL_TEST_AS_CLI=1", "TMPDIR="+tmpdir, apiKeyEnv+"="+testServeKey)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, out: &bytes.Buffer{}, done: make(chan error, 1)}
	br := bufio.NewReader(pipe)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "serving on ") {
		cmd.Process.Kill()
		t.Fatalf("serve did not start: %q %v\n%s", line, err, errb.String())
	}
	p.url = strings.Fields(line)[2]
	go func() {
		io.Copy(p.out, br)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
	})
	return p
}

func (p *serveProc) metric(t *testing.T, name string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testServeKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

func postRollout(ctx context.Context, url string, body any) (int, []byte, error) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/rollouts", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+testServeKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

func workspaces(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "harbor-*"))
	return m
}

// The service end to end against a real llama-server (random-weight model,
// vocab 128, 256-token window): 32 concurrent episodes compact and carry
// exactly the token ids and log-probs the server streamed; bad requests get
// 400 naming the field; a client that disconnects mid-episode frees its
// sandbox workspace; the Python slime integration runs against the
// service; SIGTERM drains an in-flight episode and exits 0.
func TestServeLlamaServerEndToEnd(t *testing.T) {
	evalNeedBwrap(t)
	llama := startEvalLlama(t)
	rec := &llamaRecorder{}
	proxy := &http.Server{Handler: rec.handler(t, llama)}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go proxy.Serve(pl)
	t.Cleanup(func() { proxy.Close() })
	engineURL := "http://" + pl.Addr().String()

	tasks, sys := tinyTask(t, 600)
	tmp, err := os.MkdirTemp("", "compactrl-serve-test-") // not t.TempDir: the sandbox uid must reach the workspaces under it
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o755)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	p := startServe(t, tmp, "--tasks", tasks, "--template", "120,121,122,123,124,125",
		"--context", "256", "--reserve", "96", "--max-action-tokens", "12", "--max-summary-tokens", "16",
		"--max-format-errors", "1000", "--max-turns", "10", "--system-prompt", sys, "--summary-instruction", "2a",
		"--resume-text", "3b", "--no-format-hint", "--max-episodes", "32", "--queue", "8", "--engine-concurrency", "2")

	request := func(rid int64, turns int) map[string]any {
		return map[string]any{
			"task_id":    "tiny",
			"engine":     map[string]any{"url": engineURL, "kind": "llamacpp"},
			"sampling":   map[string]any{"temperature": 1, "top_p": 1, "max_new_tokens": 12, "seed": 1000 + rid},
			"agent":      map[string]any{"context": 256, "reserve": 96, "keep_last": 2, "max_turns": turns, "max_compactions": 100},
			"rollout_id": rid,
		}
	}

	t.Run("32 concurrent episodes, token-exact", func(t *testing.T) {
		var wg sync.WaitGroup
		resps := make([]serve.Response, 32)
		errs := make([]error, 32)
		start := time.Now()
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, out, err := postRollout(context.Background(), p.url, request(int64(i), 8))
				if err == nil && code != 200 {
					err = fmt.Errorf("status %d: %s", code, out)
				}
				if err == nil {
					err = json.Unmarshal(out, &resps[i])
				}
				errs[i] = err
			}()
		}
		peak := 0
		go func() {
			for range 600 {
				n := 0
				fmt.Sscan(p.metric(t, "compactrl_episodes_in_flight"), &n)
				peak = max(peak, n)
				if n == 32 {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		wg.Wait()
		if peak != 32 {
			t.Errorf("at most %d episodes were in flight at once, want 32", peak)
		}
		t.Logf("32 episodes in %v", time.Since(start))
		for i, r := range resps {
			if errs[i] != nil {
				t.Fatalf("request %d: %v", i, errs[i])
			}
			if r.RolloutID != int64(i) || r.TaskID != "tiny" || r.Status == "infra_error" {
				t.Fatalf("request %d: rollout %d status %s error %q", i, r.RolloutID, r.Status, r.Error)
			}
			if len(r.Segments) < 2 || r.Metrics["compactions"] < 1 || r.Segments[0].Kind != "summary" {
				t.Fatalf("request %d did not compact: %d segments %v", i, len(r.Segments), r.Metrics)
			}
			for _, s := range r.Segments {
				if len(s.Tokens) > 256 || len(s.LossMask) != s.ResponseLength || len(s.RolloutLogProbs) != s.ResponseLength {
					t.Fatalf("request %d: malformed segment %d", i, s.Index)
				}
			}
			rec.check(t, r)
		}
		if ws := workspaces(t, tmp); len(ws) != 0 {
			t.Fatalf("workspaces left: %v", ws)
		}
	})

	t.Run("bad requests get 400 naming the field", func(t *testing.T) {
		for field, mut := range map[string]func(m map[string]any){
			"task_id":     func(m map[string]any) { m["task_id"] = "nope" },
			"engine.kind": func(m map[string]any) { m["engine"] = map[string]any{"url": engineURL, "kind": "tgi"} },
			"rollout_id":  func(m map[string]any) { m["rollout_id"] = "seven" },
			"agent":       func(m map[string]any) { m["agent"] = map[string]any{"reserve": 8} },
		} {
			t.Run(field, func(t *testing.T) {
				body := request(1, 4)
				mut(body)
				code, out, err := postRollout(context.Background(), p.url, body)
				var eb serve.ErrorBody
				if err != nil || code != 400 || json.Unmarshal(out, &eb) != nil || eb.Field != field {
					t.Errorf("%s: %d %s %v", field, code, out, err)
				}
			})
		}
	})

	t.Run("a disconnecting client frees its sandbox", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, _, err := postRollout(ctx, p.url, request(99, 100000))
			errc <- err
		}()
		waitUntil(t, "the episode's workspace", 30*time.Second, func() bool {
			return len(workspaces(t, tmp)) == 1 && p.metric(t, "compactrl_sandboxes_alive") == "1"
		})
		time.Sleep(300 * time.Millisecond) // mid-episode
		cancel()
		if err := <-errc; err == nil {
			t.Fatal("request finished despite the cancel")
		}
		waitUntil(t, "sandbox freed", 30*time.Second, func() bool {
			return len(workspaces(t, tmp)) == 0 && p.metric(t, "compactrl_sandboxes_alive") == "0" &&
				p.metric(t, `compactrl_episodes_finished_total{status="cancelled"}`) == "1"
		})
	})

	t.Run("python slime integration", func(t *testing.T) {
		runSlimePython(t, p.url, engineURL)
	})

	t.Run("python verl integration", func(t *testing.T) {
		runVerlPython(t, p.url, engineURL)
	})

	t.Run("SIGTERM drains", func(t *testing.T) {
		type res struct {
			code int
			body []byte
			err  error
		}
		rc := make(chan res, 1)
		go func() {
			code, out, err := postRollout(context.Background(), p.url, request(7, 6))
			rc <- res{code, out, err}
		}()
		waitUntil(t, "in flight", 30*time.Second, func() bool { return p.metric(t, "compactrl_episodes_in_flight") == "1" })
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if _, _, err := postRollout(context.Background(), p.url, request(8, 2)); err == nil {
			t.Fatal("new request accepted after SIGTERM")
		}
		r := <-rc
		var resp serve.Response
		if r.err != nil || r.code != 200 || json.Unmarshal(r.body, &resp) != nil || resp.RolloutID != 7 || resp.Status == "infra_error" {
			t.Fatalf("in-flight episode across SIGTERM: %d %v %s", r.code, r.err, r.body)
		}
		select {
		case err := <-p.done:
			if err != nil || !strings.Contains(p.out.String(), "drained") {
				t.Fatalf("serve exit: %v, stdout %q", err, p.out.String())
			}
		case <-time.After(testenv.Deadline(t, 30*time.Second)):
			t.Fatal("serve did not exit after draining")
		}
	})
}

// runSlimePython runs integrations/slime's tests with /usr/bin/python3
// against the service at serveURL (engine: llama-server behind engineURL).
// The advantage tests call this test binary as `compactrl advantages`.
func runSlimePython(t *testing.T, serveURL, engineURL string) {
	t.Helper()
	testenv.MustHaveTorch(t, testenv.Python)
	runIntegrationTests(t, testenv.Python, "slime", serveURL, engineURL)
}

// runVerlPython runs integrations/verl's tests, which drive verl's own
// agent-loop worker, TransferQueue, trainer steps and losses (see their
// module doc), with the verl venv's Python against the service at serveURL
// (engine: llama-server behind engineURL, standing in for a vLLM replica).
func runVerlPython(t *testing.T, serveURL, engineURL string) {
	t.Helper()
	py := testenv.MustHaveVerl(t)
	runIntegrationTests(t, py, "verl", serveURL, engineURL,
		"RAY_USAGE_STATS_ENABLED=0", "RAY_AUTH_MODE=disabled", "VERL_LOGGING_LEVEL=WARN")
}

// runIntegrationTests runs `python -m unittest discover` in
// integrations/NAME with the service's and the engine's addresses and
// this test binary as `compactrl` (COMPACTRL_BIN); under CI=true a skipped
// test fails it.
func runIntegrationTests(t *testing.T, python, name, serveURL, engineURL string, env ...string) {
	t.Helper()
	u, _ := url.Parse(engineURL)
	root, _ := filepath.Abs(filepath.Join("../../integrations", name))
	readPythonSources(t, "../../integrations")
	cmd := exec.Command(python, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(),
		"COMPACTRL_SERVE_URL="+serveURL, apiKeyEnv+"="+testServeKey,
		"COMPACTRL_TEST_ROUTER_IP="+u.Hostname(), "COMPACTRL_TEST_ROUTER_PORT="+u.Port(),
		"COMPACTRL_BIN="+os.Args[0], "COMPACTRL_TEST_AS_CLI=1", "PYTHONDONTWRITEBYTECODE=1"), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("python %s tests:\n%s", name, out)
	if err != nil {
		t.Fatalf("python %s tests failed: %v", name, err)
	}
	if bytes.Contains(out, []byte("skipped")) && testenv.InCI() {
		t.Fatalf("python %s tests skipped in CI", name)
	}
}

// readPythonSources reads every Python file under dir in the test binary
// itself, so that go test's result cache, which records the files a test
// opens but not what its subprocesses read, reruns the test when one changes.
func readPythonSources(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".py" {
			return err
		}
		_, err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatalf("read the integrations' sources: %v", err)
	}
}

// serve takes eval's chat-template and engine flags, with eval's checks.
func TestServeChatTemplateAndEngineFlags(t *testing.T) {
	for _, x := range []struct {
		args []string
		want string
	}{
		{[]string{"--tasks", "vault", "--template", "1,2,3,4,5,6", "--chat-template", "qwen3"}, "--chat-template needs --tokenizer"},
		{[]string{"--tasks", "vault", "--template", "1,2,3,4,5,6", "--engine-timeout", "0s"}, "--engine-timeout"},
		{[]string{"--tasks", "vault", "--template", "1,2,3,4,5,6", "--engine-retries", "0"}, "--engine-retries"},
		{[]string{"--tasks", "vault", "--template", "1,2,3,4,5,6", "--engine-seed", "7"}, "--engine-seed"},
		{[]string{"--tasks", "vault", "--template", "1,2,3,4,5,6", "--engine-logprobs-mode", "processed"}, "--engine-logprobs-mode"},
		// The suite's knobs are checked by the suite (env/tasks registry).
		{[]string{"--tasks", "vault:nope=1", "--template", "1,2,3,4,5,6"}, "--tasks: vault: "},
	} {
		t.Run(x.want, func(t *testing.T) {
			_, stderr, code := runCmd(t, append([]string{"serve", "--listen", "127.0.0.1:0"}, x.args...)...)
			if code == 0 || !strings.Contains(stderr, x.want) {
				t.Errorf("serve %v: exit %d, %s; want an error naming %s", x.args, code, stderr, x.want)
			}
		})
	}
}

// serve applies the engines' log-probability rule and the SGLang seed check
// per request: what cannot be recorded as the sampling distribution's
// log-probs is a 400 naming the sampling field and the engine flag.
func TestServeRefusesOffPolicyEngines(t *testing.T) {
	sglang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"version":"0.4.6"}`)) // predates enable_deterministic_inference
	}))
	defer sglang.Close()
	for _, tc := range []struct {
		name       string
		e          serve.Engine
		temp, topP float64
		field      string
		want       string
	}{
		{"vllm raw at T=0.7", serve.Engine{URL: "http://127.0.0.1:9", Kind: "vllm"}, 0.7, 1, "sampling", "--logprobs-mode processed_logprobs"},
		{"vllm processed at T=0.7", serve.Engine{URL: "http://127.0.0.1:9", Kind: "vllm", Options: map[string]string{"logprobs": "processed_logprobs"}}, 0.7, 1, "engine", "<|im_end|>"},
		{"sglang top_p", serve.Engine{URL: sglang.URL, Kind: "sglang"}, 1, 0.9, "sampling", "top_p 1"},
		{"sglang without sampling_seed", serve.Engine{URL: sglang.URL, Kind: "sglang"}, 1, 1, "engine", "--engine-seed none"},
		{"sglang seed none", serve.Engine{URL: sglang.URL, Kind: "sglang", SeedMode: "none"}, 1, 1, "engine", "no /tokenize"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &serveFactory{tok: tokenFlags{template: "1,2,3,4,5,6"}, flags: engineFlags{timeout: time.Second, retries: 1}, agents: map[serveKey]*agent.Agent{}}
			cfg := agent.DefaultConfig()
			cfg.Temperature, cfg.TopP = tc.temp, tc.topP
			_, field, err := f.Runner(context.Background(), tc.e, cfg)
			if err == nil || field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Runner: field %q, %v; want field %q and an error naming %q", field, err, tc.field, tc.want)
			}
		})
	}
}

// serve refuses to start when the open-file hard limit is below what its
// concurrency needs, and says so (before: it started and its rollouts
// failed with "too many open files" under load); connection-limit flags
// are range-checked.
func TestServeOpenFileLimitAndConnFlags(t *testing.T) {
	base := []string{"serve", "--listen", "127.0.0.1:0", "--tasks", "vault", "--template", "1,2,3,4,5,6"}
	for _, x := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-episodes", "100000000", "--queue", "0"}, "open-file limit"},
		{[]string{"--max-conns", "-1"}, "--max-conns"},
		{[]string{"--body-timeout", "0s"}, "--body-timeout"},
		{[]string{"--max-body", "0"}, "--max-body"},
	} {
		t.Run(x.want, func(t *testing.T) {
			_, stderr, code := runCmd(t, append(base, x.args...)...)
			if code == 0 || !strings.Contains(stderr, x.want) {
				t.Errorf("serve %v: exit %d, %s; want an error naming %s", x.args, code, stderr, x.want)
			}
		})
	}
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactrl/compactrl/format"
	"github.com/compactrl/compactrl/model"
	"github.com/compactrl/compactrl/tokenizer"
)

// LlamaEnv is the environment variable naming the llama.cpp install
// directory (DIR/run DIR/root/usr/bin/llama-server).
const LlamaEnv = "COMPACTRL_LLAMA_DIR"

// tokenizerText is the corpus of the GGUF's vocabulary. Throughput does not
// depend on it: prompts and completions are token ids.
const tokenizerText = "the agent reads the file, runs the tests, compacts its context and writes a summary of the state.\n"

// Tokenizer is the byte-level BPE written into the exported GGUF: at most
// vocab ids, one special (<|endoftext|>) and the 256 bytes first; GGUF
// export pads the rest of the model's vocabulary with unused tokens.
func Tokenizer(vocab int) (*tokenizer.Tokenizer, error) {
	tok, err := tokenizer.Train([]string{tokenizerText}, min(vocab, 1024), []string{"<|endoftext|>"})
	if err != nil {
		return nil, fmt.Errorf("bench tokenizer (llama.cpp needs a byte-level vocabulary, vocab ≥ 257): %w", err)
	}
	return tok, nil
}

// LlamaResult is llama.cpp's batched generation throughput on the exported
// model, with its version line and the server's command-line flags.
type LlamaResult struct {
	Engine string `json:"engine"`
	// Weights is the ggml type of the served GGUF's matrices: F32, or BF16
	// against the built-in engine's bf16 products.
	Weights string       `json:"weights"`
	Args    []string     `json:"args"`
	Rate    DecodeResult `json:"rate"`
}

// Llama exports m to GGUF (format.WriteGGUFWith: matrices of ggml type
// matrices, F32 or BF16, the norms F32) with tok,
// serves it with dir's llama-server (threads for generation and batch
// work, one slot per prompt, continuous batching, extra flags appended)
// and times reps rounds in which every prompt is sent at once as its own
// /completion request for tokens new tokens (ignore_eos, temperature 1,
// no top-k/top-p/min-p truncation: the built-in Decoder's sampling), after
// a short warm-up round. The GGUF is written to keep when it is not empty
// (to rerun llama.cpp's own tools on it), else to a temporary file. From each response's timings (predicted_n tokens
// in predicted_ms from the end of its prefill) and its arrival time, the
// decode window runs from the earliest prefill end to the last arrival;
// Decode counts Σ(predicted_n − 1) tokens in it, Generate all tokens over
// the client's wall time from the first send (HTTP included).
func Llama(ctx context.Context, dir, keep string, m *model.Model, matrices uint32, tok *tokenizer.Tokenizer, prompts [][]int, tokens, reps, threads int, extra []string) (LlamaResult, error) {
	if reps <= 0 {
		return LlamaResult{}, fmt.Errorf("bench llama.cpp: %d reps must be positive", reps)
	}
	l, err := startLlamaRounds(ctx, dir, keep, m, matrices, tok, prompts, tokens, threads, extra)
	if err != nil {
		return LlamaResult{}, err
	}
	defer l.close()
	for range reps {
		if err := l.round(ctx); err != nil {
			return LlamaResult{}, err
		}
	}
	return l.result(), nil
}

// llamaRounds is a started llama-server on the exported model, timed one
// round at a time so that Run can interleave its rounds with the built-in
// decoder's (see Llama).
type llamaRounds struct {
	srv     *llamaServer
	tmp     string
	prompts [][]int
	tokens  int
	threads int
	res     LlamaResult
	tally   roundTally
}

// startLlamaRounds exports m, starts llama-server and runs the warm-up
// round; close stops the server.
func startLlamaRounds(ctx context.Context, dir, keep string, m *model.Model, matrices uint32, tok *tokenizer.Tokenizer, prompts [][]int, tokens, threads int, extra []string) (*llamaRounds, error) {
	if len(prompts) == 0 || tokens < 2 || threads <= 0 {
		return nil, fmt.Errorf("bench llama.cpp: %d prompts, %d tokens (≥ 2), %d threads must be positive", len(prompts), tokens, threads)
	}
	tmp, err := os.MkdirTemp("", "compactrl-bench-llama")
	if err != nil {
		return nil, fmt.Errorf("bench llama.cpp: %w", err)
	}
	l := &llamaRounds{tmp: tmp, prompts: prompts, tokens: tokens, threads: threads}
	ok := false
	defer func() {
		if !ok {
			l.close()
		}
	}()
	gguf := filepath.Join(tmp, "model.gguf")
	if keep != "" {
		gguf = keep
	}
	if err := format.WriteGGUFWith(gguf, m.LlamaConfig(), m.Tensors(), tok, format.GGUFOptions{Matrices: matrices}); err != nil {
		return nil, fmt.Errorf("bench llama.cpp: %w", err)
	}
	longest := 0
	for _, p := range prompts {
		longest = max(longest, len(p))
	}
	perSlot := (longest + tokens + 16 + 255) / 256 * 256
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("bench llama.cpp: %w", err)
	}
	args := []string{"-t", strconv.Itoa(threads), "-tb", strconv.Itoa(threads),
		"-np", strconv.Itoa(len(prompts)), "-c", strconv.Itoa(perSlot * len(prompts))}
	args = append(args, extra...)
	if l.srv, err = startLlama(ctx, dir, gguf, port, args); err != nil {
		return nil, err
	}
	l.res = LlamaResult{Engine: llamaVersion(ctx, dir), Weights: format.GGMLTypeName(matrices), Args: args}
	if _, _, err := llamaRound(ctx, l.srv.url, prompts, min(tokens, 8)); err != nil {
		return nil, l.srv.wrap(err)
	}
	ok = true
	return l, nil
}

// round times one round of l.tokens new tokens a prompt.
func (l *llamaRounds) round(ctx context.Context) error {
	cpu0 := pidCPU(l.srv.cmd.Process.Pid)
	t0 := time.Now()
	d, g, err := llamaRound(ctx, l.srv.url, l.prompts, l.tokens)
	if err != nil {
		return l.srv.wrap(err)
	}
	l.tally.add(d, g, time.Since(t0), pidCPU(l.srv.cmd.Process.Pid)-cpu0)
	return nil
}

// result is the rounds' medians; each round is its own Rounds entry.
func (l *llamaRounds) result() LlamaResult {
	res := l.res
	res.Rate = l.tally.result(l.threads)
	return res
}

// close stops the server and removes the temporary export.
func (l *llamaRounds) close() {
	if l.srv != nil {
		l.srv.stop()
	}
	os.RemoveAll(l.tmp)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// lockedBuffer collects a subprocess's output for error messages.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 {
		b.buf.Reset()
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return tail(b.buf.Bytes(), n)
}

type llamaServer struct {
	cmd  *exec.Cmd
	url  string
	log  *lockedBuffer
	done chan struct{}
}

// startLlama starts llama-server on 127.0.0.1:port and waits for /health.
func startLlama(ctx context.Context, dir, gguf string, port int, args []string) (*llamaServer, error) {
	full := append([]string{filepath.Join(dir, "root/usr/bin/llama-server"), "-m", gguf,
		"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--no-webui"}, args...)
	run := filepath.Join(dir, "run")
	cmd := exec.Command(run, full...)
	s := &llamaServer{cmd: cmd, url: "http://127.0.0.1:" + strconv.Itoa(port), log: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench llama.cpp: start %s %s: %w (the comparison runs the Linux llama.cpp that .ci/install-llama-server.sh installs; --skip-llama skips it)", run, full[0], err)
	}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/health", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("bench llama.cpp: llama-server exited before it was ready:\n%s", s.log.tail(3000))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("bench llama.cpp: llama-server not ready after 2 minutes:\n%s", s.log.tail(3000))
		}
	}
}

func (s *llamaServer) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	<-s.done
}

func (s *llamaServer) wrap(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("bench llama.cpp: %w\nserver log:\n%s", err, s.log.tail(2000))
}

// llamaVersion is the first line of llama-server --version that names the build.
func llamaVersion(ctx context.Context, dir string) string {
	out, _ := exec.CommandContext(ctx, filepath.Join(dir, "run"), filepath.Join(dir, "root/usr/bin/llama-server"), "--version").CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "version: "); ok {
			return "llama.cpp " + v
		}
	}
	return "llama.cpp"
}

type llamaTimings struct {
	PromptN     int     `json:"prompt_n"`
	PredictedN  int     `json:"predicted_n"`
	PredictedMS float64 `json:"predicted_ms"`
}

// llamaRound sends every prompt at once and returns the decode and
// generate rates (see Llama).
func llamaRound(ctx context.Context, url string, prompts [][]int, tokens int) (decode, generate float64, err error) {
	type result struct {
		t       llamaTimings
		arrived time.Time
		err     error
	}
	results := make([]result, len(prompts))
	var wg sync.WaitGroup
	start := time.Now()
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t, err := llamaComplete(ctx, url, p, tokens, i)
			results[i] = result{t, time.Now(), err}
		}()
	}
	wg.Wait()
	var first, last time.Time
	var decoded, total int
	for i, r := range results {
		if r.err != nil {
			return 0, 0, fmt.Errorf("request %d: %w", i, r.err)
		}
		if r.t.PredictedN != tokens || r.t.PredictedMS <= 0 {
			return 0, 0, fmt.Errorf("request %d: %d tokens in %g ms, want %d tokens", i, r.t.PredictedN, r.t.PredictedMS, tokens)
		}
		began := r.arrived.Add(-time.Duration(r.t.PredictedMS * float64(time.Millisecond)))
		if first.IsZero() || began.Before(first) {
			first = began
		}
		if r.arrived.After(last) {
			last = r.arrived
		}
		decoded += r.t.PredictedN - 1
		total += r.t.PredictedN
	}
	return float64(decoded) / last.Sub(first).Seconds(), float64(total) / last.Sub(start).Seconds(), nil
}

// llamaComplete runs one /completion request and returns its timings.
func llamaComplete(ctx context.Context, url string, prompt []int, tokens, seed int) (llamaTimings, error) {
	body, err := json.Marshal(map[string]any{
		"prompt": prompt, "n_predict": tokens, "ignore_eos": true, "cache_prompt": false, "seed": seed,
		"temperature": 1, "top_k": 0, "top_p": 1, "min_p": 0, "stream": false,
	})
	if err != nil {
		return llamaTimings{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/completion", bytes.NewReader(body))
	if err != nil {
		return llamaTimings{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return llamaTimings{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return llamaTimings{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return llamaTimings{}, fmt.Errorf("/completion: %s: %s", resp.Status, tail(raw, 500))
	}
	var out struct {
		Timings *llamaTimings `json:"timings"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return llamaTimings{}, fmt.Errorf("/completion: parse %q: %w", tail(raw, 300), err)
	}
	if out.Timings == nil {
		return llamaTimings{}, fmt.Errorf("/completion: no timings in %q", tail(raw, 300))
	}
	return *out.Timings, nil
}

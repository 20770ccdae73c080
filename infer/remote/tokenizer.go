package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/compactrl/compactrl/infer"
)

// Tokenizer turns text into the server's token ids and back through its
// /tokenize and /detokenize endpoints (llama.cpp and vLLM have both), so
// that prompts are built with exactly the vocabulary the engine samples
// from. Special tokens are not parsed from text and none are added: the
// agent loop places template tokens by id.
//
// EncodeContext and DecodeContext report errors. Encode and Decode fit the
// agent's error-free Tokenizer interface: they retry, and when the server
// still fails they return nil / "" and record the error, which Err returns
// and which makes every sampler wrapped by Guard fail (ErrUnavailable) so
// the affected episodes end infra_error instead of training on text that
// was never tokenised. Results are cached (the system prompt, the summary
// instruction and repeated observations are encoded many times).
type Tokenizer struct {
	kind   string
	url    string
	model  string
	client *http.Client

	// Attempts and Backoff govern Encode/Decode retries (defaults 4, 100ms
	// doubling); Timeout bounds one call (default 30s).
	Attempts int
	Backoff  time.Duration
	Timeout  time.Duration

	mu       sync.Mutex
	encCache map[string][]int
	cacheLen int // total ids held, bounded by maxCacheIDs
	err      error
}

const maxCacheIDs = 1 << 22

// NewTokenizer returns a tokenizer for the server of kind (KindLlamaCpp or
// KindVLLM) at baseURL; model is vLLM's model name. A nil client means a
// fresh http.Client.
func NewTokenizer(kind, baseURL, model string, client *http.Client) (*Tokenizer, error) {
	if kind != KindLlamaCpp && kind != KindVLLM {
		return nil, fmt.Errorf("remote tokenizer: kind %q has no /tokenize endpoint here (want %s or %s)", kind, KindLlamaCpp, KindVLLM)
	}
	return &Tokenizer{kind: kind, url: trimURL(baseURL), model: model, client: httpClient(client),
		Attempts: 4, Backoff: 100 * time.Millisecond, Timeout: 30 * time.Second,
		encCache: map[string][]int{}}, nil
}

// EncodeContext returns the ids of text, without special tokens.
func (t *Tokenizer) EncodeContext(ctx context.Context, text string) ([]int, error) {
	t.mu.Lock()
	if ids, ok := t.encCache[text]; ok {
		t.mu.Unlock()
		return append([]int(nil), ids...), nil
	}
	t.mu.Unlock()
	var ids []int
	url := t.url + "/tokenize"
	switch t.kind {
	case KindLlamaCpp:
		var out struct {
			Tokens *[]int `json:"tokens"`
		}
		body := map[string]any{"content": text, "add_special": false, "parse_special": false}
		if err := postJSON(ctx, t.client, url, body, &out); err != nil {
			return nil, err
		}
		if out.Tokens == nil {
			return nil, fmt.Errorf("%w: %s: no tokens field", ErrProtocol, url)
		}
		ids = *out.Tokens
	case KindVLLM:
		var out struct {
			Tokens *[]int `json:"tokens"`
		}
		body := map[string]any{"prompt": text, "add_special_tokens": false}
		if t.model != "" {
			body["model"] = t.model
		}
		if err := postJSON(ctx, t.client, url, body, &out); err != nil {
			return nil, err
		}
		if out.Tokens == nil {
			return nil, fmt.Errorf("%w: %s: no tokens field", ErrProtocol, url)
		}
		ids = *out.Tokens
	}
	for i, id := range ids {
		if id < 0 {
			return nil, fmt.Errorf("%w: %s: token %d is %d", ErrProtocol, url, i, id)
		}
	}
	t.mu.Lock()
	if t.cacheLen+len(ids) > maxCacheIDs {
		t.encCache, t.cacheLen = map[string][]int{}, 0
	}
	if _, ok := t.encCache[text]; !ok {
		t.encCache[text] = append([]int(nil), ids...)
		t.cacheLen += len(ids)
	}
	t.mu.Unlock()
	return ids, nil
}

// DecodeContext returns the text of ids.
func (t *Tokenizer) DecodeContext(ctx context.Context, ids []int) (string, error) {
	if len(ids) == 0 {
		return "", nil
	}
	url := t.url + "/detokenize"
	switch t.kind {
	case KindLlamaCpp:
		var out struct {
			Content *string `json:"content"`
		}
		if err := postJSON(ctx, t.client, url, map[string]any{"tokens": ids}, &out); err != nil {
			return "", err
		}
		if out.Content == nil {
			return "", fmt.Errorf("%w: %s: no content field", ErrProtocol, url)
		}
		return *out.Content, nil
	default:
		var out struct {
			Prompt *string `json:"prompt"`
		}
		body := map[string]any{"tokens": ids}
		if t.model != "" {
			body["model"] = t.model
		}
		if err := postJSON(ctx, t.client, url, body, &out); err != nil {
			return "", err
		}
		if out.Prompt == nil {
			return "", fmt.Errorf("%w: %s: no prompt field", ErrProtocol, url)
		}
		return *out.Prompt, nil
	}
}

// Encode is EncodeContext with retries and no error: see the type doc.
func (t *Tokenizer) Encode(text string) []int {
	var ids []int
	t.retry(func(ctx context.Context) (err error) {
		ids, err = t.EncodeContext(ctx, text)
		return err
	})
	return ids
}

// Decode is DecodeContext with retries and no error: see the type doc.
func (t *Tokenizer) Decode(ids []int) string {
	var s string
	t.retry(func(ctx context.Context) (err error) {
		s, err = t.DecodeContext(ctx, ids)
		return err
	})
	return s
}

func (t *Tokenizer) retry(f func(ctx context.Context) error) {
	var err error
	d := t.Backoff
	for a := 0; a < max(t.Attempts, 1); a++ {
		if a > 0 {
			time.Sleep(d)
			d *= 2
		}
		ctx, cancel := context.WithTimeout(context.Background(), t.Timeout)
		err = f(ctx)
		cancel()
		if err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		t.mu.Lock()
		if t.err == nil {
			t.err = fmt.Errorf("remote tokenizer %s: %w", t.url, err)
		}
		t.mu.Unlock()
	}
}

// Err returns the first error Encode or Decode swallowed, or nil.
func (t *Tokenizer) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// ClearErr forgets the recorded error (e.g. between rollout batches, once
// the episodes that saw it have ended).
func (t *Tokenizer) ClearErr() {
	t.mu.Lock()
	t.err = nil
	t.mu.Unlock()
}

// ErrTokenizer is matched by the error of a Guard sampler whose tokenizer
// has failed; it also matches ErrUnavailable.
var ErrTokenizer = errors.New("remote tokenizer failed")

type tokenizerError struct{ err error }

func (e *tokenizerError) Error() string { return fmt.Sprintf("%v: %v", ErrTokenizer, e.err) }
func (e *tokenizerError) Is(target error) bool {
	return target == ErrTokenizer || target == ErrUnavailable
}
func (e *tokenizerError) Unwrap() error { return e.err }

// Guard returns a sampler that fails while tok has a recorded error (before
// and after sampling), so that an episode built with a failed Encode or
// Decode ends infra_error.
func Guard(s infer.Sampler, tok *Tokenizer) infer.Sampler { return guarded{s, tok} }

type guarded struct {
	s   infer.Sampler
	tok *Tokenizer
}

func (g guarded) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if err := g.tok.Err(); err != nil {
		return infer.Completion{}, &tokenizerError{err}
	}
	c, err := g.s.Sample(ctx, req)
	if err != nil {
		return c, err
	}
	if err := g.tok.Err(); err != nil {
		return infer.Completion{}, &tokenizerError{err}
	}
	return c, nil
}

package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Tokenizer turns text into the server's token ids and back through
// llama.cpp's /tokenize and /detokenize endpoints, so that prompts are
// built with exactly the vocabulary the engine samples from. Special
// tokens are not parsed from text (parse_special: false) and none are
// added: the agent loop places template tokens by id, and the literal text
// "<|im_end|>" in an observation stays plain text that cannot forge a turn
// boundary. vLLM's /tokenize runs the Hugging Face encoder, which always
// turns special-token text into control ids and has no option against it,
// and SGLang has no such endpoint here: with those engines the tokenizer
// is local (--tokenizer).
//
// A Tokenizer may span several endpoints serving the same model (DialTokenizer):
// a call that fails on one is retried on the next, round the list, Attempts
// times in all, with a backoff that ends early when the context does.
//
// Encode and Decode are agent.Tokenizer: each call runs under its caller's
// context (the episode's) and returns its own error, so a failure ends only
// the episode that asked. Nothing is sticky: a later call that works
// returns its result. Encode's results are cached (the system prompt, the
// summary instruction and repeated observations are encoded many times).
type Tokenizer struct {
	codecs []TextCodec // one engine per endpoint
	urls   []string

	// Attempts and Backoff govern retries of every call, across endpoints
	// (defaults 4, 100ms doubling); Timeout bounds one attempt (default 30s).
	Attempts int
	Backoff  time.Duration
	Timeout  time.Duration

	mu       sync.Mutex
	encCache map[string][]int
	cacheLen int // total ids held, bounded by maxCacheIDs
	next     int // endpoint the next call starts at
}

const maxCacheIDs = 1 << 22

// NewTokenizer returns a tokenizer for the server of kind (one whose engine
// is a TextCodec: KindLlamaCpp; see the type doc for why not the others)
// at baseURL. A nil client means
// a fresh http.Client.
func NewTokenizer(kind, baseURL string, client *http.Client) (*Tokenizer, error) {
	return DialTokenizer(client, Endpoint{Kind: kind, URL: baseURL})
}

// DialTokenizer returns a tokenizer over endpoints (all of one kind whose
// engine is a TextCodec, KindLlamaCpp, serving the same model), failing
// over from one to the next.
func DialTokenizer(client *http.Client, endpoints ...Endpoint) (*Tokenizer, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("remote tokenizer: no endpoints")
	}
	kind := endpoints[0].Kind
	k, ok := LookupKind(kind)
	if ok {
		_, ok = k.New(endpoints[0], http.DefaultClient).(TextCodec)
	}
	switch {
	case ok:
	case k.NoTokenizer != "":
		return nil, errors.New("remote tokenizer: " + k.NoTokenizer)
	default:
		return nil, fmt.Errorf("remote tokenizer: kind %q has no /tokenize endpoint here (want %s)", kind, orList(tokenizerKinds()))
	}
	client = httpClient(client)
	t := &Tokenizer{Attempts: 4, Backoff: 100 * time.Millisecond, Timeout: 30 * time.Second, encCache: map[string][]int{}}
	for _, e := range endpoints {
		if e.Kind != kind {
			return nil, fmt.Errorf("remote tokenizer: endpoints of kinds %s and %s: one tokenizer needs one model", kind, e.Kind)
		}
		t.codecs = append(t.codecs, k.New(e, client).(TextCodec))
		t.urls = append(t.urls, trimURL(e.URL))
	}
	return t, nil
}

// call runs f against the endpoints in turn until it succeeds, fails with a
// non-retryable error, ctx ends, or Attempts attempts have failed.
func (t *Tokenizer) call(ctx context.Context, f func(ctx context.Context, c TextCodec) error) error {
	t.mu.Lock()
	start := t.next
	t.mu.Unlock()
	var err error
	d := t.Backoff
	for a := 0; a < max(t.Attempts, 1); a++ {
		if a > 0 {
			tm := time.NewTimer(d)
			select {
			case <-ctx.Done():
				tm.Stop()
				return fmt.Errorf("remote tokenizer: %w (last attempt: %v)", ctx.Err(), err)
			case <-tm.C:
			}
			d *= 2
		}
		i := (start + a) % len(t.urls)
		actx, cancel := context.WithTimeout(ctx, t.Timeout)
		err = f(actx, t.codecs[i])
		cancel()
		if err == nil {
			t.mu.Lock()
			t.next = i // stay on the endpoint that works
			t.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("remote tokenizer %s: %w", t.urls[i], ctx.Err())
		}
		err = fmt.Errorf("remote tokenizer %s: %w", t.urls[i], err)
		if !retryable(err) {
			return err
		}
	}
	return err
}

// Encode returns the ids of text, without special tokens.
func (t *Tokenizer) Encode(ctx context.Context, text string) ([]int, error) {
	t.mu.Lock()
	if ids, ok := t.encCache[text]; ok {
		t.mu.Unlock()
		return append([]int(nil), ids...), nil
	}
	t.mu.Unlock()
	var ids []int
	err := t.call(ctx, func(ctx context.Context, c TextCodec) (err error) {
		ids, err = c.Tokenize(ctx, text)
		return err
	})
	if err != nil {
		return nil, err
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

// Decode returns the text of ids.
func (t *Tokenizer) Decode(ctx context.Context, ids []int) (string, error) {
	if len(ids) == 0 {
		return "", nil
	}
	var text string
	err := t.call(ctx, func(ctx context.Context, c TextCodec) (err error) {
		text, err = c.Detokenize(ctx, ids)
		return err
	})
	return text, err
}

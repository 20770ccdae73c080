package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"

	"github.com/compactrl/compactrl/infer"
)

// LlamaCpp samples from one llama.cpp llama-server through its
// OpenAI-compatible /v1/completions, streamed (see the package doc for why
// and for what the log-probs mean). One Sample is one attempt: retries,
// timeouts and balancing belong to Pool.
type LlamaCpp struct {
	url    string
	client *http.Client
	// NoSeed sends llama.cpp's "random" seed (0xFFFFFFFF) instead of the
	// request's (Endpoint.Seed = SeedNone).
	NoSeed bool
}

func init() {
	RegisterKind(EngineKind{Name: KindLlamaCpp, New: func(e Endpoint, c *http.Client) infer.Sampler {
		l := NewLlamaCpp(e.URL, c)
		l.NoSeed = e.Seed == SeedNone
		return l
	}})
}

// NewLlamaCpp returns an engine for the server at baseURL (for example
// http://127.0.0.1:8080). A nil client means a fresh http.Client.
func NewLlamaCpp(baseURL string, client *http.Client) *LlamaCpp {
	return &LlamaCpp{url: trimURL(baseURL), client: httpClient(client)}
}

// URL returns the server's base URL.
func (l *LlamaCpp) URL() string { return l.url }

var _ TextCodec = (*LlamaCpp)(nil)

// Tokenize implements TextCodec with one POST /tokenize: no special
// tokens added, none parsed from text.
func (l *LlamaCpp) Tokenize(ctx context.Context, text string) ([]int, error) {
	url := l.url + "/tokenize"
	var out struct {
		Tokens *[]int `json:"tokens"`
	}
	body := map[string]any{"content": text, "add_special": false, "parse_special": false}
	if err := postJSON(ctx, l.client, url, body, &out); err != nil {
		return nil, err
	}
	if out.Tokens == nil {
		return nil, fmt.Errorf("%w: %s: no tokens field", ErrProtocol, url)
	}
	for i, id := range *out.Tokens {
		if id < 0 {
			return nil, fmt.Errorf("%w: %s: token %d is %d", ErrProtocol, url, i, id)
		}
	}
	return *out.Tokens, nil
}

// Detokenize implements TextCodec with one POST /detokenize.
func (l *LlamaCpp) Detokenize(ctx context.Context, ids []int) (string, error) {
	url := l.url + "/detokenize"
	var out struct {
		Content *string `json:"content"`
	}
	if err := postJSON(ctx, l.client, url, map[string]any{"tokens": ids}, &out); err != nil {
		return "", err
	}
	if out.Content == nil {
		return "", fmt.Errorf("%w: %s: no content field", ErrProtocol, url)
	}
	return *out.Content, nil
}

// llamaSamplers is the whole sampler chain: temperature, then nucleus on
// the tempered distribution, then the draw. Everything else (top-k, min-p,
// penalties, DRY, XTC, typical-p) is also neutralised field by field below
// in case a server ignores the chain.
var llamaSamplers = []string{"temperature", "top_p"}

type llamaRequest struct {
	Prompt            []int    `json:"prompt"`
	MaxTokens         int      `json:"max_tokens"`
	Temperature       float64  `json:"temperature"`
	TopP              float64  `json:"top_p"`
	TopK              int      `json:"top_k"`
	MinP              float64  `json:"min_p"`
	TypicalP          float64  `json:"typical_p"`
	RepeatPenalty     float64  `json:"repeat_penalty"`
	PresencePenalty   float64  `json:"presence_penalty"`
	FrequencyPenalty  float64  `json:"frequency_penalty"`
	DryMultiplier     float64  `json:"dry_multiplier"`
	XTCProbability    float64  `json:"xtc_probability"`
	Samplers          []string `json:"samplers"`
	Seed              uint32   `json:"seed"`
	Logprobs          int      `json:"logprobs"`
	PostSamplingProbs bool     `json:"post_sampling_probs"`
	Stream            bool     `json:"stream"`
	CachePrompt       bool     `json:"cache_prompt"`
}

type llamaToken struct {
	ID      *int     `json:"id"`
	Logprob *float64 `json:"logprob"`
	Prob    *float64 `json:"prob"`
}

type llamaChunk struct {
	Choices []struct {
		Logprobs *struct {
			Content []llamaToken `json:"content"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Error json.RawMessage `json:"error"`
}

// llamaSeed maps a Request seed onto llama.cpp's uint32 seed. 0xFFFFFFFF
// means "random" to the server, so it is folded onto 0xFFFFFFFE.
func llamaSeed(seed int64) uint32 {
	u := uint64(seed)
	s := uint32(u ^ u>>32)
	if s == math.MaxUint32 {
		s--
	}
	return s
}

// Sample runs one streamed completion and closes the stream at the first
// stop id.
func (l *LlamaCpp) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if err := checkRequest(req, 0); err != nil {
		return infer.Completion{}, err
	}
	seed := llamaSeed(req.Seed)
	if l.NoSeed {
		seed = math.MaxUint32
	}
	body := llamaRequest{
		Prompt:            req.Prompt,
		MaxTokens:         req.MaxTokens,
		Temperature:       req.Temperature,
		TopP:              topP(req),
		TypicalP:          1,
		RepeatPenalty:     1,
		Samplers:          llamaSamplers,
		Seed:              seed,
		Logprobs:          1,
		PostSamplingProbs: req.Temperature > 0,
		Stream:            true,
		CachePrompt:       true,
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	url := l.url + "/v1/completions"
	hreq, err := newPost(ctx, url, body)
	if err != nil {
		return infer.Completion{}, err
	}
	hreq.Header.Set("Accept", "text/event-stream")
	resp, err := do(l.client, hreq)
	if err != nil {
		return infer.Completion{}, err
	}
	defer resp.Body.Close()
	tokens, logprobs, reason, err := readLlamaStream(resp.Body, req, body.PostSamplingProbs)
	if err != nil {
		return infer.Completion{}, fmt.Errorf("stream of %s: %w", url, err)
	}
	return finish(req, tokens, logprobs, reason, 0)
}

// readLlamaStream reads server-sent events until the finish chunk (then
// [DONE] or EOF), a stop id, or an error. With post, each token carries
// "prob" (post-sampling) and its log is taken; otherwise "logprob".
func readLlamaStream(r io.Reader, req infer.Request, post bool) (tokens []int, logprobs []float64, reason string, err error) {
	stop := make(map[int]bool, len(req.Stop))
	for _, s := range req.Stop {
		stop[s] = true
	}
	br := bufio.NewReaderSize(r, 64<<10)
	finished := false
	for {
		line, rerr := br.ReadBytes('\n')
		if len(line) > maxBody {
			return nil, nil, "", fmt.Errorf("%w: event line of %d bytes", ErrProtocol, len(line))
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0 || line[0] == ':':
		case bytes.HasPrefix(line, []byte("error:")):
			return nil, nil, "", fmt.Errorf("server error event: %s", bytes.TrimSpace(line[len("error:"):]))
		case bytes.HasPrefix(line, []byte("data:")):
			data := bytes.TrimSpace(line[len("data:"):])
			if bytes.Equal(data, []byte("[DONE]")) {
				if !finished {
					return nil, nil, "", fmt.Errorf("%w: [DONE] before a finish reason", ErrProtocol)
				}
				return tokens, logprobs, reason, nil
			}
			var c llamaChunk
			if err := json.Unmarshal(data, &c); err != nil {
				return nil, nil, "", fmt.Errorf("%w: event %d: %v", ErrProtocol, len(tokens), err)
			}
			if len(c.Error) > 0 && string(c.Error) != "null" {
				return nil, nil, "", fmt.Errorf("server error event: %s", c.Error)
			}
			if len(c.Choices) != 1 {
				return nil, nil, "", fmt.Errorf("%w: event with %d choices", ErrProtocol, len(c.Choices))
			}
			ch := c.Choices[0]
			if ch.Logprobs != nil {
				for _, t := range ch.Logprobs.Content {
					lp, err := llamaLogprob(t, post)
					if err != nil {
						return nil, nil, "", fmt.Errorf("token %d: %w", len(tokens), err)
					}
					tokens = append(tokens, *t.ID)
					logprobs = append(logprobs, lp)
					if stop[*t.ID] {
						// Closing the stream makes the server drop the slot.
						return tokens, logprobs, infer.FinishStop, nil
					}
					if len(tokens) > req.MaxTokens {
						return nil, nil, "", fmt.Errorf("%w: more than MaxTokens=%d tokens", ErrProtocol, req.MaxTokens)
					}
				}
			}
			if ch.FinishReason != nil {
				finished, reason = true, *ch.FinishReason
			}
		default:
			// Other SSE fields (event:, id:, retry:) carry nothing here.
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				if finished {
					return tokens, logprobs, reason, nil
				}
				return nil, nil, "", fmt.Errorf("%w: stream ended after %d tokens without a finish reason", ErrProtocol, len(tokens))
			}
			return nil, nil, "", rerr
		}
	}
}

func llamaLogprob(t llamaToken, post bool) (float64, error) {
	if t.ID == nil {
		return 0, fmt.Errorf("%w: token without id", ErrProtocol)
	}
	if post {
		if t.Prob == nil {
			return 0, fmt.Errorf("%w: token %d without prob (post_sampling_probs ignored?)", ErrProtocol, *t.ID)
		}
		if !(*t.Prob > 0) || *t.Prob > 1+1e-6 {
			return 0, fmt.Errorf("%w: token %d has probability %v", ErrProtocol, *t.ID, *t.Prob)
		}
		return math.Log(*t.Prob), nil
	}
	if t.Logprob == nil {
		return 0, fmt.Errorf("%w: token %d without logprob", ErrProtocol, *t.ID)
	}
	return *t.Logprob, nil
}

package remote

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/compactrl/compactrl/infer"
)

// VLLM samples from one vLLM OpenAI-compatible server through
// /v1/completions with a token-id prompt, stop_token_ids,
// return_token_ids and return_tokens_as_token_ids. Every sampling
// parameter that changes the distribution is sent (top_k −1, min_p 0,
// neutral penalties, min_tokens 0), so the model's generation_config
// cannot change what is sampled. The sampled ids come from
// choices[].token_ids and, independently, from the legacy logprobs.tokens
// ("token_id:N"); the two must agree. One Sample is one attempt.
type VLLM struct {
	url    string
	model  string
	client *http.Client
	// LogprobsMode is the server's --logprobs-mode ("" = LogprobsRaw,
	// vLLM's default); with raw log-probs Sample refuses requests whose
	// sampling distribution they are not (CheckSampling).
	LogprobsMode string
	// NoSeed sends no seed (Endpoint.Seed = SeedNone).
	NoSeed bool
}

// OptLogprobs is vLLM's option: the --logprobs-mode its servers were
// started with, LogprobsRaw (vLLM's default) or LogprobsProcessed. It
// decides which sampling settings an endpoint may serve (CheckSampling).
const OptLogprobs = "logprobs"

var vllmLogprobs = KindOption{Name: OptLogprobs, Field: "logprobs_mode",
	Values: []string{LogprobsRaw, LogprobsProcessed},
	Usage: "the --logprobs-mode the vLLM servers run with: " + LogprobsRaw + " (vLLM's default; only temperature 1, top_p 1) or " +
		LogprobsProcessed + " (any sampling setting)"}

func init() {
	RegisterKind(EngineKind{Name: KindVLLM, Options: []KindOption{vllmLogprobs}, New: func(e Endpoint, c *http.Client) infer.Sampler {
		v := NewVLLM(e.URL, e.Model, c)
		v.LogprobsMode, v.NoSeed = e.Option(OptLogprobs), e.Seed == SeedNone
		return v
	}, NoTokenizer: "vLLM's /tokenize turns special-token text in observations (\"<|im_end|>\") into control ids and cannot be told not to; tokenize locally with the model's tokenizer.json"})
}

// NewVLLM returns an engine for the server at baseURL serving model (the
// name given to --served-model-name, or the model path). A nil client
// means a fresh http.Client.
func NewVLLM(baseURL, model string, client *http.Client) *VLLM {
	return &VLLM{url: trimURL(baseURL), model: model, client: httpClient(client)}
}

// URL returns the server's base URL.
func (v *VLLM) URL() string { return v.url }

type vllmRequest struct {
	Model                  string  `json:"model,omitempty"`
	Prompt                 []int   `json:"prompt"`
	MaxTokens              int     `json:"max_tokens"`
	Temperature            float64 `json:"temperature"`
	TopP                   float64 `json:"top_p"`
	TopK                   int     `json:"top_k"`
	MinP                   float64 `json:"min_p"`
	RepetitionPenalty      float64 `json:"repetition_penalty"`
	PresencePenalty        float64 `json:"presence_penalty"`
	FrequencyPenalty       float64 `json:"frequency_penalty"`
	MinTokens              int     `json:"min_tokens"`
	Seed                   *int64  `json:"seed,omitempty"`
	StopTokenIDs           []int   `json:"stop_token_ids,omitempty"`
	Logprobs               int     `json:"logprobs"`
	ReturnTokensAsTokenIDs bool    `json:"return_tokens_as_token_ids"`
	ReturnTokenIDs         bool    `json:"return_token_ids"`
	SkipSpecialTokens      bool    `json:"skip_special_tokens"`
}

// vllmResponse is the non-streamed completions answer, legacy logprobs
// shape: choices[].logprobs.{tokens, token_logprobs, top_logprobs,
// text_offset}.
type vllmResponse struct {
	Choices []struct {
		Index    int   `json:"index"`
		TokenIDs []int `json:"token_ids"`
		Logprobs *struct {
			Tokens        []string   `json:"tokens"`
			TokenLogprobs []*float64 `json:"token_logprobs"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// Sample runs one completion.
func (v *VLLM) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if err := checkRequest(req, 0); err != nil {
		return infer.Completion{}, err
	}
	if err := v.CheckSampling(req.Temperature, req.TopP); err != nil {
		return infer.Completion{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	body := vllmRequest{
		Model:                  v.model,
		Prompt:                 req.Prompt,
		MaxTokens:              req.MaxTokens,
		Temperature:            req.Temperature,
		TopP:                   topP(req),
		TopK:                   neutralTopK,
		MinP:                   neutralMinP,
		RepetitionPenalty:      neutralRepetitionPenalty,
		PresencePenalty:        neutralPresencePenalty,
		FrequencyPenalty:       neutralFrequencyPenalty,
		MinTokens:              neutralMinTokens,
		StopTokenIDs:           req.Stop,
		Logprobs:               0, // the sampled token's own log-prob only
		ReturnTokensAsTokenIDs: true,
		ReturnTokenIDs:         true,
	}
	if !v.NoSeed {
		body.Seed = &req.Seed
	}
	url := v.url + "/v1/completions"
	var out vllmResponse
	if err := postJSON(ctx, v.client, url, body, &out); err != nil {
		return infer.Completion{}, err
	}
	if len(out.Choices) != 1 {
		return infer.Completion{}, fmt.Errorf("%w: %s: %d choices", ErrProtocol, url, len(out.Choices))
	}
	ch := out.Choices[0]
	if ch.Logprobs == nil {
		return infer.Completion{}, fmt.Errorf("%w: %s: no logprobs", ErrProtocol, url)
	}
	ids := make([]int, len(ch.Logprobs.Tokens))
	for i, t := range ch.Logprobs.Tokens {
		id, err := parseTokenID(t)
		if err != nil {
			return infer.Completion{}, fmt.Errorf("%w: %s: logprobs.tokens[%d]: %v", ErrProtocol, url, i, err)
		}
		ids[i] = id
	}
	if ch.TokenIDs != nil && !equalInts(ch.TokenIDs, ids) {
		return infer.Completion{}, fmt.Errorf("%w: %s: token_ids %v disagree with logprobs.tokens %v", ErrProtocol, url, ch.TokenIDs, ids)
	}
	lps := make([]float64, len(ch.Logprobs.TokenLogprobs))
	for i, lp := range ch.Logprobs.TokenLogprobs {
		if lp == nil {
			return infer.Completion{}, fmt.Errorf("%w: %s: token_logprobs[%d] is null", ErrProtocol, url, i)
		}
		lps[i] = *lp
	}
	reason := ""
	if ch.FinishReason != nil {
		reason = *ch.FinishReason
	}
	c, err := finish(req, ids, lps, reason, 0)
	if err != nil {
		return infer.Completion{}, fmt.Errorf("%s: %w", url, err)
	}
	return c, nil
}

// parseTokenID reads vLLM's "token_id:N" token form.
func parseTokenID(s string) (int, error) {
	rest, ok := strings.CutPrefix(s, "token_id:")
	if !ok {
		return 0, fmt.Errorf("token %q is not of the form token_id:N (return_tokens_as_token_ids ignored?)", s)
	}
	id, err := strconv.Atoi(rest)
	if err != nil || id < 0 {
		return 0, fmt.Errorf("token %q: bad id", s)
	}
	return id, nil
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

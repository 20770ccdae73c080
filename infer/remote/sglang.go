package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/compactrl/compactrl/infer"
)

// SGLang samples from one SGLang server through its native POST /generate
// with input_ids and return_logprob. The sampled ids and log-probs come
// from meta_info.output_token_logprobs = [[logprob, id, text], ...]; when
// the server also returns output_ids they must agree. One Sample is one
// attempt.
type SGLang struct {
	url    string
	client *http.Client
	// SeedParam names the sampling_params field that carries the seed
	// ("sampling_seed" in current SGLang); empty sends no seed, for
	// servers that reject unknown sampling parameters.
	SeedParam string
}

// NewSGLang returns an engine for the server at baseURL. A nil client
// means a fresh http.Client.
func NewSGLang(baseURL string, client *http.Client) *SGLang {
	return &SGLang{url: trimURL(baseURL), client: httpClient(client), SeedParam: "sampling_seed"}
}

// URL returns the server's base URL.
func (s *SGLang) URL() string { return s.url }

type sglangRequest struct {
	InputIDs       []int          `json:"input_ids"`
	SamplingParams map[string]any `json:"sampling_params"`
	ReturnLogprob  bool           `json:"return_logprob"`
	TopLogprobsNum int            `json:"top_logprobs_num"`
	Stream         bool           `json:"stream"`
}

type sglangResponse struct {
	OutputIDs []int `json:"output_ids"`
	MetaInfo  *struct {
		FinishReason json.RawMessage     `json:"finish_reason"`
		OutputLogp   [][]json.RawMessage `json:"output_token_logprobs"`
	} `json:"meta_info"`
}

// Sample runs one generation.
func (s *SGLang) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if err := checkRequest(req, 0); err != nil {
		return infer.Completion{}, err
	}
	sp := map[string]any{
		"max_new_tokens": req.MaxTokens,
		"temperature":    req.Temperature,
		"top_p":          topP(req),
	}
	if len(req.Stop) > 0 {
		sp["stop_token_ids"] = req.Stop
	}
	if s.SeedParam != "" {
		sp[s.SeedParam] = req.Seed
	}
	body := sglangRequest{InputIDs: req.Prompt, SamplingParams: sp, ReturnLogprob: true}
	url := s.url + "/generate"
	var out sglangResponse
	if err := postJSON(ctx, s.client, url, body, &out); err != nil {
		return infer.Completion{}, err
	}
	if out.MetaInfo == nil {
		return infer.Completion{}, fmt.Errorf("%w: %s: no meta_info", ErrProtocol, url)
	}
	ids := make([]int, len(out.MetaInfo.OutputLogp))
	lps := make([]float64, len(out.MetaInfo.OutputLogp))
	for i, e := range out.MetaInfo.OutputLogp {
		if len(e) < 2 {
			return infer.Completion{}, fmt.Errorf("%w: %s: output_token_logprobs[%d] has %d fields", ErrProtocol, url, i, len(e))
		}
		var lp *float64
		if err := json.Unmarshal(e[0], &lp); err != nil || lp == nil {
			return infer.Completion{}, fmt.Errorf("%w: %s: output_token_logprobs[%d][0] = %s", ErrProtocol, url, i, e[0])
		}
		if err := json.Unmarshal(e[1], &ids[i]); err != nil {
			return infer.Completion{}, fmt.Errorf("%w: %s: output_token_logprobs[%d][1] = %s", ErrProtocol, url, i, e[1])
		}
		lps[i] = *lp
	}
	if out.OutputIDs != nil && !equalInts(out.OutputIDs, ids) {
		return infer.Completion{}, fmt.Errorf("%w: %s: output_ids %v disagree with output_token_logprobs ids %v", ErrProtocol, url, out.OutputIDs, ids)
	}
	reason, err := sglangFinish(out.MetaInfo.FinishReason)
	if err != nil {
		return infer.Completion{}, fmt.Errorf("%w: %s: %v", ErrProtocol, url, err)
	}
	c, err := finish(req, ids, lps, reason, 0)
	if err != nil {
		return infer.Completion{}, fmt.Errorf("%s: %w", url, err)
	}
	return c, nil
}

// sglangFinish reads meta_info.finish_reason: {"type": "stop"|"length"|
// "abort", "matched": ..., "length": ...} in current versions, a bare
// string in old ones.
func sglangFinish(raw json.RawMessage) (string, error) {
	var obj struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &obj); err == nil && obj.Type != "" {
		return obj.Type, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil && s != "" {
		return s, nil
	}
	return "", fmt.Errorf("finish_reason %s", raw)
}

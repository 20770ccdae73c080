package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/compactrl/compactrl/infer"
)

// SGLang samples from one SGLang server through its native POST /generate
// with input_ids and return_logprob. Every sampling parameter that changes
// the distribution is sent (top_k −1, min_p 0, neutral penalties,
// min_new_tokens 0), so the model's generation_config cannot change what
// is sampled. The sampled ids and log-probs come from
// meta_info.output_token_logprobs = [[logprob, id, text], ...]; current
// SGLang also returns output_ids, which must agree. One Sample is one
// attempt.
//
// The seed goes as sampling_params.sampling_seed, which SGLang honours only
// when the server runs with --enable-deterministic-inference (SeedHonoured
// asks it); a version without that field fails every such request with a
// bare HTTP 500, which Sample reports as a permanent error naming
// --engine-seed none.
type SGLang struct {
	url    string
	client *http.Client
	// SeedParam names the sampling_params field that carries the seed
	// ("sampling_seed" in current SGLang); empty sends no seed, for
	// servers that reject unknown sampling parameters.
	SeedParam string
}

func init() {
	RegisterKind(EngineKind{Name: KindSGLang, New: func(e Endpoint, c *http.Client) infer.Sampler {
		s := NewSGLang(e.URL, c)
		if e.Seed == SeedNone {
			s.SeedParam = ""
		}
		return s
	}})
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
	if err := s.CheckSampling(req.Temperature, req.TopP); err != nil {
		return infer.Completion{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	sp := map[string]any{
		"max_new_tokens":     req.MaxTokens,
		"min_new_tokens":     neutralMinTokens,
		"temperature":        req.Temperature,
		"top_p":              topP(req),
		"top_k":              neutralTopK,
		"min_p":              neutralMinP,
		"repetition_penalty": neutralRepetitionPenalty,
		"presence_penalty":   neutralPresencePenalty,
		"frequency_penalty":  neutralFrequencyPenalty,
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
		var se *StatusError
		if s.SeedParam != "" && errors.As(err, &se) && se.Code == http.StatusInternalServerError && se.Body == "Internal Server Error" {
			// FastAPI's answer to an exception the handler did not catch:
			// SamplingParams(**sampling_params) raising TypeError on a field
			// the version does not have. It fails the same way every time.
			se.Permanent = true
			se.Hint = fmt.Sprintf("an SGLang without sampling_params.%s fails every request that carries it this way: pass --engine-seed none (endpoint option seed=none)", s.SeedParam)
		}
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

var _ SeedChecker = (*SGLang)(nil)

// CheckSeeds implements SeedChecker (nothing to check when no seed is
// sent): a server that cannot be asked is a warning; one that predates
// sampling_seed (SeedHonoured's known false) would fail every request, an
// error; one without --enable-deterministic-inference ignores the seed, a
// warning.
func (s *SGLang) CheckSeeds(ctx context.Context) (warning string, err error) {
	if s.SeedParam == "" {
		return "", nil
	}
	honoured, known, err := s.SeedHonoured(ctx)
	switch {
	case err != nil:
		return fmt.Sprintf("sglang %s: cannot tell whether it honours seeds (%v); episodes may not be reproducible from their seeds", s.url, err), nil
	case !known:
		return "", fmt.Errorf("this SGLang reports no enable_deterministic_inference, so it predates sampling_seed and would fail every request: pass --engine-seed %s", SeedNone)
	case !honoured:
		return fmt.Sprintf("sglang %s runs without --enable-deterministic-inference: it ignores sampling_seed, so episodes are not reproducible from their seeds", s.url), nil
	}
	return "", nil
}

// SeedHonoured asks the server (GET /get_server_info, which lists its
// server arguments) whether it runs with --enable-deterministic-inference,
// without which SGLang ignores sampling_seed. known is false when the
// server does not report the argument at all: a version that predates it
// and the sampling_seed field.
func (s *SGLang) SeedHonoured(ctx context.Context) (honoured, known bool, err error) {
	url := s.url + "/get_server_info"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, false, fmt.Errorf("build request for %s: %w", url, err)
	}
	resp, err := do(s.client, req)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	var info struct {
		Deterministic *bool `json:"enable_deterministic_inference"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&info); err != nil {
		return false, false, fmt.Errorf("%w: decode answer of %s: %v", ErrProtocol, url, err)
	}
	if info.Deterministic == nil {
		return false, false, nil
	}
	return *info.Deterministic, true, nil
}

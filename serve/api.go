package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer/remote"
	"github.com/compactrl/compactrl/internal/field"
)

// Engine is the inference endpoint a request's episode samples from: for
// slime, its SGLang router.
type Engine struct {
	URL   string `json:"url"`
	Kind  string `json:"kind"` // a registered engine kind (remote.Kinds)
	Model string `json:"model,omitempty"`
	// SeedMode is "request" (every engine call carries its seed) or "none";
	// absent: the server's --engine-seed.
	SeedMode string `json:"seed_mode,omitempty"`
	// Options are settings of the engine's kind, by remote.KindOption.Name;
	// on the wire each is the field KindOption.Field beside the others,
	// e.g. vLLM's "logprobs_mode": "processed_logprobs" (with raw
	// log-probs, vLLM's default, only temperature 1, top_p 1 is served;
	// docs/design.md, "Recorded log-probabilities"). Absent: the server's
	// flag (KindOption.Flag()).
	Options map[string]string `json:"-"`
}

// engineFields is Engine's fixed JSON fields.
type engineFields struct {
	URL      string `json:"url"`
	Kind     string `json:"kind"`
	Model    string `json:"model,omitempty"`
	SeedMode string `json:"seed_mode,omitempty"`
}

// MarshalJSON writes the fixed fields and each option under its field
// name (keys sorted).
func (e Engine) MarshalJSON() ([]byte, error) {
	m := map[string]any{"url": e.URL, "kind": e.Kind}
	if e.Model != "" {
		m["model"] = e.Model
	}
	if e.SeedMode != "" {
		m["seed_mode"] = e.SeedMode
	}
	for name, v := range e.Options {
		o, ok := remote.LookupOption(name)
		if !ok {
			return nil, fmt.Errorf("engine: option %q is no registered engine kind's", name)
		}
		m[o.Field] = v
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads the fixed fields and, into Options, the fields of
// registered kinds' options; any other key is a *field.Error.
func (e *Engine) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	fixed := map[string]json.RawMessage{}
	opts := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		o, ok := remote.OptionByField(k)
		if !ok {
			fixed[k] = raw[k]
			continue
		}
		var v string
		if err := json.Unmarshal(raw[k], &v); err != nil {
			return field.Errorf("engine."+k, "want a JSON string, got %s", raw[k])
		}
		opts[o.Name] = v
	}
	b, err := json.Marshal(fixed)
	if err != nil {
		return err
	}
	var f engineFields
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			return field.Errorf("engine."+te.Field, "want a JSON %s, got %s", te.Type, te.Value)
		case isUnknownField(err):
			return field.Errorf("engine."+unknownFieldName(err), "unknown field")
		}
		return err
	}
	*e = Engine{URL: f.URL, Kind: f.Kind, Model: f.Model, SeedMode: f.SeedMode}
	if len(opts) > 0 {
		e.Options = opts
	}
	return nil
}

// Sampling holds the request's sampling parameters; absent fields take the
// server's defaults.
type Sampling struct {
	Temperature *float64 `json:"temperature"`
	TopP        *float64 `json:"top_p"`
	// MaxNewTokens caps one action (one policy call), as slime's
	// sampling_params.max_new_tokens caps one generation.
	MaxNewTokens *int `json:"max_new_tokens"`
	// Seed derives every engine call's seed (agent.Agent.Run's seed); absent:
	// the rollout_id.
	Seed *int64 `json:"seed"`
}

// AgentParams holds the request's agent-loop budget (agent.Config, in
// tokens); absent fields take the server's defaults.
type AgentParams struct {
	Context              *int  `json:"context"`
	Reserve              *int  `json:"reserve"`
	KeepLast             *int  `json:"keep_last"`
	MaxCompactions       *int  `json:"max_compactions"`
	MaxTurns             *int  `json:"max_turns"`
	MaxSummaryTokens     *int  `json:"max_summary_tokens"`
	MaxObservationTokens *int  `json:"max_observation_tokens"`
	MaxFormatErrors      *int  `json:"max_format_errors"`
	NoCompaction         *bool `json:"no_compaction"`
}

// Request is the body of POST /v1/rollouts: play one episode of TaskID.
type Request struct {
	TaskID    string      `json:"task_id"`
	Engine    Engine      `json:"engine"`
	Sampling  Sampling    `json:"sampling"`
	Agent     AgentParams `json:"agent"`
	RolloutID *int64      `json:"rollout_id"`
	// RoutingKey, when set, is sent as the X-SMG-Routing-Key header on
	// every engine call of the episode (the SGLang router's session
	// affinity: slime sends sample.session_id under consistent hashing), so
	// that one episode's calls reach the engine that holds its prefix.
	RoutingKey string `json:"routing_key,omitempty"`
}

// RoutingHeader is the header RoutingKey is sent in.
const RoutingHeader = "X-SMG-Routing-Key"

// Segment is one context window of the episode in slime's layout: Tokens =
// prompt ⊕ response, and LossMask and RolloutLogProbs have ResponseLength
// entries (the response part of Tokens). Policy tokens carry loss mask 1
// and the log-probability the engine reported; template and observation
// tokens carry 0 and 0.
type Segment struct {
	Index           int       `json:"index"`
	Kind            string    `json:"kind"`
	Trainable       bool      `json:"trainable"`
	Tokens          []int     `json:"tokens"`
	ResponseLength  int       `json:"response_length"`
	LossMask        []int     `json:"loss_mask"`
	RolloutLogProbs []float64 `json:"rollout_log_probs"`
}

// Response is the answer to a finished episode.
type Response struct {
	RolloutID int64          `json:"rollout_id"`
	TaskID    string         `json:"task_id"`
	Status    episode.Status `json:"status"`
	// Scored is episode.Status.Scored: false (infra_error, verifier_error)
	// means no reward was measured, and the episode trains nothing whatever
	// the trainer's overlong setting (rl.Masked). The plug-ins mask by it,
	// so that the rule has one definition.
	Scored   bool               `json:"scored"`
	Reward   float64            `json:"reward"`
	Metrics  map[string]float64 `json:"metrics"`
	Segments []Segment          `json:"segments"`
	// Error is the cause of an infra_error episode.
	Error string `json:"error,omitempty"`
}

// ErrorBody is the JSON body of every non-200 answer. Field names the
// offending request field (dotted JSON path) when there is one.
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// decodeRequest decodes one JSON request body (read whole, within
// Config.MaxBodyBytes). Unknown fields, trailing data, wrong types and a
// missing or malformed required field are *field.Error.
func decodeRequest(b []byte) (Request, error) {
	var req Request
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var fe *field.Error
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &fe):
			return req, fe
		case errors.As(err, &te):
			return req, field.Errorf(te.Field, "want a JSON %s, got %s", te.Type, te.Value)
		case errors.As(err, &se):
			return req, field.Errorf("", "malformed JSON at byte %d: %v", se.Offset, err)
		case isUnknownField(err):
			return req, field.Errorf(unknownFieldName(err), "unknown field")
		case errors.Is(err, io.EOF):
			return req, field.Errorf("", "empty body: want a JSON object")
		default:
			return req, field.Errorf("", "%v", err)
		}
	}
	if dec.More() {
		return req, field.Errorf("", "trailing data after the JSON object")
	}
	return req, nil
}

// jsonUnknownField is how encoding/json reports a key DisallowUnknownFields
// refuses. It has no error type for it (only fmt.Errorf text, in v1 and in
// v1 over v2), so this prefix is the one place its text is read;
// TestDecodeUnknownFieldIsAFieldError fails if Go changes it.
const jsonUnknownField = "json: unknown field "

// isUnknownField reports whether a Decode error is an unknown key.
func isUnknownField(err error) bool { return strings.HasPrefix(err.Error(), jsonUnknownField) }

// unknownFieldName is the key an unknown-field error names.
func unknownFieldName(err error) string {
	return strings.Trim(strings.TrimPrefix(err.Error(), jsonUnknownField), `"`)
}

// Validate checks the fields the server needs and their ranges; the agent
// budget's own invariants are checked when the agent is built.
func (r *Request) Validate() error {
	if r.TaskID == "" {
		return field.Errorf("task_id", "required")
	}
	if r.RolloutID == nil {
		return field.Errorf("rollout_id", "required (an integer shared by the segments of this rollout)")
	}
	if len(r.RoutingKey) > 256 || strings.ContainsAny(r.RoutingKey, "\r\n\x00") {
		return field.Errorf("routing_key", "want at most 256 bytes without CR, LF or NUL")
	}
	if r.Engine.URL == "" {
		return field.Errorf("engine.url", "required")
	}
	u, err := url.Parse(r.Engine.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return field.Errorf("engine.url", "%q is not an http(s) URL", r.Engine.URL)
	}
	if r.Engine.Kind == "" {
		return field.Errorf("engine.kind", "required: %s", remote.KindList())
	}
	if _, ok := remote.LookupKind(r.Engine.Kind); !ok {
		return field.Errorf("engine.kind", "%q: want %s", r.Engine.Kind, remote.KindList())
	}
	for _, name := range slices.Sorted(maps.Keys(r.Engine.Options)) {
		o, ok := remote.LookupOption(name)
		switch {
		case !ok:
			return field.Errorf("engine", "option %q is no registered engine kind's", name)
		case o.Kind != r.Engine.Kind:
			return field.Errorf("engine."+o.Field, "a setting of %s engines, not of %s", o.Kind, r.Engine.Kind)
		}
		if err := o.Check(r.Engine.Options[name]); err != nil {
			return field.Errorf("engine."+o.Field, "%v", err)
		}
	}
	switch r.Engine.SeedMode {
	case "", remote.SeedRequest, remote.SeedNone:
	default:
		return field.Errorf("engine.seed_mode", "%q: want %s or %s", r.Engine.SeedMode, remote.SeedRequest, remote.SeedNone)
	}
	// The agent settings' ranges are agent.Config.Validate's, checked on
	// the merged configuration (AgentConfig); only what the engines
	// need beyond them is checked here.
	if s := r.Sampling; s.TopP != nil && *s.TopP == 0 {
		return field.Errorf("sampling.top_p", "%v: want a value in (0, 1]", *s.TopP)
	}
	return nil
}

// requestField is the request field of an agent.Config key: the sampling
// settings are under sampling (max_action_tokens is max_new_tokens, as
// slime calls it), the rest under agent.
func requestField(key string) string {
	switch key {
	case "temperature", "top_p":
		return "sampling." + key
	case "max_action_tokens":
		return "sampling.max_new_tokens"
	}
	return "agent." + key
}

// AgentConfig applies the request's sampling and agent fields to base and
// checks the result (agent.Config.Validate); a bad setting is a
// *field.Error naming the request field it came from, or the server's
// default it conflicts with.
func (r *Request) AgentConfig(base agent.Config) (agent.Config, error) {
	c := base
	set := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	a := r.Agent
	set(&c.Context, a.Context)
	set(&c.Reserve, a.Reserve)
	set(&c.KeepLast, a.KeepLast)
	set(&c.MaxCompactions, a.MaxCompactions)
	set(&c.MaxTurns, a.MaxTurns)
	set(&c.MaxSummaryTokens, a.MaxSummaryTokens)
	set(&c.MaxObservationTokens, a.MaxObservationTokens)
	set(&c.MaxFormatErrors, a.MaxFormatErrors)
	set(&c.MaxActionTokens, r.Sampling.MaxNewTokens)
	if a.NoCompaction != nil {
		c.NoCompaction = *a.NoCompaction
	}
	if r.Sampling.Temperature != nil {
		c.Temperature = *r.Sampling.Temperature
	}
	if r.Sampling.TopP != nil {
		c.TopP = *r.Sampling.TopP
	}
	if err := c.Validate(); err != nil {
		var fe *field.Error
		if !errors.As(err, &fe) {
			return c, field.Errorf("agent", "%v", err)
		}
		return c, field.Errorf(requestField(fe.Path), "%s", fe.Msg)
	}
	return c, nil
}

// Seed is the episode's seed: sampling.seed, else the rollout_id.
func (r *Request) Seed() int64 {
	if r.Sampling.Seed != nil {
		return *r.Sampling.Seed
	}
	return *r.RolloutID
}

// NewResponse lays an episode out in slime's per-segment form:
//
//	tokens_s = prompt_s ⊕ response_s,  response_length_s = |response_s|,
//	loss_mask_s, rollout_log_probs_s aligned with response_s.
func NewResponse(rolloutID int64, taskID string, ep *episode.Episode) Response {
	resp := Response{RolloutID: rolloutID, TaskID: taskID, Status: ep.Status, Scored: ep.Status.Scored(), Reward: ep.Reward,
		Metrics: ep.Metrics, Segments: make([]Segment, len(ep.Segments)), Error: ep.Meta[agent.MetaError]}
	if resp.Metrics == nil {
		resp.Metrics = map[string]float64{}
	}
	for i := range ep.Segments {
		s := &ep.Segments[i]
		toks := make([]int, 0, len(s.PromptIDs)+len(s.ResponseIDs))
		toks = append(append(toks, s.PromptIDs...), s.ResponseIDs...)
		lp := s.Logprobs
		if lp == nil {
			lp = make([]float64, len(s.ResponseIDs))
		}
		resp.Segments[i] = Segment{Index: i, Kind: string(s.Kind), Trainable: s.Trainable, Tokens: toks,
			ResponseLength: len(s.ResponseIDs), LossMask: s.LossMask, RolloutLogProbs: lp}
	}
	return resp
}

package serve

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/internal/field"
)

// An unknown key is a *field.Error naming it; the text encoding/json uses
// for it (it has no error type) is checked against the real decoder here,
// so a change in Go's wording fails this test instead of turning unknown
// fields into nameless 400s.
func TestDecodeUnknownFieldIsAFieldError(t *testing.T) {
	for body, want := range map[string]string{
		`{"task_id":"1","bogus":1}`:            "bogus",
		`{"task_id":"1","engine":{"speed":2}}`: "engine.speed",
	} {
		_, err := decodeRequest([]byte(body))
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Path != want || fe.Msg != "unknown field" {
			t.Errorf("%s: %v; want a field.Error on %q", body, err, want)
		}
	}

	var v struct{ A int }
	dec := json.NewDecoder(strings.NewReader(`{"B":1}`))
	dec.DisallowUnknownFields()
	err := dec.Decode(&v)
	if err == nil || !isUnknownField(err) || unknownFieldName(err) != "B" {
		t.Fatalf("encoding/json's unknown-field error %v is not recognised", err)
	}
	if isUnknownField(errors.New("json: cannot unmarshal")) {
		t.Error("another decode error taken for an unknown field")
	}

	// other decode failures name no field
	for _, body := range []string{``, `{"task_id":`, `{"task_id":1}`} {
		_, err := decodeRequest([]byte(body))
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Msg == "unknown field" {
			t.Errorf("%q: %v", body, err)
		}
	}
}

// An engine kind's option travels as its field beside engine's fixed ones
// (vLLM's logprobs_mode), round-trips, and is checked against its kind and
// values, each error on the option's own field.
func TestEngineOptionsOnTheWire(t *testing.T) {
	req, err := decodeRequest([]byte(`{"task_id":"1","rollout_id":1,"engine":{"url":"http://h:1","kind":"vllm","logprobs_mode":"processed_logprobs"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Engine.Options; len(got) != 1 || got["logprobs"] != "processed_logprobs" {
		t.Fatalf("Options = %v", got)
	}
	if err := req.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(req.Engine)
	if err != nil || string(b) != `{"kind":"vllm","logprobs_mode":"processed_logprobs","url":"http://h:1"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	for body, want := range map[string]string{
		`{"task_id":"1","rollout_id":1,"engine":{"url":"http://h:1","kind":"vllm","logprobs_mode":"processed"}}`:            `engine.logprobs_mode: "processed": want raw_logprobs or processed_logprobs`,
		`{"task_id":"1","rollout_id":1,"engine":{"url":"http://h:1","kind":"sglang","logprobs_mode":"processed_logprobs"}}`: "engine.logprobs_mode: a setting of vllm engines, not of sglang",
		`{"task_id":"1","rollout_id":1,"engine":{"url":"http://h:1","kind":"vllm","logprobs_mode":1}}`:                      "engine.logprobs_mode: want a JSON string, got 1",
		`{"task_id":"1","rollout_id":1,"engine":{"url":5,"kind":"vllm"}}`:                                                   "engine.url: want a JSON string, got number",
	} {
		req, err := decodeRequest([]byte(body))
		if err == nil {
			err = req.Validate()
		}
		var fe *field.Error
		if !errors.As(err, &fe) || err.Error() != want {
			t.Errorf("%s: %v, want the field error %q", body, err, want)
		}
	}
}

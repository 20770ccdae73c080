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
		`{"task_id":"1","engine":{"speed":2}}`: "speed",
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

package episode

import (
	"math"

	"github.com/compactrl/compactrl/internal/field"
)

// Known reports whether k is one of the kinds of docs/design.md §3.
func (k Kind) Known() bool { return k == KindExec || k == KindSummary }

// Statuses are the statuses of docs/design.md §3, in that order.
var Statuses = [...]Status{StatusOK, StatusOverlong, StatusInfraError, StatusFormatError, StatusVerifierError}

// Known reports whether s is one of Statuses.
func (s Status) Known() bool {
	for _, k := range Statuses {
		if s == k {
			return true
		}
	}
	return false
}

// Validate checks the invariants of the JSONL schema (docs/design.md §3): known
// status and kinds, a finite reward, token ids ≥ 0, loss_mask of the same
// length as response_ids with values 0 or 1, each of logprobs, values,
// advantages and returns either empty or of the length of response_ids, and
// every number finite. The error is a *field.Error naming the first bad
// field.
func (e *Episode) Validate() error {
	if !e.Status.Known() {
		return field.Errorf("status", "unknown status %q, want ok, overlong, infra_error, format_error or verifier_error", e.Status)
	}
	if !finite(e.Reward) {
		return field.Errorf("reward", "non-finite value %v", e.Reward)
	}
	for k, v := range e.Metrics {
		if !finite(v) {
			return field.Errorf(field.MapKey("metrics", k), "non-finite value %v", v)
		}
	}
	for i := range e.Segments {
		if err := e.Segments[i].validate(field.Index("segments", i)); err != nil {
			return err
		}
	}
	return nil
}

// Validate is Episode.Validate for one segment; field paths are relative
// to the segment.
func (s *Segment) Validate() error { return s.validate("") }

func (s *Segment) validate(path string) error {
	at := func(name string) string { return field.Key(path, name) }
	if !s.Kind.Known() {
		return field.Errorf(at("kind"), "unknown kind %q, want exec or summary", s.Kind)
	}
	for i, id := range s.PromptIDs {
		if id < 0 {
			return field.Errorf(field.Index(at("prompt_ids"), i), "negative token id %d", id)
		}
	}
	for i, id := range s.ResponseIDs {
		if id < 0 {
			return field.Errorf(field.Index(at("response_ids"), i), "negative token id %d", id)
		}
	}
	n := len(s.ResponseIDs)
	if len(s.LossMask) != n {
		return field.Errorf(at("loss_mask"), "length %d, want %d (len(response_ids))", len(s.LossMask), n)
	}
	for i, m := range s.LossMask {
		if m != 0 && m != 1 {
			return field.Errorf(field.Index(at("loss_mask"), i), "value %d, want 0 or 1", m)
		}
	}
	for _, f := range []struct {
		name string
		v    []float64
	}{
		{"logprobs", s.Logprobs},
		{"values", s.Values},
		{"advantages", s.Advantages},
		{"returns", s.Returns},
	} {
		if len(f.v) != 0 && len(f.v) != n {
			return field.Errorf(at(f.name), "length %d, want 0 or %d (len(response_ids))", len(f.v), n)
		}
		for i, x := range f.v {
			if !finite(x) {
				return field.Errorf(field.Index(at(f.name), i), "non-finite value %v", x)
			}
		}
	}
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

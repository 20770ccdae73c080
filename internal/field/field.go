// Package field is the one error type for an unusable setting or request
// field, named by its path in the document it came from, and the one way
// to build that path and to check a setting against its bounds.
//
// It is a small internal package of its own, below every package that
// validates (agent's config, episode files, serve's requests, train's and
// recipe's YAML configs), because those cannot import one another in both
// directions and each must report errors that the next layer can place:
// a validator reports paths relative to its own document (agent.Config
// says "context"), and the layer that embeds it prefixes them with Under
// (train's YAML says "agent.context"; serve maps the key to its JSON
// field). The text users read is always "PATH: MESSAGE".
package field

import (
	"errors"
	"fmt"
	"strconv"
)

// Error is an unusable field: Path names it in its YAML or JSON document
// (dotted keys, [i] for list elements, ["k"] for map keys; empty when the
// whole document is at fault) and Msg says what is wrong with it.
type Error struct {
	Path string
	Msg  string
	// err is the error Msg was made of (Under), for errors.Is and As.
	err error
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Unwrap is the error an Error placed by Under was made of, if any.
func (e *Error) Unwrap() error { return e.err }

// Errorf is an *Error at path with a formatted message.
func Errorf(path, format string, a ...any) *Error {
	return &Error{Path: path, Msg: fmt.Sprintf(format, a...)}
}

// Key is path extended by the mapping key k ("k" at the root).
func Key(path, k string) string {
	if path == "" {
		return k
	}
	if k == "" {
		return path
	}
	return path + "." + k
}

// Index is path extended by the list element i.
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// MapKey is path extended by the map entry k, quoted.
func MapKey(path, k string) string { return path + "[" + strconv.Quote(k) + "]" }

// Under places the errors of a validator of a sub-document at prefix: an
// *Error's path becomes Key(prefix, path), every error of a joined error
// is placed alike, and any other error becomes an *Error at prefix that
// wraps it. Only errors of the same document belong under prefix: an
// error about another file a field names (a checkpoint, a tokenizer) is
// wrapped with that file's name instead.
func Under(prefix string, err error) error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = Under(prefix, e)
		}
		return errors.Join(out...)
	}
	var fe *Error
	if errors.As(err, &fe) {
		return &Error{Path: Key(prefix, fe.Path), Msg: fe.Msg}
	}
	return &Error{Path: prefix, Msg: err.Error(), err: err}
}

// Bound is a numeric setting and its bounds, declared once where it is
// validated.
type Bound[T int | float64] struct {
	Path     string
	V        T
	Min, Max T
}

// Int and Float are the bounds of integer and float settings.
type (
	Int   = Bound[int]
	Float = Bound[float64]
)

// Check is nil when f.V lies in [f.Min, f.Max], else an *Error saying
// which bound it breaks, or that it is NaN.
func (f Bound[T]) Check() error {
	integer := T(1)/2 == 0
	switch {
	case f.V != f.V:
		return Errorf(f.Path, "%v is not a finite number", f.V)
	case f.V > f.Max:
		return Errorf(f.Path, "%v is above the limit %v", f.V, f.Max)
	case f.V >= f.Min:
		return nil
	case f.Min == 0:
		return Errorf(f.Path, "%v must not be negative", f.V)
	case f.Min == 1 && integer:
		return Errorf(f.Path, "%v must be positive", f.V)
	case integer:
		return Errorf(f.Path, "%v must be at least %v", f.V, f.Min)
	default:
		return Errorf(f.Path, "%v must be in [%v, %v]", f.V, f.Min, f.Max)
	}
}

// CheckInts is the error of every field of fs out of its bounds, joined
// in the order of fs (nil when all are in bounds); errors.As finds the
// first.
func CheckInts(fs ...Int) error {
	var errs []error
	for _, f := range fs {
		if err := f.Check(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

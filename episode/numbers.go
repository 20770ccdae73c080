package episode

import (
	"bytes"
	"math"
	"strconv"
	"unsafe"

	"github.com/compactrl/compactrl/internal/field"
)

// Hand-written decoding of the per-token arrays, which are the bulk of an
// episode's bytes: one pass, no reflection, and errors that name the
// element ("segments[2].values[17]: ..."). The input is an already
// validated JSON value (a json.RawMessage), so the scanner only has to
// tell numbers from everything else; it still checks the grammar it
// relies on and never panics. Unlike encoding/json, a null element is an
// error, not a silent 0.

// parseInts decodes a JSON array of integers into dst (nil if empty).
func parseInts(raw []byte, path string, dst *[]int) error {
	return parseArray(raw, path, dst, func(tok []byte) (int, bool) { return atoi(tok) }, "int")
}

// parseFloats decodes a JSON array of numbers into dst (nil if empty).
func parseFloats(raw []byte, path string, dst *[]float64) error {
	return parseArray(raw, path, dst, parseFloat, "float64")
}

// parseFloat reads one JSON number as a float64: an integer of at most 53
// bits exactly, anything else through strconv; ±Inf is refused.
func parseFloat(tok []byte) (float64, bool) {
	if v, ok := atoi(tok); ok && v > -1<<53 && v < 1<<53 && !(v == 0 && tok[0] == '-') {
		return float64(v), true
	}
	// strconv copies the string into any error it returns, so viewing
	// the bytes as a string for the call is safe.
	v, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(tok), len(tok)), 64)
	return v, err == nil && !math.IsInf(v, 0)
}

// parseArray decodes a JSON array of numbers with conv into dst (nil if
// empty); an element conv refuses is an error naming it and typ.
func parseArray[T any](raw []byte, path string, dst *[]T, conv func([]byte) (T, bool), typ string) error {
	out := make([]T, 0, bytes.Count(raw, comma)+1)
	err := scanArray(raw, path, func(tok []byte, at func() string) error {
		v, ok := conv(tok)
		if !ok {
			return field.Errorf(at(), "cannot use number %s as %s", tok, typ)
		}
		out = append(out, v)
		return nil
	})
	if err != nil {
		return err
	}
	if len(out) == 0 {
		out = nil
	}
	*dst = out
	return nil
}

// atoi parses a JSON integer literal (no fraction or exponent) that fits
// an int.
func atoi(tok []byte) (int, bool) {
	limit := 18
	if strconv.IntSize == 32 {
		limit = 9
	}
	if len(tok) > limit {
		v, err := strconv.Atoi(string(tok))
		return v, err == nil
	}
	i, neg := 0, false
	if len(tok) > 0 && tok[0] == '-' {
		neg, i = true, 1
	}
	if i == len(tok) {
		return 0, false
	}
	v := 0
	for ; i < len(tok); i++ {
		c := tok[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

var comma = []byte(",")

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// scanArray calls elem for every element of the JSON array raw, each a
// number token; at() gives the element's field path for errors.
func scanArray(raw []byte, path string, elem func(tok []byte, at func() string) error) error {
	i, n := 0, len(raw)
	skip := func() {
		for i < n && isSpace(raw[i]) {
			i++
		}
	}
	skip()
	if i == n || raw[i] != '[' {
		return field.Errorf(path, "not an array")
	}
	i++
	skip()
	if i < n && raw[i] == ']' {
		i++
		skip()
		if i != n {
			return field.Errorf(path, "trailing data after the array")
		}
		return nil
	}
	idx := 0
	at := func() string { return field.Index(path, idx) }
	for {
		skip()
		start := i
		if i < n && (raw[i] == '-' || raw[i] >= '0' && raw[i] <= '9') {
			i = scanNumber(raw, i)
		}
		if i == start {
			return field.Errorf(at(), "not a number")
		}
		if err := elem(raw[start:i], at); err != nil {
			return err
		}
		skip()
		if i == n {
			return field.Errorf(path, "unterminated array")
		}
		switch raw[i] {
		case ',':
			i++
			idx++
		case ']':
			i++
			skip()
			if i != n {
				return field.Errorf(path, "trailing data after the array")
			}
			return nil
		default:
			return field.Errorf(field.Index(path, idx), "not a number")
		}
	}
}

// scanNumber returns the end of the JSON number starting at raw[i], or i
// if there is none: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(raw []byte, i int) int {
	n, start := len(raw), i
	digits := func() bool {
		s := i
		for i < n && raw[i] >= '0' && raw[i] <= '9' {
			i++
		}
		return i > s
	}
	if i < n && raw[i] == '-' {
		i++
	}
	switch {
	case i < n && raw[i] == '0':
		i++
	case !digits():
		return start
	}
	if i < n && raw[i] == '.' {
		i++
		if !digits() {
			return start
		}
	}
	if i < n && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		if i < n && (raw[i] == '+' || raw[i] == '-') {
			i++
		}
		if !digits() {
			return start
		}
	}
	return i
}

package harbor

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Python's and pydantic's number parsing, as Harbor applies them: float()
// to reward.txt, pydantic's lax int/float/bool coercions to task.toml.

var errSyntax = errors.New("invalid syntax")

// pySpace reports whether r is whitespace to Python's str.isspace (Go's
// unicode.IsSpace plus the separators U+001C..U+001F).
func pySpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// pyFloatSpace is the whitespace float(str) strips. CPython's float()
// first maps non-ASCII whitespace (str.isspace) to ' ' and keeps ASCII
// as it is, then strips only the ASCII spaces " \t\n\v\f\r": the
// separators U+001C..U+001F, which str.isspace and str.strip() count as
// whitespace, make float() fail ("1\x1c" is refused).
func pyFloatSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || (r >= '\t' && r <= '\r')
	}
	return pySpace(r)
}

// pyFloatText is Python's float(str): surrounding whitespace
// (pyFloatSpace), Unicode decimal digits, "_" between digits,
// inf/infinity/nan in any case; no hexadecimal. Out-of-range values become
// ±Inf, as in Python.
func pyFloatText(s string) (float64, error) {
	if !utf8.ValidString(s) {
		return 0, errSyntax
	}
	var b strings.Builder
	for _, r := range strings.TrimFunc(s, pyFloatSpace) {
		switch {
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case unicode.Is(unicode.Nd, r):
			b.WriteByte(byte('0' + digitValue(r)))
		default:
			return 0, errSyntax
		}
	}
	return parseFloatASCII(b.String())
}

// digitValue is the value of a Unicode decimal digit (category Nd), whose
// digits come in runs of ten from 0.
func digitValue(r rune) int {
	for _, rg := range unicode.Nd.R16 {
		if rune(rg.Lo) <= r && r <= rune(rg.Hi) {
			return int(r-rune(rg.Lo)) % 10
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if rune(rg.Lo) <= r && r <= rune(rg.Hi) {
			return int(r-rune(rg.Lo)) % 10
		}
	}
	return 0
}

// parseFloatASCII parses Python's float grammar over ASCII: [sign]
// (digitpart ["." [digitpart]] | "." digitpart) [(e|E) [sign] digitpart],
// or inf, infinity, nan; digitpart = digit (["_"] digit)*. pydantic's
// str→float is the same grammar.
func parseFloatASCII(s string) (float64, error) {
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 {
		return 0, errSyntax
	}
	switch strings.ToLower(body) {
	case "inf", "infinity":
		if strings.HasPrefix(s, "-") {
			return math.Inf(-1), nil
		}
		return math.Inf(1), nil
	case "nan":
		return math.NaN(), nil
	}
	i := 0
	digits := func() int { // digitpart at i; returns the digit count
		n := 0
		for i < len(body) {
			c := body[i]
			if c >= '0' && c <= '9' {
				n++
				i++
				continue
			}
			if c == '_' && n > 0 && i+1 < len(body) && body[i+1] >= '0' && body[i+1] <= '9' {
				i++
				continue
			}
			break
		}
		return n
	}
	whole := digits()
	frac := 0
	if i < len(body) && body[i] == '.' {
		i++
		frac = digits()
	}
	if whole == 0 && frac == 0 {
		return 0, errSyntax
	}
	if i < len(body) && (body[i] == 'e' || body[i] == 'E') {
		i++
		if i < len(body) && (body[i] == '+' || body[i] == '-') {
			i++
		}
		if digits() == 0 {
			return 0, errSyntax
		}
	}
	if i != len(body) {
		return 0, errSyntax
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, errSyntax
	}
	return f, nil // ErrRange: ±Inf (overflow) or 0 (underflow), as Python
}

// pydanticIntString is pydantic's lax str→int: surrounding whitespace, a
// sign, digits with single "_" between them, optionally "." and zeros.
func pydanticIntString(s string) (int64, bool) {
	s = strings.TrimFunc(s, unicode.IsSpace)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		if i == len(s)-1 || strings.Trim(s[i+1:], "0") != "" {
			return 0, false
		}
		s = s[:i]
	}
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 || body == "" || body[0] == '_' || body[len(body)-1] == '_' || strings.Contains(body, "__") {
		return 0, false
	}
	for _, c := range body {
		if (c < '0' || c > '9') && c != '_' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	return n, err == nil
}

// pydanticBoolString is pydantic's lax str→bool (case-insensitive, no
// whitespace allowed).
func pydanticBoolString(s string) (bool, bool) {
	switch strings.ToLower(s) {
	case "1", "on", "t", "true", "y", "yes":
		return true, true
	case "0", "off", "f", "false", "n", "no":
		return false, true
	}
	return false, false
}

package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// This file holds the stages of a loaded tokenizer.json before the model:
// normalizers (text → text) and pre-tokenizer steps (a piece of text → the
// pieces it splits into). Each stage is built once from its JSON and is
// immutable afterwards, so a Tokenizer stays safe for concurrent use.

// normalizer rewrites a section of text before pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

type unicodeNorm struct{ form norm.Form }

func (u unicodeNorm) normalize(s string) string { return u.form.String(s) }

type lowercase struct{}

func (lowercase) normalize(s string) string { return strings.ToLower(s) }

// replaceNorm replaces every match of a pattern with content.
type replaceNorm struct {
	pat     matcher
	content string
}

func (r replaceNorm) normalize(s string) string {
	var sb strings.Builder
	prev := 0
	r.pat.matches(s, func(start, end int) {
		sb.WriteString(s[prev:start])
		sb.WriteString(r.content)
		prev = end
	})
	if prev == 0 {
		return s
	}
	sb.WriteString(s[prev:])
	return sb.String()
}

type prependNorm struct{ prefix string }

func (p prependNorm) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

type stripNorm struct{ left, right bool }

func (p stripNorm) normalize(s string) string {
	if p.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if p.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

type seqNorm []normalizer

func (q seqNorm) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// parseNormalizer builds the normalizer of a tokenizer.json "normalizer"
// entry; nil for null or an empty Sequence.
func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
		Pattern     hfPattern         `json:"pattern"`
		Content     string            `json:"content"`
		Prepend     string            `json:"prepend"`
		Left        bool              `json:"left"`
		Right       bool              `json:"right"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch n.Type {
	case "NFC":
		return unicodeNorm{norm.NFC}, nil
	case "NFD":
		return unicodeNorm{norm.NFD}, nil
	case "NFKC":
		return unicodeNorm{norm.NFKC}, nil
	case "NFKD":
		return unicodeNorm{norm.NFKD}, nil
	case "Lowercase":
		return lowercase{}, nil
	case "Prepend":
		return prependNorm{n.Prepend}, nil
	case "Strip":
		return stripNorm{n.Left, n.Right}, nil
	case "Replace":
		m, err := n.Pattern.compile()
		if err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		return replaceNorm{m, n.Content}, nil
	case "Sequence":
		var seq seqNorm
		for i, r := range n.Normalizers {
			s, err := parseNormalizer(r)
			if err != nil {
				return nil, fmt.Errorf("normalizer Sequence[%d]: %w", i, err)
			}
			if s != nil {
				seq = append(seq, s)
			}
		}
		switch len(seq) {
		case 0:
			return nil, nil
		case 1:
			return seq[0], nil
		}
		return seq, nil
	}
	return nil, fmt.Errorf("normalizer %q unsupported (known: NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Strip, Replace, Sequence)", n.Type)
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// hfPattern is tokenizer.json's {"String": s} or {"Regex": r}.
type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func (p hfPattern) compile() (matcher, error) {
	switch {
	case p.String != nil && p.Regex == nil:
		if *p.String == "" {
			return nil, errors.New("pattern: empty String")
		}
		return literal(*p.String), nil
	case p.Regex != nil && p.String == nil:
		return compileRegex(*p.Regex)
	}
	return nil, errors.New(`pattern: want exactly one of "String" and "Regex"`)
}

// matcher finds the non-overlapping matches of a pattern, left to right,
// as byte offsets.
type matcher interface {
	matches(s string, fn func(start, end int))
}

type literal string

func (l literal) matches(s string, fn func(start, end int)) {
	for i := 0; ; {
		j := strings.Index(s[i:], string(l))
		if j < 0 {
			return
		}
		fn(i+j, i+j+len(l))
		i += j + len(l)
	}
}

// handSplit is a hand-written splitter (pretokenize.go) used as the matcher
// of the regex it implements: its words are the regex's matches, and they
// cover the text.
type handSplit struct{ p preTokenizer }

func (h handSplit) matches(s string, fn func(start, end int)) {
	i := 0
	h.p.split(s, func(w string) {
		fn(i, i+len(w))
		i += len(w)
	})
}

// regex is a pattern run by regexp2 (backtracking, with lookaround), after
// jsRegex has given its classes the JS reference's meaning.
type regex struct{ re *regexp2.Regexp }

func compileRegex(pat string) (matcher, error) {
	switch pat {
	case patGPT2:
		return handSplit{preGPT2}, nil
	case patLlama3:
		return handSplit{preLlama3}, nil
	case patQwen2:
		return handSplit{preQwen2}, nil
	case patO200k:
		return handSplit{preO200k}, nil
	}
	js, err := jsRegex(pat)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", pat, err)
	}
	re, err := regexp2.Compile(js, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", pat, err)
	}
	return regex{re}, nil
}

func (r regex) matches(s string, fn func(start, end int)) {
	if s == "" {
		return
	}
	// regexp2 works on runes; off maps a rune index to its byte offset in
	// s, so that pieces keep s's bytes (invalid UTF-8 included, which
	// regexp2 sees as U+FFFD).
	runes := make([]rune, 0, len(s))
	off := make([]int, 0, len(s)+1)
	for i := 0; i < len(s); {
		c, w := utf8.DecodeRuneInString(s[i:])
		runes = append(runes, c)
		off = append(off, i)
		i += w
	}
	off = append(off, len(s))
	m, err := r.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		if m.Length > 0 {
			fn(off[m.Index], off[m.Index+m.Length])
		}
		m, err = r.re.FindNextMatch(m)
	}
	// err is only a match timeout, and no timeout is set.
}

// jsSpace is the ECMAScript \s class (WhiteSpace and LineTerminator): the
// JS reference runs every pattern with it. It differs from Unicode
// White_Space (Go's unicode.IsSpace, Rust's Oniguruma) by U+FEFF (in) and
// U+0085 (out).
const jsSpace = `\t\n\v\f\r \u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000\uFEFF`

// jsCaseContractions is how the JS reference rewrites the (?i:…) group of
// the GPT-4-style patterns (JS has no inline flags); the two are equal.
const (
	ciContractions   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)`
	jsCaseContractns = `(?:'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))`
)

// jsClass is the JS meaning of the shorthand class \c for c in s, d, w (their
// negations \S, \D and \W are the upper-case letters).
func jsClass(c byte) (ranges string, ok bool) {
	switch c {
	case 's':
		return jsSpace, true
	case 'd':
		return "0-9", true
	case 'w':
		return "A-Za-z0-9_", true
	}
	return "", false
}

// writeJSEscape writes the escape \e with its JS meaning: a shorthand class
// as its ranges (bare inside a character class, bracketed outside, negated
// for the upper-case letter), anything else unchanged.
func writeJSEscape(b *strings.Builder, e byte, inClass bool) error {
	ranges, ok := jsClass(e)
	negated, nok := jsClass(e + 'a' - 'A')
	switch {
	case ok && inClass:
		b.WriteString(ranges)
	case ok:
		b.WriteString("[" + ranges + "]")
	case e >= 'A' && e <= 'Z' && nok && inClass:
		return fmt.Errorf(`\%c inside a character class is unsupported`, e)
	case e >= 'A' && e <= 'Z' && nok:
		b.WriteString("[^" + negated + "]")
	default:
		b.WriteByte('\\')
		b.WriteByte(e)
	}
	return nil
}

// jsRegex rewrites a tokenizer.json regex so that regexp2 runs it with the
// meaning the JS reference gives it (a JS RegExp with the u flag): \s and \S
// are ECMAScript's, \d is [0-9], \w is [A-Za-z0-9_].
func jsRegex(pat string) (string, error) {
	pat = strings.ReplaceAll(pat, ciContractions, jsCaseContractns)
	var b strings.Builder
	inClass := false
	for i := 0; i < len(pat); i++ {
		c := pat[i]
		switch {
		case c == '\\' && i+1 < len(pat):
			e := pat[i+1]
			i++
			if err := writeJSEscape(&b, e, inClass); err != nil {
				return "", err
			}
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			// a ']' (or '^]') right after '[' is a literal
			if i+1 < len(pat) && pat[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
		case c == ']' && inClass:
			inClass = false
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	if inClass {
		return "", errors.New("unterminated character class")
	}
	return b.String(), nil
}

// preStep is one pre-tokenizer: it splits a piece into pieces. first says
// whether the piece starts the encoded text (Metaspace's prepend "first").
type preStep interface {
	split(piece string, first bool, emit func(string))
}

// Split behaviours (tokenizer.json "behavior").
const (
	behIsolated = iota
	behRemoved
	behMergedWithPrevious
	behMergedWithNext
	behContiguous
)

type splitStep struct {
	pat      matcher
	behavior int
	invert   bool
}

func (s splitStep) split(p string, _ bool, emit func(string)) {
	// parts alternate between non-matches and matches of the pattern; with
	// invert the matches are the content and the rest are the delimiters.
	type part struct {
		start, end int
		delim      bool
	}
	var parts []part
	prev := 0
	s.pat.matches(p, func(a, b int) {
		if a > prev {
			parts = append(parts, part{prev, a, s.invert})
		}
		parts = append(parts, part{a, b, !s.invert})
		prev = b
	})
	if prev < len(p) {
		parts = append(parts, part{prev, len(p), s.invert})
	}
	switch s.behavior {
	case behIsolated:
		for _, q := range parts {
			emit(p[q.start:q.end])
		}
	case behRemoved:
		for _, q := range parts {
			if !q.delim {
				emit(p[q.start:q.end])
			}
		}
	case behMergedWithPrevious:
		start := 0
		for i, q := range parts {
			if q.delim || i == len(parts)-1 {
				emit(p[start:q.end])
				start = q.end
			}
		}
	case behMergedWithNext:
		start := 0
		for i, q := range parts {
			if i+1 < len(parts) && parts[i+1].delim {
				if q.end > start {
					emit(p[start:q.end])
				}
				start = q.end
			}
		}
		if start < len(p) {
			emit(p[start:])
		}
	case behContiguous:
		start := 0
		for i, q := range parts {
			if i+1 == len(parts) || parts[i+1].delim != q.delim {
				emit(p[start:q.end])
				start = q.end
			}
		}
	}
}

func parseBehavior(b string) (int, error) {
	switch strings.ToLower(b) {
	case "isolated":
		return behIsolated, nil
	case "removed":
		return behRemoved, nil
	case "mergedwithprevious":
		return behMergedWithPrevious, nil
	case "mergedwithnext":
		return behMergedWithNext, nil
	case "contiguous":
		return behContiguous, nil
	}
	return 0, fmt.Errorf("split behavior %q unsupported", b)
}

// byteLevelStep is the ByteLevel pre-tokenizer: an optional leading space
// and, with use_regex, GPT-2's split. The byte→rune mapping itself is left
// to the model, which works on bytes.
type byteLevelStep struct {
	addPrefixSpace bool
	useRegex       bool
}

func (b byteLevelStep) split(p string, _ bool, emit func(string)) {
	if b.addPrefixSpace && !strings.HasPrefix(p, " ") {
		p = " " + p
	}
	if !b.useRegex {
		emit(p)
		return
	}
	preGPT2.split(p, emit)
}

// digitsStep splits runs of digits (unicode.IsNumber, Rust's is_numeric)
// from the rest, each digit alone with individual_digits.
type digitsStep struct{ individual bool }

func (d digitsStep) split(p string, _ bool, emit func(string)) {
	start := 0
	for i := 0; i < len(p); {
		r, w := utf8.DecodeRuneInString(p[i:])
		if unicode.IsNumber(r) {
			if i > start {
				emit(p[start:i])
			}
			j := i + w
			for !d.individual && j < len(p) {
				r2, w2 := utf8.DecodeRuneInString(p[j:])
				if !unicode.IsNumber(r2) {
					break
				}
				j += w2
			}
			emit(p[i:j])
			start, i = j, j
			continue
		}
		i += w
	}
	if start < len(p) {
		emit(p[start:])
	}
}

// metaspaceStep replaces spaces by the replacement rune, prepends one
// (always, or only to the text's first section), and with split cuts the
// piece before each replacement rune.
type metaspaceStep struct {
	replacement string
	prepend     string // "always", "first" or "never"
	split_      bool
}

func (m metaspaceStep) split(p string, first bool, emit func(string)) {
	p = strings.ReplaceAll(p, " ", m.replacement)
	if (m.prepend == "always" || (m.prepend == "first" && first)) && !strings.HasPrefix(p, m.replacement) {
		p = m.replacement + p
	}
	if !m.split_ {
		emit(p)
		return
	}
	start := 0
	for i := 1; i < len(p); {
		if strings.HasPrefix(p[i:], m.replacement) {
			emit(p[start:i])
			start = i
			i += len(m.replacement)
			continue
		}
		i++
	}
	if start < len(p) {
		emit(p[start:])
	}
}

// whitespaceSplit splits on whitespace, dropping it.
type whitespaceSplit struct{}

func (whitespaceSplit) split(p string, _ bool, emit func(string)) {
	for _, f := range strings.Fields(p) {
		emit(f)
	}
}

// parsePreSteps flattens a tokenizer.json "pre_tokenizer" into steps.
// byteLevel reports a ByteLevel step, which must come last.
func parsePreSteps(raw json.RawMessage) (steps []preStep, byteLevel bool, err error) {
	if isNull(raw) {
		return nil, false, nil
	}
	var p struct {
		Type             string            `json:"type"`
		Pretokenizers    []json.RawMessage `json:"pretokenizers"`
		Pattern          hfPattern         `json:"pattern"`
		Behavior         string            `json:"behavior"`
		Invert           bool              `json:"invert"`
		AddPrefixSpace   *bool             `json:"add_prefix_space"`
		UseRegex         *bool             `json:"use_regex"`
		IndividualDigits bool              `json:"individual_digits"`
		Replacement      string            `json:"replacement"`
		PrependScheme    string            `json:"prepend_scheme"`
		Split            *bool             `json:"split"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, false, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch p.Type {
	case "Sequence":
		for i, r := range p.Pretokenizers {
			if byteLevel {
				return nil, false, fmt.Errorf("pre_tokenizer Sequence[%d]: a step after ByteLevel is unsupported", i)
			}
			s, bl, err := parsePreSteps(r)
			if err != nil {
				return nil, false, fmt.Errorf("pre_tokenizer Sequence[%d]: %w", i, err)
			}
			steps = append(steps, s...)
			byteLevel = bl
		}
		return steps, byteLevel, nil
	case "Split":
		m, err := p.Pattern.compile()
		if err != nil {
			return nil, false, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		b, err := parseBehavior(p.Behavior)
		if err != nil {
			return nil, false, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		return []preStep{splitStep{m, b, p.Invert}}, false, nil
	case "ByteLevel":
		s := byteLevelStep{useRegex: p.UseRegex == nil || *p.UseRegex}
		if p.AddPrefixSpace != nil {
			s.addPrefixSpace = *p.AddPrefixSpace
		}
		return []preStep{s}, true, nil
	case "Digits":
		return []preStep{digitsStep{p.IndividualDigits}}, false, nil
	case "Metaspace":
		s := metaspaceStep{replacement: p.Replacement, prepend: p.PrependScheme, split_: p.Split == nil || *p.Split}
		if s.replacement == "" {
			s.replacement = "▁"
		}
		switch {
		case s.prepend == "" && (p.AddPrefixSpace == nil || *p.AddPrefixSpace):
			s.prepend = "always"
		case s.prepend == "":
			s.prepend = "never"
		case s.prepend != "always" && s.prepend != "first" && s.prepend != "never":
			return nil, false, fmt.Errorf("pre_tokenizer Metaspace: prepend_scheme %q unsupported", s.prepend)
		}
		return []preStep{s}, false, nil
	case "WhitespaceSplit":
		return []preStep{whitespaceSplit{}}, false, nil
	}
	return nil, false, fmt.Errorf("pre_tokenizer %q unsupported (known: Sequence, Split, ByteLevel, Digits, Metaspace, WhitespaceSplit)", p.Type)
}

// preTokenize runs the steps over a section, calling emit with each final
// piece.
func preTokenize(steps []preStep, s string, first bool, emit func(string)) {
	if len(steps) == 0 {
		if s != "" {
			emit(s)
		}
		return
	}
	n := 0
	steps[0].split(s, first, func(p string) {
		if p != "" {
			preTokenize(steps[1:], p, first && n == 0, emit)
			n++
		}
	})
}

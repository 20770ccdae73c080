package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// preTokenizer names the word-splitting rules. Each is a hand-written
// equivalent of the regular expression in its comment (Go's regexp lacks
// the (?!\S) lookahead).
type preTokenizer int

const (
	// preGPT2 is GPT-2's
	//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	preGPT2 preTokenizer = iota
	// preLlama3 is Llama-3's
	//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
	//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	preLlama3
	// preQwen2 is preLlama3 with \p{N} (one digit a word) instead of \p{N}{1,3}.
	preQwen2
	// preO200k is GPT-OSS's patO200k.
	preO200k
)

const (
	patGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// Rune classes of the patterns. Invalid UTF-8 bytes decode as RuneError of
// width 1 and fall in classOther, so every byte lands in some word.
const (
	classOther = iota
	classLetter
	classNumber
	classSpace
)

func classOf(r rune) int {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case isJSSpace(r):
		// \s as ECMAScript defines it, as the JS reference runs these
		// patterns (Unicode White_Space differs: U+0085 in, U+FEFF out).
		return classSpace
	}
	return classOther
}

var asciiClass = func() [128]int {
	var t [128]int
	for c := 0; c < 128; c++ {
		t[c] = classOf128(rune(c))
	}
	return t
}()

func classOf128(r rune) int {
	switch {
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

func runeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// runEnd returns the end of the maximal run of class cls starting at i.
func runEnd(s string, i, cls int) int {
	for i < len(s) {
		r, w := runeAt(s, i)
		if classOf(r) != cls {
			break
		}
		i += w
	}
	return i
}

// contraction returns the length of 's 't 're 've 'm 'll 'd at s[i:]
// (s[i] == '\”), case-insensitively when fold is set, or 0.
func contraction(s string, i int, fold bool) int {
	lower := func(c byte) byte {
		if fold && c >= 'A' && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	if i+1 >= len(s) {
		return 0
	}
	switch lower(s[i+1]) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if i+2 < len(s) && lower(s[i+2]) == 'e' {
			return 3
		}
	case 'l':
		if i+2 < len(s) && lower(s[i+2]) == 'l' {
			return 3
		}
	}
	return 0
}

// spaceMatch implements \s+(?!\S)|\s+ at i (s[i] is whitespace).
func spaceMatch(s string, i int) int {
	end := runEnd(s, i, classSpace)
	if end == len(s) {
		return end
	}
	// the run is followed by non-space: leave its last rune for the next word
	last := end
	for last > i {
		last--
		if utf8.RuneStart(s[last]) {
			break
		}
	}
	if last > i {
		return last
	}
	return end
}

// split calls fn with each word of s in order; the words concatenate to s.
func (p preTokenizer) split(s string, fn func(word string)) {
	for i := 0; i < len(s); {
		var n int
		switch p {
		case preGPT2:
			n = matchGPT2(s, i)
		case preO200k:
			n = matchO200k(s, i)
		default:
			n = matchLlama3(s, i, p == preLlama3)
		}
		fn(s[i : i+n])
		i += n
	}
}

func matchGPT2(s string, i int) int {
	if s[i] == '\'' {
		if n := contraction(s, i, false); n > 0 {
			return n
		}
	}
	r, w := runeAt(s, i)
	cls := classOf(r)
	start := i
	if r == ' ' && i+1 < len(s) {
		r2, _ := runeAt(s, i+1)
		if c2 := classOf(r2); c2 != classSpace {
			return runEnd(s, i+1, c2) - start
		}
	}
	if cls != classSpace {
		return runEnd(s, i+w, cls) - start
	}
	return spaceMatch(s, i) - start
}

func matchLlama3(s string, i int, threeDigits bool) int {
	if s[i] == '\'' {
		if n := contraction(s, i, true); n > 0 {
			return n
		}
	}
	r, w := runeAt(s, i)
	cls := classOf(r)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if cls == classLetter {
		return runEnd(s, i+w, classLetter) - i
	}
	if cls != classNumber && r != '\r' && r != '\n' && i+w < len(s) {
		if r2, _ := runeAt(s, i+w); classOf(r2) == classLetter {
			return runEnd(s, i+w, classLetter) - i
		}
	}
	// \p{N}{1,3} or \p{N}
	if cls == classNumber {
		j := i + w
		max := 1
		if threeDigits {
			max = 3
		}
		for k := 1; k < max && j < len(s); k++ {
			r2, w2 := runeAt(s, j)
			if classOf(r2) != classNumber {
				break
			}
			j += w2
		}
		return j - i
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := i
	if r == ' ' && i+1 < len(s) {
		if r2, _ := runeAt(s, i+1); classOf(r2) == classOther {
			j = i + 1
		}
	}
	if r2, _ := runeAt(s, j); classOf(r2) == classOther {
		j = runEnd(s, j, classOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j - i
	}
	// here s[i] is whitespace. \s*[\r\n]+ : up to the run's last newline.
	end := runEnd(s, i, classSpace)
	for k := end - 1; k >= i; k-- {
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1 - i
		}
	}
	return spaceMatch(s, i) - i
}

// patO200k is GPT-OSS's (o200k) pattern, which matchO200k implements:
// words are an optional non-letter, non-digit prefix, then upper-case-ish
// letters followed by lower-case-ish ones (or the reverse emphasis), with
// an optional contraction; digits in runs of up to three; punctuation runs
// with trailing line breaks and slashes; whitespace as Llama 3.
const patO200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// o200k rune classes (bits).
const (
	oUpper  = 1 << iota // Lu Lt Lm Lo M
	oLower              // Ll Lm Lo M
	oLetter             // L
	oNumber             // N
	oSpace              // ECMAScript \s
)

func o200kClass(r rune) int {
	if r < utf8.RuneSelf {
		switch {
		case r >= 'A' && r <= 'Z':
			return oUpper | oLetter
		case r >= 'a' && r <= 'z':
			return oLower | oLetter
		case r >= '0' && r <= '9':
			return oNumber
		case isJSSpace(r):
			return oSpace
		}
		return 0
	}
	c := 0
	switch {
	case unicode.Is(unicode.Lu, r), unicode.Is(unicode.Lt, r):
		c = oUpper | oLetter
	case unicode.Is(unicode.Ll, r):
		c = oLower | oLetter
	case unicode.Is(unicode.Lm, r), unicode.Is(unicode.Lo, r):
		c = oUpper | oLower | oLetter
	case unicode.IsMark(r):
		c = oUpper | oLower
	case unicode.IsLetter(r):
		c = oLetter
	case unicode.IsNumber(r):
		c = oNumber
	case isJSSpace(r):
		c = oSpace
	}
	return c
}

// o200kRun returns the end of the run of runes with class bit b from i.
func o200kRun(s string, i, b int) int {
	for i < len(s) {
		r, w := runeAt(s, i)
		if o200kClass(r)&b == 0 {
			break
		}
		i += w
	}
	return i
}

// o200kWord tries the two word alternatives at j (after the optional
// prefix): U*L+ then U+L*, each with an optional contraction; 0 if neither.
func o200kWord(s string, j int, upperFirst bool) int {
	k := o200kRun(s, j, oUpper)
	if !upperFirst {
		// U* greedy, backtracking to the last position p ≤ k where L+ can
		// start: p = k if s[k] is lower-ish, else the last rune of the
		// U-run that is also lower-ish.
		p := -1
		if k < len(s) {
			if r, _ := runeAt(s, k); o200kClass(r)&oLower != 0 {
				p = k
			}
		}
		for q := k; p < 0 && q > j; {
			q--
			for q > j && !utf8.RuneStart(s[q]) {
				q--
			}
			if r, _ := runeAt(s, q); o200kClass(r)&oLower != 0 {
				p = q
			}
		}
		if p < 0 {
			return 0
		}
		e := o200kRun(s, p, oLower)
		return e + contractionAt(s, e) - j
	}
	if k == j {
		return 0
	}
	e := o200kRun(s, k, oLower)
	return e + contractionAt(s, e) - j
}

func contractionAt(s string, i int) int {
	if i < len(s) && s[i] == '\'' {
		return contraction(s, i, true)
	}
	return 0
}

func matchO200k(s string, i int) int {
	r, w := runeAt(s, i)
	c := o200kClass(r)
	prefix := r != '\r' && r != '\n' && c&(oLetter|oNumber) == 0
	for _, upperFirst := range []bool{false, true} {
		if prefix && i+w < len(s) {
			if n := o200kWord(s, i+w, upperFirst); n > 0 {
				return w + n
			}
		}
		if n := o200kWord(s, i, upperFirst); n > 0 {
			return n
		}
	}
	if c&oNumber != 0 { // \p{N}{1,3}
		j := i + w
		for k := 1; k < 3 && j < len(s); k++ {
			r2, w2 := runeAt(s, j)
			if o200kClass(r2)&oNumber == 0 {
				break
			}
			j += w2
		}
		return j - i
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
	other := func(r rune) bool { return o200kClass(r)&(oSpace|oLetter|oNumber) == 0 }
	j := -1
	if r == ' ' && i+1 < len(s) {
		if r2, _ := runeAt(s, i+1); other(r2) {
			j = i + 1
		}
	}
	if j < 0 && other(r) {
		j = i
	}
	if j >= 0 {
		for j < len(s) {
			r2, w2 := runeAt(s, j)
			if !other(r2) {
				break
			}
			j += w2
		}
		for j < len(s) && (s[j] == '\r' || s[j] == '\n' || s[j] == '/') {
			j++
		}
		return j - i
	}
	// whitespace: \s*[\r\n]+ up to the run's last line break, else \s+(?!\S)|\s+
	end := o200kRun(s, i, oSpace)
	for k := end - 1; k >= i; k-- {
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1 - i
		}
	}
	return spaceMatch(s, i) - i
}

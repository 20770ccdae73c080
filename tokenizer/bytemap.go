package tokenizer

import "unicode/utf8"

// byteRunes is GPT-2's bytes_to_unicode table: bytes '!'..'~', '¡'..'¬' and
// '®'..'ÿ' map to the rune of the same value; the 68 others map, in byte
// order, to U+0100, U+0101, ….
var byteRunes = func() [256]rune {
	var t [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
	}
	return t
}()

// runeByte inverts byteRunes; -1 for runes outside the table.
func runeByte(r rune) int {
	if r < 0 || r >= 256+68 {
		return -1
	}
	if r >= 256 {
		return int(byteInv[r-256])
	}
	if byteRunes[r] == r {
		return int(r)
	}
	return -1
}

var byteInv = func() [68]byte {
	var t [68]byte
	for b := 0; b < 256; b++ {
		if r := byteRunes[b]; r >= 256 {
			t[r-256] = byte(b)
		}
	}
	return t
}()

// bytesToVocab maps raw bytes to their vocabulary string.
func bytesToVocab(b []byte) string {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = utf8.AppendRune(out, byteRunes[c])
	}
	return string(out)
}

// vocabToBytes maps a vocabulary string back to raw bytes. ok is false when
// some rune is outside the byte table (the token is then not byte-level,
// e.g. an added token, and its bytes are its UTF-8 text).
func vocabToBytes(s string) (b []byte, ok bool) {
	b = make([]byte, 0, len(s))
	for _, r := range s {
		c := runeByte(r)
		if c < 0 {
			return []byte(s), false
		}
		b = append(b, byte(c))
	}
	return b, true
}

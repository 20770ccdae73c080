package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/internal/jsref"
)

// parityCorpus is the fixed part of the parity corpus: code, shell output,
// CJK, emoji (ZWJ sequences, flags, skin tones), combining marks (NFC and
// NFD forms), long whitespace runs, numbers, contractions, the characters
// where \s definitions differ, and text containing special-token strings.
func parityCorpus(specials []string) []string {
	c := []string{
		"",
		"Hello, world! It's a test; we'll see what's what. I'M SURE YOU'VE DONE IT'D",
		"func main() {\n\tfmt.Println(\"héllo\", 42)\n\tfor i := 0; i < 10; i++ {\n\t\tx[i] = i * 2\n\t}\n}\n",
		"def f(x):\n    return {'a': [1, 2.5e-3, None], \"b\": x ** 2}  # comment\n\n\n",
		"$ ls -la /tmp\ntotal 48\ndrwxrwxrwt 12 root root 4096 Jan  1 00:00 .\n-rw-r--r--  1 user user  123 Jan  1 00:00 file.txt\n$ echo $?\n0\n",
		"Traceback (most recent call last):\n  File \"/app/main.py\", line 12, in <module>\n    raise ValueError('bad value: 0x1F')\nValueError: bad value: 0x1F\r\n",
		"日本語のテキストです。中文文本，包括标点符号！한국어 텍스트도 있습니다. カタカナ ひらがな 漢字",
		"emoji: 🎉🚀 👨‍👩‍👧‍👦 🇫🇷🇯🇵 👍🏽 ❤️ ✅ 🥲",
		"combining: e\u0301 a\u0308 n\u0303 (NFD) vs é ä ñ (NFC); Å Å; ḱ\u0323; 한 vs \u1112\u1161\u11ab",
		"spaces:    four    and\t\ttabs  \n\n\n\n   \n  trailing   ",
		strings.Repeat(" ", 50) + "x" + strings.Repeat("\n", 20) + "y" + strings.Repeat(" \t", 30),
		"numbers 1 12 123 1234 12345 3.14159 1,000,000 ٣٤٥ ½ Ⅻ 0x7fff",
		"odd spaces:\u00a0nbsp\u2003em\u3000ideo\u0085nel\ufeffbom\u200bzwsp\u2028ls",
		"URL https://example.com/a/b?c=d&e=f#g and path /usr/local/bin//x and C:\\Windows\\x",
		"<html><body class=\"x\">Text &amp; more</body></html>",
		"Ελληνικά, русский текст, עברית, العربية, हिन्दी, ไทย",
		"mixed CamelCaseWords and snake_case_words and ALLCAPS and mIxEd",
		"don't DON'T we're WE'RE they've I'll I'd 's 't",
		"ＡＢＣ fullwidth １２３ and ligature ﬁ and superscript ² and ℌ",
		"a\r\nb\rc\n\rd",
	}
	for i, sp := range specials {
		if i >= 40 {
			break
		}
		c = append(c, "before"+sp+"after "+sp+" "+sp+sp+"\n"+sp)
	}
	return c
}

// randomCorpus draws strings from an alphabet covering every class the
// pre-tokenizers distinguish.
func randomCorpus(n int, seed uint64, specials []string) []string {
	alphabet := []string{"a", "b", "Z", "é", "e\u0301", "ß", "中", "文", "の", "カ", "Ω", "я", "0", "7", "٣", "½",
		" ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u0085", "\ufeff", "'", "'s", "'LL", "'re",
		"!", ".", ",", "-", "/", "(", ")", "{", "}", "€", "😀", "👍🏽", "_", "\"", "ab", "Hello", "world", "123", "▁", "<", ">", "|"}
	if len(specials) > 0 {
		alphabet = append(alphabet, specials[0], specials[len(specials)-1])
	}
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([]string, n)
	for i := range out {
		var sb strings.Builder
		for k := 1 + r.IntN(30); k > 0; k-- {
			sb.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		out[i] = sb.String()
	}
	return out
}

// TestParityWithJS encodes the corpus with each real model's tokenizer.json
// and compares every id with the JS reference (@lenml/tokenizers,
// add_special_tokens false), and the decoded text with its decode.
func TestParityWithJS(t *testing.T) {
	jsref.Available(t)
	for _, model := range jsref.Models {
		t.Run(model, func(t *testing.T) {
			dir := jsref.Dir(t, model)
			tok, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			specials := tok.Specials()
			texts := append(parityCorpus(specials), randomCorpus(300, 1, specials)...)
			ref := jsref.Run(t, jsref.Request{Dir: dir, Texts: texts})
			bad := 0
			for i, s := range texts {
				got := tok.EncodeWithSpecials(s)
				if !slices.Equal(got, ref.IDs[i]) {
					bad++
					if bad <= 5 {
						t.Errorf("%q:\n got %v\nwant %v", s, got, ref.IDs[i])
					}
					continue
				}
				if d := tok.Decode(got); d != ref.Decoded[i] {
					bad++
					if bad <= 5 {
						t.Errorf("decode %q:\n got %q\nwant %q", s, d, ref.Decoded[i])
					}
				}
				if !containsAny(s, strictSpecials(tok)) && !slices.Equal(tok.Encode(s), got) {
					t.Errorf("%q: Encode differs from EncodeWithSpecials on text without special tokens", s)
				}
			}
			t.Logf("%s: %d strings compared, %d mismatches", model, len(texts), bad)
		})
	}
}

// strictSpecials are the added tokens marked special, which Encode leaves
// as text.
func strictSpecials(tok *Tokenizer) []string {
	var out []string
	for id, sp := range tok.special {
		if sp && !tok.addedNotSpecial[id] {
			out = append(out, tok.tokens[id])
		}
	}
	return out
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// benchText is a mixed corpus of code, prose, shell output and CJK.
func benchText() string {
	var sb strings.Builder
	for _, s := range parityCorpus(nil)[1:] {
		sb.WriteString(s)
		sb.WriteString("\n")
	}
	return strings.Repeat(sb.String(), 20)
}

// BenchmarkEncodeReal measures encode tokens/s of each real tokenizer on
// benchText, and reports the JS reference's on the same text beside it
// (js_tok/s; run with COMPACTRL_BENCH_JS=1).
func BenchmarkEncodeReal(b *testing.B) {
	text := benchText()
	for _, model := range jsref.Models {
		b.Run(model, func(b *testing.B) {
			dir := filepath.Join(jsref.Root(), model)
			if _, err := os.Stat(filepath.Join(dir, File)); err != nil {
				b.Skip("no tokenizer files; run tokenizer/testdata/fetch.sh")
			}
			tok, err := Load(dir)
			if err != nil {
				b.Fatal(err)
			}
			n := len(tok.EncodeWithSpecials(text)) // warm the word cache, as the JS run does
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				tok.EncodeWithSpecials(text)
			}
			b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "tok/s")
			b.SetBytes(int64(len(text)))
			if os.Getenv("COMPACTRL_BENCH_JS") != "" {
				b.StopTimer()
				ref := jsref.Run(b, jsref.Request{Dir: dir, Bench: &jsref.Bench{Text: text, Reps: 20}})
				b.ReportMetric(ref.Bench.TokensPerSecond, "js_tok/s")
				if ref.Bench.Tokens != 20*n {
					b.Errorf("JS encodes %d tokens per pass, Go %d", ref.Bench.Tokens/20, n)
				}
			}
		})
	}
}

func Example_parityModels() {
	fmt.Println(strings.Join(jsref.Models, " "))
	// Output: qwen3 llama3 llama3_1 deepseek_v3 gemma3 gptoss
}

package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// regexWords runs a pattern on regexp2 (after jsRegex), bypassing the
// hand-written splitters: the oracle for them, lookahead included.
func regexWords(t *testing.T, pat, s string) []string {
	js, err := jsRegex(pat)
	if err != nil {
		t.Fatal(err)
	}
	m, err := compileRegex(js + "|(?!x)x") // a different string: not a hand-written pattern
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	m.matches(s, func(a, b int) { out = append(out, s[a:b]) })
	return out
}

// TestHandSplittersMatchRegexp2 checks each hand-written splitter against
// its pattern run by a backtracking engine with lookahead (\s+(?!\S)),
// on random text over every class the patterns distinguish.
func TestHandSplittersMatchRegexp2(t *testing.T) {
	alphabet := []string{"a", "b", "Z", "Q", "é", "É", "ǅ", "ʰ", "中", "の", "e\u0301", "\u0301", "ß", "Ω", "ω", "0", "7", "٣", "½",
		" ", " ", "  ", "\t", "\n", "\r", "\u00a0", "\u3000", "\u0085", "\ufeff", "'", "'s", "'LL", "'Re", "!", ".", "/", "//", "-",
		"€", "😀", "_", "\"", "\xff", "\xe4\xb8"}
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		name string
		p    preTokenizer
		pat  string
	}{{"gpt2", preGPT2, patGPT2}, {"llama3", preLlama3, patLlama3}, {"qwen2", preQwen2, patQwen2}, {"o200k", preO200k, patO200k}} {
		t.Run(c.name, func(t *testing.T) {
			bad := 0
			for i := 0; i < 1500; i++ {
				var sb strings.Builder
				for k := 1 + r.IntN(25); k > 0; k-- {
					sb.WriteString(alphabet[r.IntN(len(alphabet))])
				}
				s := sb.String()
				got, want := words(c.p, s), regexWords(t, c.pat, s)
				if !reflect.DeepEqual(got, want) && bad < 5 {
					bad++
					g, _ := json.Marshal(got)
					w, _ := json.Marshal(want)
					t.Errorf("%s %q:\n got %s\nwant %s", c.name, s, g, w)
				}
			}
		})
	}
}

func TestJSRegexAndPipelineErrors(t *testing.T) {
	if _, err := jsRegex(`[\S]`); err == nil {
		t.Error(`[\S] accepted`)
	}
	if _, err := jsRegex(`[abc`); err == nil {
		t.Error("unterminated class accepted")
	}
	for name, js := range map[string]string{
		"normalizer":  `{"type":"Precompiled"}`,
		"replace":     `{"type":"Replace","pattern":{},"content":"x"}`,
		"pre":         `{"type":"BertPreTokenizer"}`,
		"behavior":    `{"type":"Split","pattern":{"String":" "},"behavior":"Sideways"}`,
		"after bytes": `{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},{"type":"Digits"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			if name == "normalizer" || name == "replace" {
				_, err = parseNormalizer(json.RawMessage(js))
			} else {
				_, _, err = parsePreSteps(json.RawMessage(js))
			}
			if err == nil {
				t.Errorf("%s: accepted %s", name, js)
			}
		})
	}
}

func TestSplitBehaviors(t *testing.T) {
	s := "a--b-c"
	for beh, want := range map[string][]string{
		"Isolated":           {"a", "-", "-", "b", "-", "c"},
		"Removed":            {"a", "b", "c"},
		"MergedWithPrevious": {"a-", "-", "b-", "c"},
		"MergedWithNext":     {"a", "-", "-b", "-c"},
		"Contiguous":         {"a", "--", "b", "-", "c"},
	} {
		t.Run(beh, func(t *testing.T) {
			b, err := parseBehavior(beh)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			splitStep{literal("-"), b, false}.split(s, true, func(p string) { got = append(got, p) })
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: got %q want %q", beh, got, want)
			}
		})
	}
	var got []string
	metaspaceStep{replacement: "▁", prepend: "first", split_: true}.split("hello big world", true, func(p string) { got = append(got, p) })
	if want := []string{"▁hello", "▁big", "▁world"}; !reflect.DeepEqual(got, want) {
		t.Errorf("metaspace: %q", got)
	}
	got = nil
	digitsStep{individual: true}.split("ab12c٣", true, func(p string) { got = append(got, p) })
	if want := []string{"ab", "1", "2", "c", "٣"}; !reflect.DeepEqual(got, want) {
		t.Errorf("digits: %q", got)
	}
}

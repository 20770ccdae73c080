package vault

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/infer"
)

func inferReq(prompt []int, maxTokens int, tm agent.Template) infer.Request {
	return infer.Request{Prompt: prompt, MaxTokens: maxTokens, Stop: []int{tm.EndOfTurn}}
}

func TestParseAction(t *testing.T) {
	good := map[string]Action{
		"open 3":                  {Verb: Open, File: 3},
		"  read 2   7\n":          {Verb: Read, File: 2, Page: 7},
		"answer amber 41":         {Verb: Answer, Answers: []Fact{{"amber", "41"}}},
		"answer amber 41 basil ?": {Verb: Answer, Answers: []Fact{{"amber", "41"}, {"basil", "?"}}},
	}
	for in, want := range good {
		got, err := ParseAction(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: %+v %v", in, got, err)
		}
	}
	bad := map[string]string{
		"":                 "empty",
		"open":             "one number",
		"open 1 2":         "one number",
		"open -1":          "not a number",
		"open 99999999999": "not a number",
		"read 1":           "two numbers",
		"read a 1":         "not a number",
		"answer":           "at least one",
		"answer amber":     "key value pairs",
		"answer 3 amber":   "lower-case",
		"answer Amber 3":   "lower-case",
		"answer amber x":   "not a number",
		"answer a 1 a 1":   "twice",
		"Open 1":           "unknown action",
		"<|assistant|> x":  "unknown action",
	}
	for in, want := range bad {
		_, err := ParseAction(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%q: error %v, want %q", in, err, want)
		}
	}
}

// FuzzParseAction: parsing never panics, errors are short and valid UTF-8
// when the input is, and every parsed action round-trips through String.
func FuzzParseAction(f *testing.F) {
	for _, s := range []string{"open 3", "read 2 7", "answer amber 41 basil ?", "", "answer a 1 a 1", "read 1 99999999", "open \x00", "answer x", "read\t1\t2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAction(s)
		if err != nil {
			if len(err.Error()) > 200 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
			if utf8.ValidString(s) && !utf8.ValidString(err.Error()) {
				// truncate may cut a rune; only the policy reads it, but
				// keep it valid for valid input where it does not cut.
				if !strings.Contains(err.Error(), "…") {
					t.Fatalf("invalid UTF-8 error %q", err.Error())
				}
			}
			return
		}
		b, err := ParseAction(a.String())
		if err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip %q → %q: %+v vs %+v (%v)", s, a.String(), a, b, err)
		}
	})
}

package vault

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Verb is an action's kind.
type Verb string

// The suite's actions. Grammar (one action a reply, words separated by
// spaces, surrounding white space ignored):
//
//	open F               F a file number
//	read F P             P a page number of file F
//	answer k v [k v …]   k a key (lower-case letters), v an integer or ?
const (
	Open   Verb = "open"
	Read   Verb = "read"
	Answer Verb = "answer"
)

// Fact is one key and its value, written "key value": the value right after
// its key, so that finding a key's value is one step of induction (the
// token after an earlier occurrence of the key), which a small transformer
// learns in a few hundred steps; with a separator ("key=value") the lookup
// has to match the token before the separator, which the nano policy did
// not learn in thousands (docs/results.md).
type Fact struct {
	Key   string
	Value string
}

func (f Fact) String() string { return f.Key + " " + f.Value }

// Action is one parsed reply.
type Action struct {
	Verb    Verb
	File    int
	Page    int
	Answers []Fact
}

// String renders the action in the grammar ParseAction accepts.
func (a Action) String() string {
	switch a.Verb {
	case Open:
		return fmt.Sprintf("open %d", a.File)
	case Read:
		return fmt.Sprintf("read %d %d", a.File, a.Page)
	case Answer:
		parts := []string{"answer"}
		for _, f := range a.Answers {
			parts = append(parts, f.String())
		}
		return strings.Join(parts, " ")
	}
	return string(a.Verb)
}

// maxNumber bounds file and page numbers so they always fit an int.
const maxNumber = 1_000_000

// ParseAction parses one reply. The error says what is wrong in words the
// policy can act on; it becomes the observation of an invalid step.
func ParseAction(reply string) (Action, error) {
	f := strings.Fields(reply)
	if len(f) == 0 {
		return Action{}, errors.New("empty action")
	}
	switch Verb(f[0]) {
	case Open:
		if len(f) != 2 {
			return Action{}, fmt.Errorf("open takes one number, got %d words", len(f)-1)
		}
		n, err := number(f[1])
		if err != nil {
			return Action{}, fmt.Errorf("open: %w", err)
		}
		return Action{Verb: Open, File: n}, nil
	case Read:
		if len(f) != 3 {
			return Action{}, fmt.Errorf("read takes two numbers (file page), got %d words", len(f)-1)
		}
		file, err := number(f[1])
		if err != nil {
			return Action{}, fmt.Errorf("read file: %w", err)
		}
		page, err := number(f[2])
		if err != nil {
			return Action{}, fmt.Errorf("read page: %w", err)
		}
		return Action{Verb: Read, File: file, Page: page}, nil
	case Answer:
		if len(f) == 1 {
			return Action{}, errors.New("answer needs at least one key and value")
		}
		if len(f)%2 == 0 {
			return Action{}, fmt.Errorf("answer takes key value pairs, got %d words", len(f)-1)
		}
		a := Action{Verb: Answer}
		seen := map[string]bool{}
		for i := 1; i < len(f); i += 2 {
			fact, err := parseFact(f[i], f[i+1])
			if err != nil {
				return Action{}, fmt.Errorf("answer: %w", err)
			}
			if seen[fact.Key] {
				return Action{}, fmt.Errorf("answer: key %s given twice", fact.Key)
			}
			seen[fact.Key] = true
			a.Answers = append(a.Answers, fact)
		}
		return a, nil
	}
	return Action{}, fmt.Errorf("unknown action %q: use open F, read F P or answer key value", truncate(f[0], 20))
}

func number(s string) (int, error) {
	if s == "" || len(s) > 7 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a number", truncate(s, 20))
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxNumber {
		return 0, fmt.Errorf("%q is not a number", truncate(s, 20))
	}
	return n, nil
}

func parseFact(k, v string) (Fact, error) {
	if k == "" || strings.Trim(k, "abcdefghijklmnopqrstuvwxyz") != "" {
		return Fact{}, fmt.Errorf("key %q is not lower-case letters", truncate(k, 20))
	}
	if v != "?" {
		if _, err := number(v); err != nil {
			return Fact{}, fmt.Errorf("value of %s: %w", k, err)
		}
	}
	return Fact{Key: k, Value: v}, nil
}

// facts returns the facts stated in text: each suite key word followed by
// an integer, in order ("k ?" states nothing).
func facts(text string) []Fact {
	var out []Fact
	w := strings.Fields(text)
	for i := 0; i+1 < len(w); i++ {
		if !slices.Contains(keyWords, w[i]) {
			continue
		}
		if _, err := number(w[i+1]); err == nil {
			out = append(out, Fact{Key: w[i], Value: w[i+1]})
			i++
		}
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

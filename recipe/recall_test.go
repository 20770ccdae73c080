package recipe

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/env/vault"
	"github.com/compactrl/compactrl/tokenizer"
)

// Every recall query asks for a fact the context states exactly once (its
// value the target) or for a key the context never shows (target "?"), and
// the targets are the value tokens only.
func TestRecallBatchQueriesTheContextsFacts(t *testing.T) {
	tok, ft := defaultFactTokens(t)
	segs := [][]int{
		tok.Encode("file 1 page 1\nnote 3: the pump hums near the gate\nrecord dune 56\nnote 4: the fan clicks near the east door\n"),
		tok.Encode("file 2 page 3\nrecord amber 12\nnote 9: the lamp idles\nrecord amber 13\nnote 1: the belt stops\n"),
		tok.Encode("file 3 page 1\nnote 7: the drum leaks\n"),
	}
	if got := ft.facts(segs[0]); len(got) != 1 {
		t.Fatalf("facts of segment 0: %v, want dune 56", got)
	}
	if got := ft.facts(segs[1]); len(got) != 0 {
		t.Fatalf("facts of segment 1: %v, want none (amber has two values)", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	record := regexp.MustCompile(`record ([a-z]+) (\d+)\n`)
	query := regexp.MustCompile(` ([a-z]+) (\d+|\?)`)
	queried, unknown := 0, 0
	for _, it := range ft.RecallBatch(segs, RecallDraw{N: 64, Length: 60, Extra: 4, Reach: 1, Unknown: true}, r) {
		all := append(append([]int(nil), it.Prompt...), it.Response...)
		if len(all) > 60 {
			t.Fatalf("sequence of %d tokens, limit 60", len(all))
		}
		text := tok.Decode(all)
		i := strings.LastIndex(text, "\nfound:")
		if i < 0 {
			t.Fatalf("no found line in %q", text)
		}
		ctx, q := text[:i], text[i+len("\nfound:"):]
		stated := map[string][]string{}
		for _, m := range record.FindAllStringSubmatch(ctx, -1) {
			stated[m[1]] = append(stated[m[1]], m[2])
		}
		qs := query.FindAllStringSubmatch(q, -1)
		if len(qs) == 0 {
			t.Fatalf("empty query in %q", text)
		}
		for _, m := range qs {
			if m[2] == "?" {
				if strings.Contains(ctx, "record "+m[1]+" ") {
					t.Fatalf("query %s ? but the context shows a record of it:\n%s", m[1], text)
				}
				unknown++
				continue
			}
			if v := stated[m[1]]; len(v) != 1 || v[0] != m[2] {
				t.Fatalf("query %s %s but the context states %v:\n%s", m[1], m[2], v, text)
			}
			queried++
		}
		// Targets: exactly the value tokens.
		var target []int
		for _, p := range it.Targets {
			target = append(target, it.Response[p])
		}
		var want []string
		for _, m := range qs[1:] {
			want = append(want, m[2])
		}
		if got := tok.Decode(target); got != " "+qs[0][2]+" "+strings.Join(want, " ") && !(len(want) == 0 && got == " "+qs[0][2]) {
			t.Fatalf("targets %q, want the values %q then %v", got, qs[0][2], want)
		}
	}
	if queried < 64 || unknown < 16 {
		t.Fatalf("%d stated facts and %d unknown keys queried in 64 sequences", queried, unknown)
	}
}

// Without sft.recall_unknown every query has its value in the context.
func TestRecallBatchWithoutUnknownKeys(t *testing.T) {
	tok, ft := defaultFactTokens(t)
	segs := [][]int{tok.Encode("file 1 page 1\nnote 3: the pump hums near the gate\nrecord dune 56\nnote 4: the fan clicks near the east door\n")}
	r := rand.New(rand.NewPCG(3, 4))
	for _, it := range ft.RecallBatch(segs, RecallDraw{N: 32, Length: 60, Extra: 3, Reach: 1}, r) {
		if text := tok.Decode(it.Response); strings.Contains(text, "?") {
			t.Fatalf("a query answered ? without recall_unknown: %q", text)
		}
	}
}

// defaultFactTokens is the default vault suite's tokenizer and fact tokens.
func defaultFactTokens(t *testing.T) (*tokenizer.Tokenizer, *FactTokens) {
	t.Helper()
	tok, _, err := vault.DefaultTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	ft, err := newFactTokens(tok, vault.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return tok, ft
}

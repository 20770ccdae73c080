package recipe

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// With recall_goal every recall sequence ends in a summary's goal and
// found lines: the goal of the window's segment, its keys in task order,
// each answered with the value the context shows (a record line or an
// earlier found line) or "?", the targets those answers only.
func TestRecallGoalAnswersTheGoalsKeysInOrder(t *testing.T) {
	tok, ft := defaultFactTokens(t)
	segs := [][]int{
		tok.Encode("task: report the values of amber dune. the vault has 3 files.\nfile 1 page 1\nnote 3: the pump hums near the gate\nrecord dune 56\nnote 4: the fan clicks\n"),
		tok.Encode("goal: report the values of dune amber. the vault has 2 files.\nfound: dune ? amber 12\nat: file 1\nfile 2 page 3\nnote 9: the lamp idles\nnote 1: the belt stops\n"),
		tok.Encode("task: report the values of cedar amber dune. the vault has 4 files.\nfile 3 page 1\nrecord amber 31\nnote 7: the drum leaks\n"),
	}
	goals := map[string][]string{}
	for _, s := range segs {
		span, keys, ok := ft.goal(s)
		if !ok {
			t.Fatalf("no goal in %q", tok.Decode(s))
		}
		var words []string
		for _, k := range keys {
			words = append(words, strings.TrimSpace(tok.Decode(ft.Keys[k])))
		}
		goals[tok.Decode(span)] = words
	}
	record := regexp.MustCompile(`record ([a-z]+) (\d+)\n`)
	foundLine := regexp.MustCompile(`found:((?: [a-z]+ (?:\d+|\?))+)`)
	pair := regexp.MustCompile(` ([a-z]+) (\d+|\?)`)
	r := rand.New(rand.NewPCG(5, 6))
	values, unknown, distractors := 0, 0, 0
	for _, it := range ft.RecallBatch(segs, RecallDraw{N: 64, Length: 96, Extra: 4, Reach: 1, Goal: true}, r) {
		all := slices.Concat(it.Prompt, it.Response)
		if len(all) > 96 {
			t.Fatalf("sequence of %d tokens, limit 96", len(all))
		}
		text := tok.Decode(all)
		i := strings.LastIndex(text, "\ngoal:")
		j := strings.LastIndex(text, "\nfound:")
		if i < 0 || j < i {
			t.Fatalf("no goal and found lines at the end of %q", text)
		}
		ctx, span, q := text[:i], text[i+len("\ngoal:"):j], text[j+len("\nfound:"):]
		goal, ok := goals[span]
		if !ok {
			t.Fatalf("goal line %q is none of the segments' goals", span)
		}
		// What the context shows: record lines, and earlier found lines.
		shown := map[string]string{}
		for _, m := range record.FindAllStringSubmatch(ctx, -1) {
			shown[m[1]] = m[2]
			if !slices.Contains(goal, m[1]) {
				distractors++
			}
		}
		for _, m := range foundLine.FindAllStringSubmatch(ctx, -1) {
			for _, p := range pair.FindAllStringSubmatch(m[1], -1) {
				if p[2] != "?" {
					shown[p[1]] = p[2]
				}
			}
		}
		qs := pair.FindAllStringSubmatch(q, -1)
		var keys, want []string
		for _, m := range qs {
			keys = append(keys, m[1])
			want = append(want, m[2])
		}
		if !slices.Equal(keys, goal) {
			t.Fatalf("found line keys %v, want the goal's %v in order:\n%s", keys, goal, text)
		}
		for n, k := range keys {
			v, ok := shown[k]
			switch {
			case !ok && want[n] != "?":
				t.Fatalf("%s answered %s, but the context shows no value of it:\n%s", k, want[n], text)
			case ok && want[n] != v:
				t.Fatalf("%s answered %s, but the context shows %s:\n%s", k, want[n], v, text)
			case ok:
				values++
			default:
				unknown++
			}
		}
		var target []int
		for _, p := range it.Targets {
			target = append(target, it.Response[p])
		}
		if got := tok.Decode(target); got != " "+strings.Join(want, " ") {
			t.Fatalf("targets %q, want the answers %q", got, want)
		}
	}
	if values < 32 || unknown < 32 || distractors < 32 {
		t.Fatalf("%d values, %d ? and %d distractor records in 64 sequences", values, unknown, distractors)
	}
}

// The context's facts include a record on a page's last line and earlier
// found lines and answers; a key shown with two values has none.
func TestRecallGoalKnown(t *testing.T) {
	tok, ft := defaultFactTokens(t)
	key := func(w string) int {
		return slices.IndexFunc(ft.Keys, func(p []int) bool { return slices.Equal(p, tok.Encode(" "+w)) })
	}
	value := func(w string) int {
		return slices.IndexFunc(ft.Values, func(p []int) bool { return slices.Equal(p, tok.Encode(" "+w)) })
	}
	for _, tc := range []struct {
		name, ctx string
		want      map[string]string
		ok        bool
	}{
		{"record", "note 1: x\nrecord dune 56", map[string]string{"dune": "56"}, true},
		{"found line", "\nfound: dune ? amber 12\nat: start", map[string]string{"amber": "12"}, true},
		{"answer", "answer amber 12 dune 40", map[string]string{"amber": "12", "dune": "40"}, true},
		{"two values", "record dune 56\nrecord dune 57\n", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ft.known(tok.Encode(tc.ctx))
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			want := map[int]int{}
			for k, v := range tc.want {
				want[key(k)] = value(v)
			}
			if len(got) != len(want) {
				t.Fatalf("known %v, want %v", got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Fatalf("known %v, want %v", got, want)
				}
			}
		})
	}
}

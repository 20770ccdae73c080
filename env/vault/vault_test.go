package vault

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/tokenizer"
)

var (
	tokOnce sync.Once
	tok     *tokenizer.Tokenizer
	tmpl    agent.Template
	tokErr  error
)

func defaultTok(t *testing.T) (*tokenizer.Tokenizer, agent.Template) {
	t.Helper()
	tokOnce.Do(func() { tok, tmpl, tokErr = DefaultTokenizer() })
	if tokErr != nil {
		t.Fatal(tokErr)
	}
	return tok, tmpl
}

type stats struct {
	n, success, compactions, turns, quality, withQ float64
	status                                         map[episode.Status]int
}

func (s stats) rate() float64 { return s.success / s.n }

// runExpert plays n test seeds with the expert keeping facts with
// probability p, at the agent's default config.
func runExpert(t *testing.T, vc Config, p float64, noCompaction bool, n int) stats {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.SystemPrompt = SystemPrompt
	cfg.NoCompaction = noCompaction
	a := expertAgent(t, cfg, p)
	s := stats{status: map[episode.Status]int{}}
	for i := range n {
		ep := playValid(t, a, vc, TestSeeds().Start+int64(i), int64(i))
		s.n++
		s.status[ep.Status]++
		if ep.Reward == 1 {
			s.success++
		}
		s.compactions += ep.Metrics[agent.MetricCompactions]
		s.turns += ep.Metrics[agent.MetricTurns]
		if q, ok := ep.Metrics[agent.MetricSummaryQuality]; ok {
			s.quality += q
			s.withQ++
		}
	}
	return s
}

// expertAgent is an agent with cfg around the expert keeping facts with
// probability p (seed 1).
func expertAgent(t *testing.T, cfg agent.Config, p float64) *agent.Agent {
	t.Helper()
	tk, tm := defaultTok(t)
	ex, err := NewExpert(tk, tm, p, 1)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(context.Background(), cfg, agent.Local(tk), tm, ex)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// playValid plays task seed task with agent seed seed and fails the test
// unless the episode is valid and no infrastructure error.
func playValid(t *testing.T, a *agent.Agent, vc Config, task, seed int64) episode.Episode {
	t.Helper()
	env, err := New(vc, task)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := a.Run(context.Background(), env, seed)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Status == episode.StatusInfraError {
		t.Fatalf("task %d: infra_error: %s", task, ep.Meta[agent.MetaError])
	}
	if err := ep.Validate(); err != nil {
		t.Fatalf("task %d: %v", task, err)
	}
	return ep
}

func TestExpertNeedsMemory(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 100
	}
	vc := DefaultConfig()
	full := runExpert(t, vc, 1, false, n)
	base := runExpert(t, vc, 1, true, n)
	lossy := runExpert(t, vc, 0.5, false, n)
	mid := runExpert(t, vc, 0.7, false, n)
	t.Logf("p=1: success %.3f, compactions %.2f, turns %.1f, quality %.3f %v", full.rate(), full.compactions/full.n, full.turns/full.n, full.quality/full.withQ, full.status)
	t.Logf("p=1 no compaction: success %.3f %v", base.rate(), base.status)
	t.Logf("p=0.7: success %.3f quality %.3f; p=0.5: success %.3f quality %.3f", mid.rate(), mid.quality/mid.withQ, lossy.rate(), lossy.quality/lossy.withQ)
	if full.rate() < 0.95 {
		t.Errorf("lossless expert with compaction: success %.3f < 0.95", full.rate())
	}
	if base.rate() > 0.5*full.rate() {
		t.Errorf("without compaction success %.3f is not far below %.3f: the suite does not need memory", base.rate(), full.rate())
	}
	if !(lossy.rate() < mid.rate() && mid.rate() < full.rate()-0.1) {
		t.Errorf("summary quality does not matter: success p=1 %.3f, p=0.7 %.3f, p=0.5 %.3f", full.rate(), mid.rate(), lossy.rate())
	}
	if c := full.compactions / full.n; c < 2 || c > 4 {
		t.Errorf("default task needs %.2f compactions on average, want 2–4", c)
	}
	if q := full.quality / full.withQ; q != 1 {
		t.Errorf("lossless summaries have quality %.3f", q)
	}
	if q := lossy.quality / lossy.withQ; q > 0.8 || q < 0.2 {
		t.Errorf("p=0.5 summaries have quality %.3f", q)
	}
}

func TestGenerationDeterministicAndSplit(t *testing.T) {
	a, _ := New(DefaultConfig(), 42)
	b, _ := New(DefaultConfig(), 42)
	c, _ := New(DefaultConfig(), 43)
	if a.Task() != b.Task() || a.PageText(2, 1) != b.PageText(2, 1) {
		t.Fatal("same seed, different vault")
	}
	if a.Task() == c.Task() && a.PageText(1, 1) == c.PageText(1, 1) {
		t.Fatal("different seeds, same vault")
	}
	if TrainSeeds().Contains(TestSeeds().Start) || !TestSeeds().Contains(TestSeeds().Start) || TrainSeeds().End > TestSeeds().Start {
		t.Fatal("train and test seeds overlap")
	}
	if _, err := Split("dev"); err == nil {
		t.Fatal("unknown split accepted")
	}
	// Every asked fact is on exactly one page, with its value.
	for _, k := range a.Keys() {
		v, _ := a.Truth(k)
		n := 0
		for f := 1; f <= DefaultConfig().Files; f++ {
			for p := 1; p <= a.NumPages(f); p++ {
				n += strings.Count(a.PageText(f, p), "record "+k+" ")
				if strings.Contains(a.PageText(f, p), "record "+k+" "+v+"\n") || strings.HasSuffix(a.PageText(f, p), "record "+k+" "+v) {
					n += 100
				}
			}
		}
		if n != 101 {
			t.Fatalf("key %s: count %d", k, n)
		}
	}
	for _, bad := range []Config{{}, {Files: 1, Pages: 1, Facts: 100}, {Files: 1, Pages: 1, Facts: 1, NoiseLines: -1}} {
		if _, err := New(bad, 1); err == nil {
			t.Fatalf("bad config %+v accepted", bad)
		}
	}
}

func TestStepAndReward(t *testing.T) {
	ctx := context.Background()
	e, _ := New(DefaultConfig(), 7)
	if task, _ := e.Reset(ctx); !strings.Contains(task, strings.Join(e.Keys(), " ")) {
		t.Fatalf("task %q lacks the keys", task)
	}
	st, _ := e.Step(ctx, "open 1")
	if st.Invalid || st.Done || !strings.HasPrefix(st.Observation, "file 1 has ") {
		t.Fatalf("open: %+v", st)
	}
	for _, bad := range []string{"", "  ", "jump 3", "open", "open x", "read 1", "answer", "answer amber", "answer Amber=3", "answer a=1 a=2"} {
		st, err := e.Step(ctx, bad)
		if err != nil || !st.Invalid || st.Done || !strings.HasPrefix(st.Observation, "invalid action: ") {
			t.Fatalf("%q: %+v %v", bad, st, err)
		}
	}
	for _, out := range []string{"open 99", "read 99 1", "read 1 99", "open 0"} {
		st, _ := e.Step(ctx, out)
		if st.Invalid || st.Done || !strings.Contains(st.Observation, "no ") {
			t.Fatalf("%q: %+v", out, st)
		}
	}
	// Summary quality before any fact was seen is 1; after reading the page
	// of the first key, a summary without it scores lower.
	k := e.Keys()[0]
	v, _ := e.Truth(k)
	if q := e.SummaryQuality("nothing"); q != 1 {
		t.Fatalf("quality with nothing seen: %v", q)
	}
	fp := e.where[k]
	e.Step(ctx, "read "+itoa(fp[0])+" "+itoa(fp[1]))
	seen := 0
	for _, kk := range e.Keys() {
		if e.seen[kk] {
			seen++
		}
	}
	if q := e.SummaryQuality("found: " + k + " " + v); math.Abs(q-1) > 1e-12 && seen == 1 {
		t.Fatalf("quality with the seen fact kept: %v", q)
	}
	if q := e.SummaryQuality("found: " + k + " 0"); q != 0 && seen == 1 {
		t.Fatalf("quality with a wrong value: %v", q)
	}
	kept, lost := e.SummaryAudit("goal: … found: none")
	if len(kept) != 0 || len(lost) != seen {
		t.Fatalf("audit %v %v", kept, lost)
	}
	// All right: reward 1; metrics.
	var ans []string
	for _, kk := range e.Keys() {
		vv, _ := e.Truth(kk)
		ans = append(ans, kk+" "+vv)
	}
	st, _ = e.Step(ctx, "answer "+strings.Join(ans, " "))
	if !st.Done || st.Reward != 1 || e.Metrics()["answer_accuracy"] != 1 {
		t.Fatalf("right answer: %+v %v", st, e.Metrics())
	}
	if _, err := e.Step(ctx, "open 1"); err == nil {
		t.Fatal("step after done accepted")
	}
	// One wrong: reward 0, or 3/4 with partial credit.
	for _, partial := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.PartialCredit = partial
		e, _ := New(cfg, 7)
		wrong := append([]string{e.Keys()[0] + " ?"}, ans[1:]...)
		st, _ := e.Step(ctx, "answer "+strings.Join(wrong, " "))
		want := 0.0
		if partial {
			want = 0.75
		}
		if !st.Done || st.Reward != want {
			t.Fatalf("partial=%v: reward %v want %v", partial, st.Reward, want)
		}
	}
}

func (e *Env) truthOrEmpty(k string) string { v, _ := e.Truth(k); return v }

func itoa(n int) string { return Action{Verb: Open, File: n}.String()[len("open "):] }

func TestExpertReadsOnlyItsContext(t *testing.T) {
	tk, tm := defaultTok(t)
	ex, _ := NewExpert(tk, tm, 1, 1)
	e, _ := New(DefaultConfig(), 3)
	// A context with the task and no steps: open 1.
	prompt := []int{tm.System}
	prompt = append(prompt, tk.Encode(SystemPrompt)...)
	prompt = append(prompt, tm.EndOfTurn, tm.User)
	prompt = append(prompt, tk.Encode(e.Task())...)
	prompt = append(prompt, tm.EndOfTurn, tm.Assistant)
	c, err := ex.Sample(context.Background(), inferReq(prompt, 32, tm))
	if err != nil || tk.Decode(c.Tokens[:len(c.Tokens)-1]) != "open 1" || c.Tokens[len(c.Tokens)-1] != tm.EndOfTurn {
		t.Fatalf("first action %q %v", tk.Decode(c.Tokens), err)
	}
	// A resumed context whose summary holds every fact: answer at once.
	var found []string
	for _, k := range e.Keys() {
		v, _ := e.Truth(k)
		found = append(found, k+" "+v)
	}
	// The facts in reverse order of the keys in the summary: the answer
	// still lists them in the task's order.
	answer := "answer " + strings.Join(found, " ")
	slices.Reverse(found)
	goal := "goal: report the values of " + strings.Join(e.Keys(), " ") + ". the vault has 5 files."
	summary := goal + "\nfound: " + strings.Join(found, " ") + "\nat: file 2 page 1 of 3"
	resumed := []int{tm.System, tm.EndOfTurn, tm.Summary}
	resumed = append(resumed, tk.Encode(summary)...)
	resumed = append(resumed, tm.EndOfTurn, tm.Assistant)
	c, _ = ex.Sample(context.Background(), inferReq(resumed, 32, tm))
	if got := tk.Decode(c.Tokens[:len(c.Tokens)-1]); got != answer {
		t.Fatalf("resumed with all facts: %q, want %q", got, answer)
	}
	// The same with one fact missing continues where the summary says.
	summary = goal + "\nfound: " + found[0] + "\nat: file 2 page 1 of 3"
	resumed = append([]int{tm.System, tm.EndOfTurn, tm.Summary}, tk.Encode(summary)...)
	resumed = append(resumed, tm.EndOfTurn, tm.Assistant)
	c, _ = ex.Sample(context.Background(), inferReq(resumed, 32, tm))
	if got := tk.Decode(c.Tokens[:len(c.Tokens)-1]); got != "read 2 2" {
		t.Fatalf("resumed mid-file: %q", got)
	}
	// Asked to summarise: the summary states the goal and the progress; a
	// tight MaxTokens truncates with FinishLength.
	sumPrompt := append(append([]int{}, resumed[:len(resumed)-1]...), tm.User, tm.EndOfTurn, tm.Summary)
	c, _ = ex.Sample(context.Background(), inferReq(sumPrompt, 96, tm))
	// It lists every asked key in the task's order, the known one with its
	// value (p = 1 keeps it), the others with ?.
	wantFound := "found:"
	for _, k := range e.Keys() {
		v := "?"
		if k+" "+e.truthOrEmpty(k) == found[0] {
			v = e.truthOrEmpty(k)
		}
		wantFound += " " + k + " " + v
	}
	if got := tk.Decode(c.Tokens); !strings.HasPrefix(got, goal) || !strings.Contains(got, "\n"+wantFound+"\n") || !strings.Contains(got, "at: file 2 page 1 of 3") {
		t.Fatalf("summary %q, want %q", got, wantFound)
	}
	c, _ = ex.Sample(context.Background(), inferReq(sumPrompt, 3, tm))
	if len(c.Tokens) != 3 || c.FinishReason != "length" || len(c.Logprobs) != 3 {
		t.Fatalf("truncated summary %+v", c)
	}
	// Prompts that ask for nothing are errors, not guesses.
	if _, err := ex.Sample(context.Background(), inferReq(prompt[:len(prompt)-1], 32, tm)); err == nil {
		t.Fatal("closed prompt accepted")
	}
	if _, err := NewExpert(tk, tm, 1.5, 0); err == nil {
		t.Fatal("p = 1.5 accepted")
	}
}

func TestCorpusCoversTheLanguage(t *testing.T) {
	texts, err := Corpus(DefaultConfig(), 0, 20)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{SystemPrompt, "task: report", "open 1", "read 1 1", "record ", "note ", "goal: report", "found:", "at: file", "answer ", "keys right", "invalid action", "tokens omitted]"} {
		if !strings.Contains(all, want) {
			t.Fatalf("corpus lacks %q", want)
		}
	}
	tk, _ := defaultTok(t)
	if tk.VocabSize() > DefaultVocabSize || tk.VocabSize() < 500 {
		t.Fatalf("default vocabulary %d", tk.VocabSize())
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig("files=7, noise_lines=2,partial_credit=true")
	if err != nil || c.Files != 7 || c.NoiseLines != 2 || !c.PartialCredit || c.Facts != DefaultConfig().Facts {
		t.Fatalf("%+v %v", c, err)
	}
	if c, err := ParseConfig(""); err != nil || c != DefaultConfig() {
		t.Fatalf("default: %+v %v", c, err)
	}
	if c, err := ParseConfig("spread=true"); err != nil || !c.Spread || c.PartialCredit {
		t.Fatalf("spread: %+v %v", c, err)
	}
	for _, old := range []string{"noise=2", "partial=true"} {
		if _, err := ParseConfig(old); err == nil || !strings.Contains(err.Error(), "is now") {
			t.Fatalf("former knob %q: %v", old, err)
		}
	}
	for _, bad := range []string{"files", "rooms=3", "files=x", "files=0", "partial_credit=maybe", "spread=2"} {
		if _, err := ParseConfig(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// TestSegmentsFitWindowVault plays the expert over random suite knobs and
// agent budgets, with pages up to many times the window: every request and
// every segment stays within the window.
func TestSegmentsFitWindowVault(t *testing.T) {
	tk, tm := defaultTok(t)
	n := 1500
	if testing.Short() {
		n = 200
	}
	rng := rand.New(rand.NewPCG(9, 9))
	statuses := map[episode.Status]int{}
	truncated := 0
	for i := range n {
		vc := Config{Files: 1 + rng.IntN(8), Pages: 1 + rng.IntN(5), Facts: 1 + rng.IntN(6), Distractors: rng.IntN(20),
			NoiseLines: []int{0, 3, 8, 40, 400}[rng.IntN(5)]}
		cfg := agent.DefaultConfig()
		cfg.SystemPrompt = SystemPrompt
		cfg.Context = 400 + rng.IntN(1600)
		cfg.Reserve = 200 + rng.IntN(cfg.Context/2)
		cfg.KeepLast = rng.IntN(4)
		cfg.MaxCompactions = rng.IntN(6)
		cfg.MaxSummaryTokens = 8 + rng.IntN(120)
		cfg.MaxActionTokens = 2 + rng.IntN(40)
		cfg.NoCompaction = rng.IntN(4) == 0
		rec := &recorder{}
		ex, _ := NewExpert(tk, tm, rng.Float64(), int64(i))
		rec.inner = ex
		a, err := agent.New(context.Background(), cfg, agent.Local(tk), tm, rec)
		if err != nil {
			continue
		}
		ep := playValid(t, a, vc, TrainSeeds().Start+int64(i), int64(i))
		statuses[ep.Status]++
		if ep.Metrics[agent.MetricTruncatedObs] > 0 {
			truncated++
		}
		for si, s := range ep.Segments {
			if len(s.PromptIDs)+len(s.ResponseIDs) > cfg.Context {
				t.Fatalf("episode %d segment %d: %d + %d > %d", i, si, len(s.PromptIDs), len(s.ResponseIDs), cfg.Context)
			}
		}
		for _, r := range rec.reqs {
			if len(r.Prompt)+r.MaxTokens > cfg.Context {
				t.Fatalf("episode %d: request of %d + %d > %d", i, len(r.Prompt), r.MaxTokens, cfg.Context)
			}
		}
	}
	t.Logf("statuses %v, %d with truncated observations", statuses, truncated)
	if truncated == 0 || statuses[episode.StatusOK] == 0 || statuses[episode.StatusOverlong] == 0 {
		t.Fatalf("knobs did not exercise truncation and both outcomes: %v, %d truncated", statuses, truncated)
	}
}

type recorder struct {
	inner *Expert
	reqs  []infer.Request
}

func (r *recorder) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	r.reqs = append(r.reqs, infer.Request{Prompt: req.Prompt, MaxTokens: req.MaxTokens})
	return r.inner.Sample(ctx, req)
}

// With a key pool of n, tasks and distractors use only the first n key
// words, and the pool must hold at least twice the asked facts.
func TestKeyPool(t *testing.T) {
	cfg, err := ParseConfig("facts=2,keys=5,distractors=8")
	if err != nil {
		t.Fatal(err)
	}
	pool := keyWords[:5]
	for seed := range int64(50) {
		e, err := New(cfg, seed)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range e.Keys() {
			if !slices.Contains(pool, k) {
				t.Fatalf("seed %d: asked key %s outside the pool %v", seed, k, pool)
			}
		}
		for f := 1; f <= cfg.Files; f++ {
			for p := 1; p <= e.NumPages(f); p++ {
				for _, fact := range facts(e.PageText(f, p)) {
					if !slices.Contains(pool, fact.Key) {
						t.Fatalf("seed %d: record %v outside the pool", seed, fact)
					}
				}
			}
		}
	}
	if _, err := ParseConfig("facts=3,keys=5"); err == nil || !strings.Contains(err.Error(), "key pool") {
		t.Fatalf("facts 3 of a pool of 5 accepted: %v", err)
	}
	if keys, values := FactWords(cfg); !slices.Equal(keys, pool) || len(values) != 90 || values[0] != "10" {
		t.Fatalf("fact words %v, %d values", keys, len(values))
	}
}

// Spread puts the first asked fact in file 1, the last in the last file
// and the others evenly between, each on a page that exists; without it,
// a seed's vault is what it always was (facts on random pages).
func TestSpreadPlacesFactsInReadingOrder(t *testing.T) {
	for _, c := range []struct{ files, facts int }{{7, 2}, {7, 3}, {5, 4}, {2, 3}, {4, 1}} {
		cfg := Config{Files: c.files, Pages: 3, Facts: c.facts, Keys: 8, Distractors: 3, NoiseLines: 2, Spread: true}
		for seed := int64(0); seed < 50; seed++ {
			e, err := New(cfg, seed)
			if err != nil {
				t.Fatal(err)
			}
			for i, k := range e.keys {
				want := 1
				if c.facts > 1 {
					want = 1 + i*(c.files-1)/(c.facts-1)
				}
				w := e.where[k]
				if w[0] != want || w[1] < 1 || w[1] > e.NumPages(w[0]) {
					t.Fatalf("%+v seed %d: fact %d (%s) at file %d page %d, want file %d", cfg, seed, i, k, w[0], w[1], want)
				}
				if !strings.Contains(e.PageText(w[0], w[1]), "record "+k+" "+e.truth[k]) {
					t.Fatalf("%+v seed %d: record of %s not on its page", cfg, seed, k)
				}
			}
		}
	}
	// Off, placements are random: over 50 seeds the first fact is not
	// always in file 1.
	moved := false
	for seed := int64(0); seed < 50 && !moved; seed++ {
		e, err := New(Config{Files: 7, Pages: 3, Facts: 2, Keys: 4, Distractors: 4, NoiseLines: 4}, seed)
		if err != nil {
			t.Fatal(err)
		}
		moved = e.where[e.keys[0]][0] != 1
	}
	if !moved {
		t.Error("without spread the first fact was in file 1 for 50 seeds")
	}
}

// Package vault is the built-in long-horizon task suite: the agent searches a
// procedurally generated vault of files for the values of the keys the task
// names, and answers with all of them. Facts ("record key value" lines) are
// scattered over many pages full of noise lines, more than fit in one
// context window, and the keys to report appear only in the task text, so
// both the task and the facts found must survive each compaction in the
// summary (docs/design.md §4).
//
// Data flow: New(cfg, seed) generates one episode's vault deterministically
// from the seed; Reset returns the task text, Step parses one action
// (ParseAction: open F, read F P, answer k v …) and returns its observation.
// The episode ends at the answer, with reward 1 when every asked key has its
// value (or, with Config.PartialCredit, the fraction right). The Env also
// grades summaries (SummaryQuality, SummaryAudit), writes the p = 1 expert's
// reference summary of the episode so far for evaluation-time summary
// overrides (ReferenceSummary, agent.SummaryOverride) and reports metrics.
// Expert is a scripted policy (an infer.Sampler) for demonstrations, and
// Corpus renders representative text to train a tokenizer on.
// The system prompt and the task template are files under prompts/,
// embedded in the binary (prompts.go).
//
// The language is small and formulaic on purpose: the suite is also the
// training ground for a tiny transformer.
package vault

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/compactrl/compactrl/agent"
)

// Config holds the suite's difficulty knobs.
type Config struct {
	Files         int  `yaml:"files"`          // files in the vault
	Pages         int  `yaml:"pages"`          // pages per file: each file has Pages−1 … Pages+1 (at least 1)
	Facts         int  `yaml:"facts"`          // keys the task asks for, each on one random page
	Keys          int  `yaml:"keys"`           // size of the key pool tasks and distractors draw from (0: all 32 key words)
	Distractors   int  `yaml:"distractors"`    // records of other keys, scattered like the facts
	NoiseLines    int  `yaml:"noise_lines"`    // noise lines per page (the observation length)
	PartialCredit bool `yaml:"partial_credit"` // reward = fraction of keys right instead of all-or-nothing
	// Spread places the asked facts evenly over the files in reading order
	// instead of on random pages: fact i (0-based, task order) is on a
	// random page of file 1 + ⌊i·(Files−1)/(Facts−1)⌋, so the first is in
	// file 1 and the last in the last file. An agent that reads in order
	// then finds the first fact in its first segment and must carry it to
	// the end of the vault: the long-horizon configuration
	// (configs/vault-long.yaml). Off, the default, keeps every seed's vault
	// as before.
	Spread bool `yaml:"spread"`
}

// DefaultConfig needs 2–4 compactions of the scripted expert at the agent's
// default window (768 tokens with DefaultTokenizer; mean 2.5, measured on
// test seeds), and far more than one window without compaction.
func DefaultConfig() Config {
	return Config{Files: 5, Pages: 3, Facts: 4, Distractors: 6, NoiseLines: 5}
}

// Validate reports the knobs out of their ranges.
func (c Config) Validate() error { return c.validate() }

func (c Config) validate() error {
	var errs []error
	if c.Files < 1 || c.Files > 99 {
		errs = append(errs, fmt.Errorf("files %d not in 1…99", c.Files))
	}
	if c.Pages < 1 || c.Pages > 99 {
		errs = append(errs, fmt.Errorf("pages %d not in 1…99", c.Pages))
	}
	if c.Keys < 0 || c.Keys > len(keyWords) {
		errs = append(errs, fmt.Errorf("keys %d not in 0…%d", c.Keys, len(keyWords)))
	}
	if c.Facts < 1 || c.Facts > c.pool()/2 {
		errs = append(errs, fmt.Errorf("facts %d not in 1…%d (half the key pool of %d)", c.Facts, c.pool()/2, c.pool()))
	}
	if c.Distractors < 0 || c.Distractors > 1000 {
		errs = append(errs, fmt.Errorf("distractors %d not in 0…1000", c.Distractors))
	}
	if c.NoiseLines < 0 || c.NoiseLines > 10000 {
		errs = append(errs, fmt.Errorf("noise lines %d not in 0…10000", c.NoiseLines))
	}
	return errors.Join(errs...)
}

// KeyWords is the number of key words a key pool draws from (Config.Keys
// at most).
func KeyWords() int { return len(keyWords) }

// pool is the number of key words in play.
func (c Config) pool() int {
	if c.Keys == 0 {
		return len(keyWords)
	}
	return c.Keys
}

// SeedRange is a half-open range of episode seeds [Start, End).
type SeedRange struct{ Start, End int64 }

// Contains reports whether seed is in the range.
func (r SeedRange) Contains(seed int64) bool { return seed >= r.Start && seed < r.End }

// Seed ranges of the train/test split.
func TrainSeeds() SeedRange { return SeedRange{0, 1_000_000} }
func TestSeeds() SeedRange  { return SeedRange{1_000_000, 2_000_000} }

// Split returns the seed range named "train" or "test".
func Split(name string) (SeedRange, error) {
	switch name {
	case "train":
		return TrainSeeds(), nil
	case "test":
		return TestSeeds(), nil
	}
	return SeedRange{}, fmt.Errorf("split %q: want train or test", name)
}

var keyWords = []string{
	"amber", "basil", "cedar", "delta", "ember", "flint", "garnet", "hazel",
	"iris", "jade", "kelp", "lotus", "maple", "nickel", "onyx", "pearl",
	"quartz", "raven", "sage", "topaz", "umber", "violet", "willow", "yarrow",
	"zinc", "birch", "coral", "dune", "frost", "gale", "heron", "linen",
}

var (
	noiseThings = []string{"pump", "gate", "valve", "tank", "pipe", "fan", "door", "lamp", "belt", "hatch", "crate", "drum"}
	noiseVerbs  = []string{"hums", "drips", "rattles", "clicks", "stops", "starts", "idles", "leaks"}
	noisePlaces = []string{"north", "south", "east", "west", "upper", "lower", "inner", "outer"}
)

// page is one page's lines.
type page struct{ lines []string }

// Env is one episode of the suite. It implements agent.Environment,
// agent.SummaryScorer, agent.SummaryAuditor, agent.SummaryOracle and
// agent.MetricsReporter.
type Env struct {
	cfg   Config
	seed  int64
	keys  []string          // asked for, in task order
	truth map[string]string // key → value, asked keys only
	where map[string][2]int // key → (file, page), 1-based
	files [][]page
	task  string
	seen  map[string]bool // asked keys whose page was shown
	// The position as the expert tracks it from the observations: the file
	// worked on (0: none yet), its last page read, and the page counts the
	// opens showed. ReferenceSummary writes it.
	atFile, atPage int
	pageCounts     map[int]int
	reads          map[[2]int]int
	opens          int
	steps          int
	acc            float64
	done           bool
	answer         bool
}

// New generates the episode of seed.
func New(cfg Config, seed int64) (*Env, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("vault config: %w", err)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7661756c74))
	e := &Env{cfg: cfg, seed: seed, truth: map[string]string{}, where: map[string][2]int{}, seen: map[string]bool{}, reads: map[[2]int]int{}, pageCounts: map[int]int{}}
	perm := rng.Perm(cfg.pool())
	for _, i := range perm[:cfg.Facts] {
		e.keys = append(e.keys, keyWords[i])
	}
	others := perm[cfg.Facts:]
	e.files = make([][]page, cfg.Files)
	var slots [][2]int
	for f := range e.files {
		n := max(1, cfg.Pages-1+rng.IntN(3))
		e.files[f] = make([]page, n)
		for p := range n {
			lines := make([]string, cfg.NoiseLines)
			for i := range lines {
				lines[i] = noiseLine(rng)
			}
			e.files[f][p].lines = lines
			slots = append(slots, [2]int{f + 1, p + 1})
		}
	}
	insert := func(fp [2]int, line string) {
		pg := &e.files[fp[0]-1][fp[1]-1]
		i := rng.IntN(len(pg.lines) + 1)
		pg.lines = slices.Insert(pg.lines, i, line)
	}
	for i, k := range e.keys {
		v := strconv.Itoa(10 + rng.IntN(90))
		e.truth[k] = v
		var fp [2]int
		if cfg.Spread {
			fp = e.spreadSlot(i, rng)
		} else {
			fp = slots[rng.IntN(len(slots))]
		}
		e.where[k] = fp
		insert(fp, "record "+Fact{k, v}.String())
	}
	for range cfg.Distractors {
		k := keyWords[others[rng.IntN(len(others))]]
		insert(slots[rng.IntN(len(slots))], "record "+Fact{k, strconv.Itoa(10 + rng.IntN(90))}.String())
	}
	task, err := taskText(e.keys, cfg.Files)
	if err != nil {
		return nil, fmt.Errorf("vault task: %w", err)
	}
	e.task = task
	return e, nil
}

// spreadSlot is the (file, page) of asked fact i under Config.Spread: a
// random page of file 1 + ⌊i·(Files−1)/(Facts−1)⌋ (file 1 when Facts is 1).
func (e *Env) spreadSlot(i int, rng *rand.Rand) [2]int {
	f := 0
	if e.cfg.Facts > 1 {
		f = i * (e.cfg.Files - 1) / (e.cfg.Facts - 1)
	}
	return [2]int{f + 1, 1 + rng.IntN(len(e.files[f]))}
}

func noiseLine(rng *rand.Rand) string {
	return fmt.Sprintf("note %d: the %s %s near the %s %s", rng.IntN(100),
		noiseThings[rng.IntN(len(noiseThings))], noiseVerbs[rng.IntN(len(noiseVerbs))],
		noisePlaces[rng.IntN(len(noisePlaces))], noiseThings[rng.IntN(len(noiseThings))])
}

// Keys returns the keys the task asks for.
func (e *Env) Keys() []string { return slices.Clone(e.keys) }

// Truth returns the value of an asked key.
func (e *Env) Truth(key string) (string, bool) { v, ok := e.truth[key]; return v, ok }

// Task returns the task text.
func (e *Env) Task() string { return e.task }

// Reset returns the task.
func (e *Env) Reset(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return e.task, nil
}

// Step applies one reply.
func (e *Env) Step(ctx context.Context, reply string) (agent.Step, error) {
	if err := ctx.Err(); err != nil {
		return agent.Step{}, err
	}
	if e.done {
		return agent.Step{}, errors.New("vault: step after the episode ended")
	}
	e.steps++
	a, err := ParseAction(reply)
	if err != nil {
		return agent.Step{Invalid: true, Observation: "invalid action: " + err.Error()}, nil
	}
	switch a.Verb {
	case Open:
		if a.File < 1 || a.File > len(e.files) {
			return agent.Step{Observation: e.noFile(a.File)}, nil
		}
		e.opens++
		e.pageCounts[a.File] = len(e.files[a.File-1])
		if a.File != e.atFile {
			e.atFile, e.atPage = a.File, 0
		}
		return agent.Step{Observation: fmt.Sprintf("file %d has %d pages", a.File, len(e.files[a.File-1]))}, nil
	case Read:
		if a.File < 1 || a.File > len(e.files) {
			return agent.Step{Observation: e.noFile(a.File)}, nil
		}
		pages := e.files[a.File-1]
		if a.Page < 1 || a.Page > len(pages) {
			return agent.Step{Observation: fmt.Sprintf("file %d has no page %d: its pages are 1 to %d", a.File, a.Page, len(pages))}, nil
		}
		fp := [2]int{a.File, a.Page}
		e.reads[fp]++
		e.atFile, e.atPage = a.File, a.Page
		for k, w := range e.where {
			if w == fp {
				e.seen[k] = true
			}
		}
		return agent.Step{Observation: e.PageText(a.File, a.Page)}, nil
	default:
		right := 0
		for _, f := range a.Answers {
			if v, ok := e.truth[f.Key]; ok && v == f.Value {
				right++
			}
		}
		e.acc = float64(right) / float64(len(e.keys))
		e.done, e.answer = true, true
		r := 0.0
		if right == len(e.keys) {
			r = 1
		}
		if e.cfg.PartialCredit {
			r = e.acc
		}
		return agent.Step{Done: true, Reward: r, Observation: fmt.Sprintf("%d of %d keys right", right, len(e.keys))}, nil
	}
}

func (e *Env) noFile(n int) string {
	return fmt.Sprintf("there is no file %d: the vault has files 1 to %d", n, len(e.files))
}

// PageText renders page p of file f (1-based) as its observation.
func (e *Env) PageText(f, p int) string {
	return fmt.Sprintf("file %d page %d\n%s", f, p, strings.Join(e.files[f-1][p-1].lines, "\n"))
}

// NumPages returns the number of pages of file f (1-based).
func (e *Env) NumPages(f int) int { return len(e.files[f-1]) }

// SummaryAudit splits the asked facts seen so far into those the summary
// states correctly and those it lost (missing or wrong).
func (e *Env) SummaryAudit(summary string) (kept, lost []string) {
	stated := map[string]string{}
	for _, f := range facts(summary) {
		stated[f.Key] = f.Value
	}
	for _, k := range e.keys {
		if !e.seen[k] {
			continue
		}
		f := Fact{k, e.truth[k]}.String()
		if stated[k] == e.truth[k] {
			kept = append(kept, f)
		} else {
			lost = append(lost, f)
		}
	}
	return kept, lost
}

// SummaryQuality is |kept| / |seen|: the fraction of the asked facts shown
// so far that the summary states correctly (1 when none was shown yet).
func (e *Env) SummaryQuality(summary string) float64 {
	kept, lost := e.SummaryAudit(summary)
	if len(kept)+len(lost) == 0 {
		return 1
	}
	return float64(len(kept)) / float64(len(kept)+len(lost))
}

// ReferenceSummary implements agent.SummaryOracle: the summary the
// expert with p = 1 writes when its context holds everything the episode
// has shown — the goal, every asked fact seen so far with its true value,
// and the position (the file worked on, its last page read, the page count
// its open showed). With drop, one asked fact seen so far, chosen with
// seed, is written "?" and named in dropped ("" when none was seen, and
// the summary is the full one).
func (e *Env) ReferenceSummary(drop bool, seed int64) (summary, dropped string) {
	k := knowledge{keys: slices.Clone(e.keys), files: len(e.files), found: map[string]string{},
		file: e.atFile, page: e.atPage, pages: maps.Clone(e.pageCounts), goalOK: true}
	var seen []string
	for _, key := range e.keys {
		if e.seen[key] {
			k.add(Fact{key, e.truth[key]})
			seen = append(seen, key)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x64726f70))
	if drop && len(seen) > 0 {
		key := seen[rng.IntN(len(seen))]
		delete(k.found, key)
		dropped = Fact{key, e.truth[key]}.String()
	}
	return k.summary(rng, 1), dropped
}

// Metrics reports answer_accuracy (fraction of keys right, 0 without an
// answer), facts_seen (fraction of asked facts whose page was read),
// pages_read, rereads (reads of a page already read) and opens.
func (e *Env) Metrics() map[string]float64 {
	rereads, read := 0, 0
	for _, n := range e.reads {
		read++
		rereads += n - 1
	}
	return map[string]float64{
		"answer_accuracy": e.acc,
		"facts_seen":      float64(len(e.seen)) / float64(len(e.keys)),
		"pages_read":      float64(read),
		"rereads":         float64(rereads),
		"opens":           float64(e.opens),
	}
}

// ParseConfig reads knobs "files=5,pages=3,facts=4,keys=32,distractors=6,noise_lines=5,partial_credit=true,spread=true"
// (any subset, in any order) over DefaultConfig; "" gives the default. The knobs are Config's YAML
// keys, so a suite has one name per knob on the command line and in a config file; the former
// short names noise and partial are refused with the new name.
func ParseConfig(spec string) (Config, error) {
	c := DefaultConfig()
	if strings.TrimSpace(spec) == "" {
		return c, nil
	}
	fields := reflect.ValueOf(&c).Elem()
	var names []string
	byName := map[string]reflect.Value{}
	for i := range fields.NumField() {
		name := fields.Type().Field(i).Tag.Get("yaml")
		names = append(names, name)
		byName[name] = fields.Field(i)
	}
	renamed := map[string]string{"noise": "noise_lines", "partial": "partial_credit"}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return c, fmt.Errorf("vault knob %q: want name=value", kv)
		}
		f, found := byName[k]
		switch {
		case !found && renamed[k] != "":
			return c, fmt.Errorf("vault knob %q is now %q", k, renamed[k])
		case !found:
			return c, fmt.Errorf("vault knob %q: unknown (%s)", k, strings.Join(names, ", "))
		case f.Kind() == reflect.Bool:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return c, fmt.Errorf("vault knob %s=%q: %w", k, v, err)
			}
			f.SetBool(b)
		default:
			n, err := strconv.Atoi(v)
			if err != nil {
				return c, fmt.Errorf("vault knob %s=%q: not an integer", k, v)
			}
			f.SetInt(int64(n))
		}
	}
	return c, c.validate()
}

// FactWords returns the words of the suite's facts under cfg: every key a
// record can name and every value it can hold, so that synthetic
// "record k v" lines (recall pretraining) use exactly the suite's language.
func FactWords(cfg Config) (keys, values []string) {
	keys = slices.Clone(keyWords[:cfg.pool()])
	for v := 10; v < 100; v++ {
		values = append(values, strconv.Itoa(v))
	}
	return keys, values
}

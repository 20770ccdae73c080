package vault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/infer"
)

// Expert is the suite's scripted policy, an infer.Sampler: it decodes its
// prompt (the agent's current context), reconstructs what it knows from what
// is visible there only — the task, or the summary after a compaction, and
// the actions and observations since — and replies with the next action:
// read every page of every file in order, answer as soon as every asked key
// has a value (after the last page, unknown keys are answered "?"). Asked to
// summarise (the prompt ends with the Summary marker) it writes
//
//	goal: report the values of k1 k2 …. the vault has N files.
//	found: k1 v1 k2 ? …   (every asked key in task order; a known value kept with probability P, else ?)
//	at: file F page Q of M
//
// Summary and answer both list the asked keys in the task's order, each
// with the value the context shows for it or "?": the one skill a small
// transformer has to learn for both is a lookup — copy the next key of
// the goal line, then copy the value that follows the key elsewhere in the
// context — instead of sorting facts by when they were found and taking
// the set difference for the missing ones. The goal line restates the task
// word for word.
//
// With P = 1 it succeeds whenever the window and compactions suffice, and
// with P < 1 it fails when a dropped fact is not seen again. Every summary
// re-draws every fact it knows, so a fact found before the first of c
// compactions survives them all with probability P^c (a lossy summariser
// loses again each time it rewrites), unless the re-included steps show it
// again.
//
// It is a demonstrator, not a policy to do PPO on: its output is
// deterministic given the request's Seed and its log-probs are all 0.
type Expert struct {
	tok  agent.LocalTokenizer
	tmpl agent.Template
	// chat, when set, is the real model's chat format the contexts are laid
	// out in (NewChatExpert), with the loop's resume text and summary
	// instruction, which tell its turns apart.
	chat             *agent.ChatFormat
	resume, instruct string
	p                float64
	seed             int64
}

// NewExpert returns the scripted expert keeping each fact in a summary with
// probability p ∈ [0, 1]; seed is mixed with each request's Seed.
func NewExpert(tok agent.LocalTokenizer, tmpl agent.Template, p float64, seed int64) (*Expert, error) {
	if !(p >= 0 && p <= 1) {
		return nil, fmt.Errorf("expert: summary keep probability %v not in [0, 1]", p)
	}
	if tok == nil {
		return nil, errors.New("expert: tokenizer is required")
	}
	return &Expert{tok: tok, tmpl: tmpl, p: p, seed: seed}, nil
}

// NewChatExpert is NewExpert for contexts a real model's chat format f
// lays out: the agent loop's resume text and summary instruction (its
// agent.Config) mark the turn that carries a summary and the request for
// one, which chat templates write as ordinary user turns.
func NewChatExpert(tok agent.LocalTokenizer, f *agent.ChatFormat, resumeText, summaryInstruction string, p float64, seed int64) (*Expert, error) {
	e, err := NewExpert(tok, agent.Template{}, p, seed)
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, errors.New("expert: a chat format is required")
	}
	if strings.TrimSpace(resumeText) == "" || strings.TrimSpace(summaryInstruction) == "" {
		return nil, errors.New("expert: a chat format's turns are told apart by the resume text and the summary instruction; both are required")
	}
	e.chat, e.resume, e.instruct = f, strings.TrimSpace(resumeText), strings.TrimSpace(summaryInstruction)
	return e, nil
}

// knowledge is what the expert can see in its context.
type knowledge struct {
	keys   []string
	files  int
	found  map[string]string
	order  []string    // keys of found, in the order they were found
	file   int         // the file being worked on (0: none yet)
	page   int         // the last page read of file
	pages  map[int]int // page counts learned
	goalOK bool
}

var (
	taskRE    = regexp.MustCompile(`report the values of ([a-z ]+)\. the vault has (\d+) files`)
	goalRE    = regexp.MustCompile(`goal: report the values of ([a-z ]+)\. the vault has (\d+) files`)
	atRE      = regexp.MustCompile(`at: file (\d+)(?: page (\d+) of (\d+))?`)
	openObsRE = regexp.MustCompile(`^file (\d+) has (\d+) pages`)
	readObsRE = regexp.MustCompile(`^file (\d+) page (\d+)`)
)

// omitted is part of the agent's truncation marker: lines containing it
// were cut and are not trusted.
const omitted = "tokens omitted]"

func (k *knowledge) fromTask(text string) {
	if m := taskRE.FindStringSubmatch(text); m != nil {
		k.keys = strings.Fields(m[1])
		k.files, _ = strconv.Atoi(m[2])
		k.goalOK = true
	}
}

// fromSummary replaces everything known by what the summary says: after a
// compaction the summary is all that is left of the earlier context.
func (k *knowledge) fromSummary(text string) {
	*k = knowledge{found: map[string]string{}, pages: map[int]int{}}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "goal:"):
			if m := goalRE.FindStringSubmatch(line); m != nil {
				k.keys = strings.Fields(m[1])
				k.files, _ = strconv.Atoi(m[2])
				k.goalOK = true
			}
		case strings.HasPrefix(line, "found:"):
			for _, f := range facts(line) {
				k.add(f)
			}
		case strings.HasPrefix(line, "at:"):
			if m := atRE.FindStringSubmatch(line); m != nil {
				k.file, _ = strconv.Atoi(m[1])
				if m[2] != "" {
					k.page, _ = strconv.Atoi(m[2])
					n, _ := strconv.Atoi(m[3])
					k.pages[k.file] = n
				}
			}
		}
	}
}

func (k *knowledge) asked(key string) bool { return slices.Contains(k.keys, key) }

// add records a fact; a key seen again keeps its place and takes the new value.
func (k *knowledge) add(f Fact) {
	if _, ok := k.found[f.Key]; !ok {
		k.order = append(k.order, f.Key)
	}
	k.found[f.Key] = f.Value
}

func (k *knowledge) observe(action, obs string) {
	a, err := ParseAction(action)
	if err != nil {
		return
	}
	switch a.Verb {
	case Open:
		if m := openObsRE.FindStringSubmatch(obs); m != nil {
			f, _ := strconv.Atoi(m[1])
			n, _ := strconv.Atoi(m[2])
			k.pages[f] = n
			if f != k.file {
				k.file, k.page = f, 0
			}
		}
	case Read:
		if m := readObsRE.FindStringSubmatch(obs); m != nil {
			f, _ := strconv.Atoi(m[1])
			p, _ := strconv.Atoi(m[2])
			k.file, k.page = f, p
		}
		for _, line := range strings.Split(obs, "\n") {
			if !strings.HasPrefix(line, "record ") || strings.Contains(line, omitted) {
				continue
			}
			for _, f := range facts(line) {
				if k.asked(f.Key) {
					k.add(f)
				}
			}
		}
	}
}

// next is the expert's action given what it knows.
func (k *knowledge) next() string {
	complete := k.goalOK
	for _, key := range k.keys {
		if _, ok := k.found[key]; !ok {
			complete = false
		}
	}
	switch {
	case complete:
		return k.answer()
	case k.file == 0:
		return "open 1"
	case k.pages[k.file] == 0:
		return fmt.Sprintf("open %d", k.file)
	case k.page < k.pages[k.file]:
		return fmt.Sprintf("read %d %d", k.file, k.page+1)
	case k.file < k.files:
		return fmt.Sprintf("open %d", k.file+1)
	}
	return k.answer()
}

func (k *knowledge) answer() string {
	parts := []string{"answer"}
	for _, key := range k.keys {
		v, ok := k.found[key]
		if !ok {
			v = "?"
		}
		parts = append(parts, Fact{key, v}.String())
	}
	if len(parts) == 1 {
		parts = append(parts, "unknown ?")
	}
	return strings.Join(parts, " ")
}

// summary writes the summary, keeping each fact with probability p.
func (k *knowledge) summary(rng *rand.Rand, p float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "goal: report the values of %s. the vault has %d files.\nfound:", strings.Join(k.keys, " "), k.files)
	for _, key := range k.keys {
		v, ok := k.found[key]
		// One draw per asked key, known or not, so that which facts a
		// summary keeps does not depend on which others were found.
		if keep := rng.Float64() < p; !ok || !keep {
			v = "?"
		}
		fmt.Fprintf(&b, " %s", Fact{key, v})
	}
	switch {
	case k.file == 0:
		b.WriteString("\nat: start")
	case k.pages[k.file] == 0:
		fmt.Fprintf(&b, "\nat: file %d", k.file)
	default:
		fmt.Fprintf(&b, "\nat: file %d page %d of %d", k.file, k.page, k.pages[k.file])
	}
	return b.String()
}

// read reconstructs the expert's knowledge from a context and reports
// whether the open turn at its end asks for a summary.
func (e *Expert) read(prompt []int) (k knowledge, summarise bool, err error) {
	if e.chat != nil {
		return e.readChat(prompt)
	}
	turns := e.tmpl.Split(prompt)
	if len(turns) == 0 {
		return k, false, errors.New("expert: empty prompt")
	}
	last := turns[len(turns)-1]
	switch {
	case last.Closed || len(last.IDs) != 0:
		return k, false, errors.New("expert: prompt does not end with an open marker")
	case last.Marker == e.tmpl.Summary:
		summarise = true
	case last.Marker != e.tmpl.Assistant:
		return k, false, fmt.Errorf("expert: prompt ends with marker %d, want assistant or summary", last.Marker)
	}
	k = knowledge{found: map[string]string{}, pages: map[int]int{}}
	action := ""
	for _, t := range turns[:len(turns)-1] {
		text := e.tok.Decode(t.IDs)
		switch t.Marker {
		case e.tmpl.User:
			if !k.goalOK {
				k.fromTask(text)
			}
		case e.tmpl.Summary:
			k.fromSummary(text)
		case e.tmpl.Assistant:
			action = text
		case e.tmpl.Observation:
			k.observe(action, text)
			action = ""
		}
	}
	return k, summarise, nil
}

// readChat is read for a chat format's context: the system turn, then the
// task (or the resume turn: resume text, then the summary), then actions
// (assistant turns) each followed by its observation (a user or tool
// turn), a summary request being the user turn that holds the summary
// instruction.
func (e *Expert) readChat(prompt []int) (k knowledge, summarise bool, err error) {
	turns := e.chat.Turns(prompt)
	if len(turns) == 0 {
		return k, false, errors.New("expert: empty prompt")
	}
	last := turns[len(turns)-1]
	if !last.Open || last.Role != "assistant" || last.Content != "" {
		return k, false, errors.New("expert: prompt does not end with the assistant's generation prompt")
	}
	k = knowledge{found: map[string]string{}, pages: map[int]int{}}
	action, first := "", true
	for i, t := range turns[:len(turns)-1] {
		text := strings.TrimSpace(t.Content)
		switch {
		case t.Role == "system":
		case t.Role == "assistant":
			action = text
		case text == e.instruct:
			summarise = i == len(turns)-2
		case first:
			if rest, ok := strings.CutPrefix(text, e.resume); ok {
				k.fromSummary(strings.TrimSpace(rest))
			} else {
				k.fromTask(text)
			}
			first = false
		default:
			k.observe(action, text)
			action = ""
		}
	}
	return k, summarise, nil
}

// Sample implements infer.Sampler.
func (e *Expert) Sample(ctx context.Context, req infer.Request) (infer.Completion, error) {
	if err := ctx.Err(); err != nil {
		return infer.Completion{}, err
	}
	k, summarise, err := e.read(req.Prompt)
	if err != nil {
		return infer.Completion{}, err
	}
	var text string
	if summarise {
		rng := rand.New(rand.NewPCG(uint64(req.Seed), uint64(e.seed)))
		text = k.summary(rng, e.p)
	} else {
		text = k.next()
	}
	ids := e.tok.Encode(text)
	c := infer.Completion{FinishReason: infer.FinishStop}
	if len(req.Stop) > 0 {
		ids = append(ids, req.Stop[0])
	}
	if len(ids) > req.MaxTokens {
		ids = ids[:max(req.MaxTokens, 0)]
		c.FinishReason = infer.FinishLength
	}
	c.Tokens = ids
	c.Logprobs = make([]float64, len(ids))
	return c, nil
}

package tasks

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/tokenizer"
)

// Suite is a set of tasks looked up by id: the tasks a Source loaded
// (Named), or a generated suite byName on the command line as NAME[:KNOBS]
// (OpenSuite; the built-in vault suite, whose ids are seeds). `compactrl
// serve` answers each request's task_id through one.
type Suite interface {
	// Has reports whether id names one of the suite's tasks.
	Has(id string) bool
	// Env makes a fresh environment for one episode of task id.
	Env(id string) (agent.Environment, error)
}

// Optional capabilities of a generated Suite (see the package doc): the
// command line asks for each with a type assertion and says which is
// missing when a flag needs it.
type (
	// SystemPrompter is a Suite whose tasks come with their own system
	// prompt (the agent's default unless the command line gives one).
	SystemPrompter interface {
		SystemPrompt() string
	}
	// SeedSplitter is a Suite whose task ids are seeds (decimal integers)
	// divided into named ranges, such as train and test (`compactrl
	// rollout --split NAME` plays consecutive seeds of one).
	SeedSplitter interface {
		// Split returns the seeds [start, end) of the range named name; its
		// error names the ranges there are.
		Split(name string) (start, end int64, err error)
	}
	// Scripter is a Suite with a scripted policy: a program that plays its
	// tasks without a model (`compactrl rollout --policy scripted[:OPTS]`).
	Scripter interface {
		// Scripted returns the policy with options opts ("" for its
		// defaults), speaking tok and tmpl; its error names a bad option.
		Scripted(opts string, tok agent.LocalTokenizer, tmpl agent.Template) (infer.Sampler, error)
	}
	// Lister is a Suite of finitely many tasks (the loaded ones: Named).
	Lister interface {
		// IDs returns every task id, sorted.
		IDs() []string
	}
	// DefaultTokenizer is a Suite with a tokenizer of its own, the one a
	// policy speaks when the command line names none.
	DefaultTokenizer interface {
		// DefaultTokenizer returns the tokenizer and its chat template.
		DefaultTokenizer() (*tokenizer.Tokenizer, agent.Template, error)
	}
)

// byName is Named's Suite.
type byName map[string]Task

// Named is the Suite of loaded tasks, by Name.
func Named(ts []Task) Suite {
	m := byName{}
	for _, t := range ts {
		m[t.Name] = t
	}
	return m
}

func (m byName) Has(id string) bool { _, ok := m[id]; return ok }

func (m byName) IDs() []string { return slices.Sorted(maps.Keys(m)) }

func (m byName) Env(id string) (agent.Environment, error) {
	t, ok := m[id]
	if !ok {
		return nil, &UnknownTaskError{ID: id}
	}
	return t.New(false), nil
}

// OpenFunc opens a generated suite with the knobs after NAME: in
// NAME[:KNOBS] ("" without them).
type OpenFunc func(knobs string) (Suite, error)

var suites = map[string]OpenFunc{}

// RegisterSuite makes a generated suite available under name: OpenSuite
// opens NAME[:KNOBS] with open. It panics if name is empty, contains ':'
// or is taken, or open is nil (a programming error, found at start-up).
func RegisterSuite(name string, open OpenFunc) {
	mu.Lock()
	defer mu.Unlock()
	switch {
	case name == "" || strings.Contains(name, ":") || open == nil:
		panic("tasks: RegisterSuite needs a name without ':' and an open function")
	case suites[name] != nil:
		panic("tasks: suite " + name + " registered twice")
	}
	suites[name] = open
}

// SuiteNames are the registered generated suites, sorted.
func SuiteNames() []string {
	mu.RLock()
	defer mu.RUnlock()
	return slices.Sorted(maps.Keys(suites))
}

// OpenSuite opens spec, NAME[:KNOBS], when NAME is a registered suite; ok
// is false (and the caller reads spec as a path, Open, or lists
// SuiteNames) when it is not. The error of bad knobs names the suite.
func OpenSuite(spec string) (name string, s Suite, ok bool, err error) {
	name, knobs, _ := strings.Cut(spec, ":")
	mu.RLock()
	open := suites[name]
	mu.RUnlock()
	if open == nil {
		return name, nil, false, nil
	}
	if s, err = open(knobs); err != nil {
		return name, nil, true, fmt.Errorf("%s: %w", name, err)
	}
	return name, s, true, nil
}

// UnknownTaskError is a task id a Suite does not have.
type UnknownTaskError struct {
	ID  string
	Why string // what is wrong with it, if more than that it is unknown
}

func (e *UnknownTaskError) Error() string {
	if e.Why != "" {
		return fmt.Sprintf("unknown task %q: %s", e.ID, e.Why)
	}
	return fmt.Sprintf("unknown task %q", e.ID)
}

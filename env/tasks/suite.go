package tasks

import (
	"fmt"
	"strings"

	"github.com/compactrl/compactrl/agent"
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

// SystemPrompter is a Suite whose tasks come with their own system prompt
// (the agent's default unless the command line gives one).
type SystemPrompter interface {
	SystemPrompt() string
}

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

// OpenSuite opens spec, NAME[:KNOBS], when NAME is a registered suite; ok
// is false (and the caller reads spec as a path, Open) when it is not. The
// error of bad knobs names the suite.
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

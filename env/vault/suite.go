package vault

import (
	"strconv"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/tasks"
)

// The vault suite is a generated task set (env/tasks): `--tasks
// vault[:knobs]` (ParseConfig's knobs), each task id a seed.
func init() { tasks.RegisterSuite("vault", openSuite) }

// suite is the vault suite of one configuration as a tasks.Suite.
type suite struct{ cfg Config }

func openSuite(knobs string) (tasks.Suite, error) {
	c, err := ParseConfig(knobs)
	if err != nil {
		return nil, err
	}
	return suite{c}, nil
}

// seed is the seed task id names: a non-negative integer.
func (suite) seed(id string) (int64, bool) {
	s, err := strconv.ParseInt(id, 10, 64)
	return s, err == nil && s >= 0
}

func (s suite) Has(id string) bool { _, ok := s.seed(id); return ok }

func (s suite) Env(id string) (agent.Environment, error) {
	seed, ok := s.seed(id)
	if !ok {
		return nil, &tasks.UnknownTaskError{ID: id, Why: "not a seed"}
	}
	return New(s.cfg, seed)
}

// SystemPrompt is the suite's system prompt (tasks.SystemPrompter).
func (suite) SystemPrompt() string { return SystemPrompt }

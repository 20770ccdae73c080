package vault

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/env/tasks"
	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/tokenizer"
)

// The vault suite is a generated task set (env/tasks): `--tasks
// vault[:knobs]` of serve and `--env vault[:knobs]` of rollout
// (ParseConfig's knobs), each task id a seed. It has every optional
// capability of a tasks.Suite: its system prompt, the train/test seed
// split, the scripted Expert and its default tokenizer.
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

// NewSuite is the suite of configuration c, as --env vault:KNOBS opens
// it (a run config's suite section gives c as YAML).
func NewSuite(c Config) (tasks.Suite, error) {
	if err := c.Validate(); err != nil {
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

// Split is the seed range named train or test (tasks.SeedSplitter).
func (suite) Split(name string) (start, end int64, err error) {
	r, err := Split(name)
	return r.Start, r.End, err
}

// Scripted is the Expert (tasks.Scripter) with options "p=P,seed=S": it
// keeps each fact in a summary with probability P (default 1) and mixes
// S (default 0) into each request's seed.
func (suite) Scripted(opts string, tok agent.LocalTokenizer, tmpl agent.Template) (infer.Sampler, error) {
	p, seed := 1.0, int64(0)
	if opts != "" {
		for _, kv := range strings.Split(opts, ",") {
			k, v, ok := strings.Cut(kv, "=")
			var err error
			switch {
			case !ok:
				err = fmt.Errorf("%q: want name=value", kv)
			case k == "p":
				p, err = strconv.ParseFloat(v, 64)
			case k == "seed":
				seed, err = strconv.ParseInt(v, 10, 64)
			default:
				err = fmt.Errorf("unknown option %q (p, seed)", k)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	ex, err := NewExpert(tok, tmpl, p, seed)
	if err != nil {
		return nil, err
	}
	return ex, nil
}

// DefaultTokenizer is the suite's built-in BPE (tasks.DefaultTokenizer;
// the package function DefaultTokenizer).
func (suite) DefaultTokenizer() (*tokenizer.Tokenizer, agent.Template, error) {
	return DefaultTokenizer()
}

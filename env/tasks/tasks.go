// Package tasks is the registry of task sources: the kinds of task sets
// that `compactrl eval` and `compactrl serve` read from --tasks (a Harbor
// task directory, a SWE-bench instances JSONL, …). Each environment
// package registers its source itself; the command line only turns its
// flags into Options and calls Open, and knows no environment type.
//
// A source turns a path into named Tasks, each of which makes a fresh
// agent.Environment per episode, and Skipped tasks with the reason (a task
// that does not load, or cannot run with this runner). What an environment
// can do beyond agent.Environment is asked through the named interfaces
// here: Oracle (play the task's own solution), RewardNoter (why a verifier
// that ran gave no reward) and io.Closer (free its sandbox and workspace
// after the episode), plus agent.MetricsReporter.
//
// # Adding an environment
//
// One new package and one registration line. The package implements
// agent.Environment (and any of the optional interfaces) and registers a
// loader in an init function:
//
//	package mysuite
//
//	func init() { tasks.Register("mysuite", isSuiteFile, tasks.SourceFunc(load)) }
//
//	// isSuiteFile says whether --tasks names one of this suite's files.
//	func isSuiteFile(path string, fi fs.FileInfo) tasks.Match {
//		if !fi.IsDir() && strings.HasSuffix(path, ".mysuite") {
//			return tasks.Yes
//		}
//		return tasks.No
//	}
//
//	func load(ctx context.Context, path string, o tasks.Options) ([]tasks.Task, []tasks.Skipped, error) {
//		specs, err := readSpecs(path)
//		if err != nil {
//			return nil, nil, err
//		}
//		var ts []tasks.Task
//		for _, s := range specs {
//			ts = append(ts, tasks.Task{Name: s.ID, New: func(oracle bool) agent.Environment {
//				return newEnv(s, o.Runner, o.Limits, o.Root())
//			}})
//		}
//		return ts, nil, nil
//	}
//
// and the command line links it in with a blank import (cmd/compactrl's
// sources.go): `import _ "github.com/compactrl/compactrl/env/mysuite"`.
//
// # An environment's own settings
//
// A setting only one source understands (SWE-bench's --repos, Harbor's
// --reward-key) is registered by that source, in the same package: the
// command line offers a flag for every registered Setting, checks the
// values with each source's CheckFunc before loading, and hands them all
// to every source in Options.Settings. Giving mysuite a --mysuite-level
// flag is one more file in its package, settings.go:
//
//	package mysuite
//
//	const settingLevel = "mysuite-level"
//
//	func init() {
//		tasks.RegisterSettings("mysuite", checkSettings,
//			tasks.Setting{Name: settingLevel, Default: "easy", Usage: "mysuite: easy or hard"})
//	}
//
//	func checkSettings(s tasks.Settings) error {
//		if l := s.Get(settingLevel); l != "easy" && l != "hard" {
//			return fmt.Errorf("--%s %q: want easy or hard", settingLevel, l)
//		}
//		return nil
//	}
//
// and load reads it with o.Settings.Get(settingLevel); nothing outside the
// package changes (env/harbor's and env/swebench's settings.go are the
// real ones).
// A source says Yes to the paths that are surely its own and Fallback to
// those it would read when no source says Yes (env/harbor: any directory,
// env/swebench: any file), so a new source's files or directories go to
// it; Open refuses a path that two sources claim at the same level.
//
// # Adding a generated suite
//
// A suite whose tasks are made rather than read (the built-in vault: each
// task id is a seed) is one package and one registration line too; serve
// takes it as --tasks NAME[:KNOBS] and answers each task_id through its
// Suite, and `compactrl rollout` takes it as --env NAME[:KNOBS]:
//
//	func init() { tasks.RegisterSuite("mysuite", open) }
//
//	func open(knobs string) (tasks.Suite, error) {
//		cfg, err := parseKnobs(knobs)
//		if err != nil {
//			return nil, err
//		}
//		return suite{cfg}, nil // Has(id) bool, Env(id) (agent.Environment, error)
//	}
//
// with the same blank import in cmd/compactrl's sources.go (env/vault's
// suite.go is the example). Named makes the tasks a Source loaded the same
// kind of Suite, so the command line has one code path for both.
//
// What a suite can do beyond Has and Env it says by implementing the
// optional interfaces of suite.go on the value open returns; the command
// line asks with a type assertion, and a flag that needs a capability the
// suite lacks is an error naming the interface:
//
//   - SystemPrompter: the suite's own system prompt, the agent's unless
//     the command line gives one (serve, rollout).
//   - SeedSplitter: the task ids are decimal seeds in named ranges, such as
//     train and test; rollout plays --episodes consecutive seeds of --split
//     (from its start + --seed), Env(strconv.FormatInt(seed, 10)) each.
//     rollout needs it.
//   - Scripter: a scripted policy that plays the tasks without a model,
//     with options of its own (vault's expert: p=P,seed=S); rollout's
//     --policy scripted[:OPTS] (its default).
//   - DefaultTokenizer: the tokenizer and template a policy speaks when
//     the command line names none (rollout without --tokenizer or a
//     checkpoint's tokenizer.json, recorded as NAME-default; show decodes
//     an episode with the tokenizer of the suite in its meta env).
//
// So the suite's settings — its knobs, splits, expert options and
// tokenizer — are defined once, in its package:
//
//	func (suite) SystemPrompt() string { return systemPrompt }
//
//	func (suite) Split(name string) (start, end int64, err error) {
//		switch name {
//		case "train":
//			return 0, 1_000_000, nil
//		case "test":
//			return 1_000_000, 2_000_000, nil
//		}
//		return 0, 0, fmt.Errorf("split %q: want train or test", name)
//	}
//
//	func (suite) Scripted(opts string, tok agent.LocalTokenizer, tmpl agent.Template) (infer.Sampler, error) {
//		return newExpert(opts, tok, tmpl)
//	}
//
//	func (suite) DefaultTokenizer() (*tokenizer.Tokenizer, agent.Template, error) {
//		return trainTokenizer()
//	}
package tasks

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/sandbox"
)

// Sandboxing are the settings every source's environments share: where
// episodes run and how long they may take. Each environment package's own
// Options embed it; a zero field takes the source's or the task's default.
type Sandboxing struct {
	// Runner is the host sandbox (bubblewrap) episodes run in when Engine
	// is nil (default sandbox.Bubblewrap{}).
	Runner sandbox.Runner
	// Engine, when set, is the container engine (podman, docker) episodes
	// run in: each source runs its tasks in containers of their images
	// (its DefaultImage for tasks that name none, --image), and Runner is
	// not used. The choice is this field's, never the Runner's type.
	Engine         *sandbox.Container
	Limits         sandbox.Limits // per sandbox; zero fields take the task's or the defaults
	CommandTimeout time.Duration  // one action, never past the agent's deadline; 0: the source's default
	AgentTimeout   time.Duration  // the agent phase; 0: the task's own, else the source's default
	// CacheDir, if set, is a host directory shared by every sandbox of
	// every episode (shelltask.CacheMounts): builds in later episodes reuse
	// earlier ones. Off by default, since one episode can then affect
	// another.
	CacheDir      string
	KeepWorkspace bool // leave episode workspaces on disk
	NoFormatHint  bool // do not append the action-format hint to each task
	// Network gives sandboxes the host's network where the task allows it.
	// Off by default.
	Network bool
}

// Options are what every source is given besides the path: the shared
// Sandboxing, the settings of the command line's task flags, and every
// source's own settings. A source ignores what does not concern it.
type Options struct {
	Sandboxing
	// Settings are the values of the sources' own settings
	// (RegisterSettings), by name; a source reads its own with Get.
	Settings Settings
	// WorkRoot returns the parent of episode workspaces when a Task makes
	// an environment (the run's directory exists only after loading); nil
	// or "": the system's temporary directory. See Root.
	WorkRoot func() string
	// Warn receives a task's load warnings (task.toml keys ignored,
	// deprecated fields), Info what loading did (image builds); nil: dropped.
	Warn, Info func(string)
}

// Root is WorkRoot's current answer ("" when there is none).
func (o Options) Root() string {
	if o.WorkRoot == nil {
		return ""
	}
	return o.WorkRoot()
}

// Warning passes msg to Warn, if set.
func (o Options) Warning(msg string) {
	if o.Warn != nil {
		o.Warn(msg)
	}
}

// Note passes msg to Info, if set.
func (o Options) Note(msg string) {
	if o.Info != nil {
		o.Info(msg)
	}
}

// Task is one runnable task.
type Task struct {
	Name string
	// New makes a fresh environment for one episode. oracle says the
	// episode will be played by the task's own solution (Oracle), so the
	// environment must make it available.
	New func(oracle bool) agent.Environment
}

// Skipped is a task that will not be played, and why (results.json's
// "skipped").
type Skipped struct {
	Task   string `json:"task"`
	Reason string `json:"reason"`
}

// Source loads one kind of task set.
type Source interface {
	// Load reads the tasks at path: those that can run with o.Runner, and
	// those skipped with the reason. An error means nothing could be read.
	// ctx bounds the loading, image builds and pulls included; when it
	// ends, Load returns its error.
	Load(ctx context.Context, path string, o Options) ([]Task, []Skipped, error)
}

// SourceFunc is a function as a Source.
type SourceFunc func(ctx context.Context, path string, o Options) ([]Task, []Skipped, error)

// Load calls f.
func (f SourceFunc) Load(ctx context.Context, path string, o Options) ([]Task, []Skipped, error) {
	return f(ctx, path, o)
}

// Detect says how surely a --tasks path (fi: its os.Stat) is a source's.
type Detect func(path string, fi fs.FileInfo) Match

// Match is a Detect's answer.
type Match int

const (
	No       Match = iota // not this source's
	Fallback              // this source reads such paths, if no source says Yes
	Yes                   // this source's
)

// Optional capabilities of an environment a Task makes.
type (
	// Oracle is an environment that can play its task's own solution
	// (Harbor's solution/solve.sh, a SWE-bench instance's gold patch) as
	// the episode's action after Reset.
	Oracle interface {
		Oracle(ctx context.Context) (agent.Step, error)
	}
	// RewardNoter is an environment that says why a verifier that ran gave
	// no valid reward (the episode scored 0); "" when there is nothing to say.
	RewardNoter interface {
		RewardNote() string
	}
	// Closer is an environment that must be closed after its episode,
	// which the agent loop may end without a submit (its sandbox and
	// workspace must not outlive it).
	Closer = io.Closer
)

type source struct {
	name   string
	detect Detect
	src    Source
}

var (
	mu      sync.RWMutex
	sources = map[string]source{}
)

// Register makes a task source available under name: Open gives it the
// paths detect accepts. It panics if name is empty or taken, or detect or
// s is nil (a programming error, found at start-up).
func Register(name string, detect Detect, s Source) {
	mu.Lock()
	defer mu.Unlock()
	switch {
	case name == "" || detect == nil || s == nil:
		panic("tasks: Register needs a name, a detect function and a source")
	case sources[name].src != nil:
		panic("tasks: source " + name + " registered twice")
	}
	sources[name] = source{name, detect, s}
}

// Names are the registered sources, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	return slices.Sorted(maps.Keys(sources))
}

// Open loads path with the source whose Detect says Yes to it, else the one
// that says Fallback, and returns that source's name with the tasks. The
// error of a path that cannot be read (os.Stat's), that no source takes,
// or that two take at the same level names it.
func Open(ctx context.Context, path string, o Options) (name string, ts []Task, skipped []Skipped, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", nil, nil, err
	}
	var match []source // the sources of the best answer
	best := Fallback
	mu.RLock()
	for _, n := range slices.Sorted(maps.Keys(sources)) {
		s := sources[n]
		switch m := s.detect(path, fi); {
		case m > best:
			best, match = m, []source{s}
		case m == best:
			match = append(match, s)
		}
	}
	mu.RUnlock()
	switch len(match) {
	case 0:
		return "", nil, nil, fmt.Errorf("%s: no task source takes it (registered: %s)", path, strings.Join(Names(), ", "))
	case 1:
	default:
		return "", nil, nil, fmt.Errorf("%s: task sources %s and %s both take it", path, match[0].name, match[1].name)
	}
	ts, skipped, err = match[0].src.Load(ctx, path, o)
	return match[0].name, ts, skipped, err
}

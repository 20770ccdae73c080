// Package harbor runs Harbor / Terminal-Bench 2.0 task directories as
// agent.Environments, confined by package sandbox.
//
// A task directory holds instruction.md (the task u), task.toml ([agent]
// timeout_sec, [verifier] timeout_sec and env, [environment] ...),
// environment/ (a Dockerfile and/or app/), tests/test.sh (the verifier) and
// solution/solve.sh (the oracle). Data flow of one episode:
//
//	Load(dir) → New(task, opts).Reset: fresh workspace, environment/app/ copied
//	to it, a sandbox session with the workspace at /app
//	→ Step(reply), shelltask.Shell.Step: shelltask.ParseAction → one command
//	in the persistent shell → observation
//	→ submit (or the agent's timeout): a fresh sandbox over the same /app with
//	tests/ at /tests (read-only) and /logs/verifier writable runs
//	`bash /tests/test.sh`; the reward is read from /logs/verifier/reward.txt
//	(a number) or reward.json; neither is an error (infra), never 0.
//
// Tasks that need their container image (environment/Dockerfile or
// docker_image, and no environment/app/) cannot run under bubblewrap: Reset
// returns ErrNeedsContainer unless Options.Runner is a sandbox.Container.
// This is the no-container convention of DESIGN.md §5.
package harbor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Task is a loaded task directory.
type Task struct {
	Name        string // the directory's base name
	Dir         string // absolute path
	Instruction string // instruction.md, canary lines stripped, trimmed ("" for a multi-step task)
	Config      Config
	// Warnings are what Harbor would ignore or has deprecated: keys its
	// task model does not have, legacy fields. Each names the file.
	Warnings []string
}

// DefaultAgentTimeout caps an agent whose task.toml sets no [agent]
// timeout_sec (Harbor then sets no limit; compactrl always has one).
// DefaultVerifierTimeout is Harbor's default [verifier] timeout_sec.
const (
	DefaultAgentTimeout    = 600 * time.Second
	DefaultVerifierTimeout = 600 * time.Second
)

// AgentTimeout is [agent] timeout_sec, else DefaultAgentTimeout.
func (t *Task) AgentTimeout() time.Duration {
	if t.Config.Agent.TimeoutSec > 0 {
		return time.Duration(t.Config.Agent.TimeoutSec * float64(time.Second))
	}
	return DefaultAgentTimeout
}

// VerifierTimeout is [verifier] timeout_sec (600 s unless the task says).
func (t *Task) VerifierTimeout() time.Duration {
	if t.Config.Verifier.TimeoutSec > 0 {
		return time.Duration(t.Config.Verifier.TimeoutSec * float64(time.Second))
	}
	return DefaultVerifierTimeout
}

// AppDir is the host directory copied into the workspace ("" if absent).
func (t *Task) AppDir() string {
	d := filepath.Join(t.Dir, "environment", "app")
	if fi, err := os.Stat(d); err == nil && fi.IsDir() {
		return d
	}
	return ""
}

// ErrNeedsContainer marks a task that only its container image can run.
var ErrNeedsContainer = errors.New("task needs its container image")

// NeedsContainer reports whether the task can only run in its image: it
// has environment/Dockerfile (or docker-compose) or a docker_image, and no
// environment/app/ to run from instead.
func (t *Task) NeedsContainer() (bool, string) {
	if t.AppDir() != "" {
		return false, ""
	}
	for _, f := range []string{"Dockerfile", "docker-compose.yaml", "docker-compose.yml"} {
		if _, err := os.Stat(filepath.Join(t.Dir, "environment", f)); err == nil {
			return true, "environment/" + f + " without environment/app/"
		}
	}
	if t.Config.Environment.DockerImage != "" {
		return true, "docker_image " + t.Config.Environment.DockerImage + " without environment/app/"
	}
	return false, ""
}

// Unsupported says why compactrl cannot run a task it loaded ("" when it
// can): multi-step tasks, Windows tasks, verifiers in their own
// environment.
func (t *Task) Unsupported() string {
	c := t.Config
	switch {
	case len(c.Steps) > 0:
		return fmt.Sprintf("multi-step task (%d steps): compactrl runs single-step tasks only", len(c.Steps))
	case c.Environment.OS != "linux":
		return fmt.Sprintf("[environment] os = %q: compactrl runs Linux tasks only", c.Environment.OS)
	case c.Verifier.EnvironmentMode == "separate" || c.Verifier.Environment != nil:
		return "the verifier runs in its own environment ([verifier] environment_mode = \"separate\"): not supported"
	}
	return ""
}

// canaryLine is a data-provenance marker Harbor strips from the start of
// instruction.md: an HTML or hash comment mentioning "canary".
var canaryLine = regexp.MustCompile(`(?i)^(<!--.*canary.*-->|#.*canary.*)$`)

// stripCanary is Harbor's strip_canary: leading canary lines and the
// blank lines after them go.
func stripCanary(text string) string {
	lines := strings.Split(text, "\n")
	i := 0
	for i < len(lines) && canaryLine.MatchString(strings.TrimFunc(lines[i], pySpace)) {
		i++
	}
	for i < len(lines) && strings.TrimFunc(lines[i], pySpace) == "" {
		i++
	}
	return strings.Join(lines[i:], "\n")
}

// ParseConfig reads task.toml's text as Harbor's TaskConfig does; file
// names it in errors and warnings.
func ParseConfig(file string, data []byte) (Config, []string, error) {
	var m map[string]any
	if _, err := toml.Decode(string(data), &m); err != nil {
		return Config{}, nil, fmt.Errorf("%s: %w", file, err)
	}
	d := &decoder{file: file}
	c, err := d.parseConfig(m)
	if err != nil {
		return Config{}, nil, err
	}
	return c, d.warnings, nil
}

// Load reads one task directory: task.toml (validated as Harbor does, plus
// compactrl's range limits), then for a single-step task instruction.md
// and tests/test.sh, for a multi-step one steps/NAME/instruction.md of
// each step. solution/ is optional (the oracle needs it).
func Load(dir string) (*Task, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("load task %s: %w", dir, err)
	}
	file := filepath.Join(abs, "task.toml")
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("load task %s: %w", dir, err)
	}
	cfg, warnings, err := ParseConfig(file, data)
	if err != nil {
		return nil, fmt.Errorf("load task %s: %w", dir, err)
	}
	t := &Task{Name: filepath.Base(abs), Dir: abs, Config: cfg, Warnings: warnings}
	if len(cfg.Steps) > 0 {
		for i, s := range cfg.Steps {
			p := filepath.Join(abs, "steps", s.Name, "instruction.md")
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("load task %s: steps[%d] %q: %w", dir, i, s.Name, err)
			}
		}
		return t, nil
	}
	ins, err := os.ReadFile(filepath.Join(abs, "instruction.md"))
	if err != nil {
		return nil, fmt.Errorf("load task %s: %w", dir, err)
	}
	t.Instruction = strings.TrimSpace(stripCanary(string(ins)))
	if t.Instruction == "" {
		return nil, fmt.Errorf("load task %s: instruction.md is empty", dir)
	}
	if t.Unsupported() == "" {
		if _, err := os.Stat(filepath.Join(abs, "tests", "test.sh")); err != nil {
			return nil, fmt.Errorf("load task %s: verifier: %w", dir, err)
		}
	}
	return t, nil
}

// IsTaskDir reports whether dir looks like one task (has task.toml or
// instruction.md).
func IsTaskDir(dir string) bool {
	for _, f := range []string{"task.toml", "instruction.md"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return true
		}
	}
	return false
}

// LoadFailure is a task directory that did not load, and why.
type LoadFailure struct {
	Task   string // the directory's base name
	Reason string // Load's error
}

// LoadAll loads dir itself if it is a task, else every immediate
// subdirectory that is one (symbolic links to directories included),
// sorted by name. A task that does not load is a LoadFailure, not an
// error: the error is for dir itself (unreadable, or no task in it).
func LoadAll(dir string) ([]*Task, []LoadFailure, error) {
	if IsTaskDir(dir) {
		t, err := Load(dir)
		if err != nil {
			abs, _ := filepath.Abs(dir)
			return nil, []LoadFailure{{Task: filepath.Base(abs), Reason: err.Error()}}, nil
		}
		return []*Task{t}, nil, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("load tasks %s: %w", dir, err)
	}
	var names []string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(p); err == nil && fi.IsDir() && IsTaskDir(p) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("load tasks %s: no task directories (with task.toml or instruction.md) found", dir)
	}
	var tasks []*Task
	var failed []LoadFailure
	for _, n := range names {
		t, err := Load(filepath.Join(dir, n))
		if err != nil {
			failed = append(failed, LoadFailure{Task: n, Reason: err.Error()})
			continue
		}
		tasks = append(tasks, t)
	}
	return tasks, failed, nil
}

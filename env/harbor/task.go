// Package harbor runs Harbor / Terminal-Bench 2.0 task directories as
// agent.Environments, confined by package sandbox.
//
// A task directory holds task.toml, instruction.md (the task),
// environment/ (a Dockerfile and its build context, and/or app/),
// tests/test.sh (the verifier) and solution/solve.sh (the oracle). An
// episode runs in one of two ways, its backend (backend.go), which New
// picks once from Options: Engine set, or not.
//
// With a container engine (Options.Engine: podman, docker) it runs as
// Harbor runs it (boxBackend, container.go):
//
//	ImageRef: [environment] docker_image, or environment/Dockerfile built
//	(environment/ as context, cached by its content hash)
//	→ Reset: one container for the episode (the image's WORKDIR, USER, ENV,
//	[environment] workdir/env/limits/network; with
//	environment/docker-compose.yaml, the compose project's "main" service,
//	the task's other services beside it: sandbox.Container.ComposeUp),
//	two guarded tmpfs directories
//	bound at /tests and /logs/verifier (sandbox.GuardedDir: closed to every
//	process), the agent's persistent shell exec'd in it
//	→ Step: shelltask.Shell.Step, one command at a time in that shell
//	→ submit (or the agent's timeout): the agent's shell ends, what it left
//	runs on; tests/ is copied into /tests, and /tests/test.sh runs in the
//	same container with [verifier.env], its session alone admitted to the
//	guarded directories (sandbox.Box.RunGuarded: every other open refused,
//	every other change seen); then they are sealed, what outlived test.sh
//	or still holds them is checked, the container's processes are killed,
//	and ReadRewards reads /logs/verifier.
//
// On the host (hostBackend: Options.Runner, bubblewrap by default; tasks
// that ship environment/app/) the
// agent's sandbox has a fresh workspace with app/ at /app; at submit it is
// closed with every process in it dead, and a fresh sandbox over the same
// /app, with a writable copy of tests/ at /tests, runs test.sh and counts
// what outlived it. A task with only a Dockerfile or docker_image cannot
// run there: Reset returns ErrNeedsContainer.
//
// Either way the backend reports what the verifier's run saw and
// Env.verify alone turns it into the verdict: one the agent's doing can
// change scores 0 with a note (RewardNote), and a verifier that cannot run
// on its own account is ErrVerifier (the episode's status verifier_error).
//
// # task.toml
//
// Load reads task.toml as Harbor 0.26's TaskConfig (pydantic, lax mode)
// does: the same sections and fields ([task], [metadata], [verifier] with
// [verifier.environment] and [[verifier.collect]], [agent], [environment]
// with tpu, healthcheck and [[environment.mcp_servers]], [solution],
// artifacts, [[steps]], multi_step_reward_strategy, source,
// schema_version), the same defaults (verifier and build timeouts 600 s,
// os "linux", network_mode "public"), the same coercions (memory_mb =
// "2048" or 2.0 or true; cpus = "1.5"; allow_internet = "no") and the same
// rejections (memory_mb = 2.5, a [task] name not org/name, allowed_hosts
// without network_mode = "allowlist", ...), each an error naming the file
// and the field's dotted path. Harbor's migrations apply: the top-level
// `version` is schema_version, [environment] memory/storage ("4G") become
// memory_mb/storage_mb, allow_internet becomes network_mode. A key
// Harbor's model does not have is ignored by Harbor: here it is a warning
// in Task.Warnings, as are the deprecated fields. Config's optional
// scalars are zero where Harbor's are None. testdata/harbor-parity holds
// a corpus of task.toml and reward files with Harbor's recorded answers
// (golden.json); the parity tests compare them with this package, and
// with Harbor itself where its venv exists (setup.sh).
//
// On top of Harbor's model compactrl refuses, at load, values its hosts
// cannot honour instead of wrapping or clamping them: any duration
// (timeout_sec, build_timeout_sec, healthcheck and collect times) must be
// finite, ≥ 0 and at most MaxTimeoutSec (7 days), and [agent]/[verifier]
// timeout_sec > 0; memory_mb and storage_mb at most MaxMemoryMB (1 TiB);
// cpus at most MaxCPUs (1024); gpus at most MaxGPUs (1024); healthcheck
// retries at most MaxRetries; none of them negative. Harbor sets no agent
// time limit when [agent] timeout_sec is absent; compactrl then uses
// DefaultAgentTimeout (600 s).
//
// Load also loads multi-step tasks ([[steps]], each with
// steps/NAME/instruction.md), Windows tasks and tasks whose verifier runs
// in its own environment; compactrl runs none of them, and
// Task.Unsupported says why. LoadAll loads every task of a directory
// (symbolic links to task directories included) and lists the ones that
// do not load with the reason, without giving up on the others.
//
// [environment] network_mode "allowlist" cannot be enforced by the
// sandboxes here (they share the host's network or have none): such a
// task runs without network (EnvironmentConfig.AllowInternet is false).
// Env tables may hold ${VAR} and ${VAR:-default} templates, which Harbor
// resolves from the host when it runs the task: ResolveEnv does the same.
//
// # Rewards
//
// ReadRewards reads the verifier's rewards as Harbor's Verifier does:
// reward.json if it exists (an object of finite numbers; true and false
// count as 1 and 0, as Python's bool is an int), else reward.txt (one
// number as Python's float() reads it); an empty or unparsable file is an
// error. Stricter than Harbor: both files present is ErrTwoRewardFiles
// (the episode scores 0 with a note), and neither file is ErrNoReward.
// Primary is the scalar Harbor's jobs report: the "reward" key, else the
// only key.
//
// # Task source
//
// The package registers itself with env/tasks as the source "harbor"
// (source.go): `compactrl eval --tasks DIR` and `serve` load a directory
// through LoadTasks, and the Env's Oracle, RewardNote and Close are the
// optional capabilities tasks.Oracle, tasks.RewardNoter and tasks.Closer.
package harbor

import (
	"errors"
	"fmt"
	"github.com/compactrl/compactrl/agent"
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
	insPath := filepath.Join(abs, "instruction.md")
	if fi, err := os.Stat(insPath); err != nil {
		return nil, fmt.Errorf("load task %s: %w", dir, err)
	} else if fi.Size() > agent.MaxTaskBytes {
		return nil, fmt.Errorf("load task %s: instruction.md has %d bytes, more than the %d a task may have (agent.MaxTaskBytes)", dir, fi.Size(), agent.MaxTaskBytes)
	}
	ins, err := os.ReadFile(insPath)
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

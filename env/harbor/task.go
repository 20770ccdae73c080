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
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Config is task.toml. Unknown keys inside the known sections are kept in
// Extra (by dotted key); an unknown section is an error (see knownSections).
type Config struct {
	Version       string         `toml:"version"`
	SchemaVersion string         `toml:"schema_version"`
	Metadata      map[string]any `toml:"metadata"`
	Agent         struct {
		TimeoutSec float64 `toml:"timeout_sec"`
		User       string  `toml:"user"`
	} `toml:"agent"`
	Verifier struct {
		TimeoutSec float64           `toml:"timeout_sec"`
		Env        map[string]string `toml:"env"`
		User       string            `toml:"user"`
	} `toml:"verifier"`
	Environment EnvironmentConfig `toml:"environment"`
	Solution    struct {
		Env map[string]string `toml:"env"`
	} `toml:"solution"`
	Extra []string `toml:"-"`
}

// knownSections are task.toml's top-level keys in Harbor's task format. A
// table under any other name is most likely a misspelt one ([verifer]) whose
// settings would silently not apply.
var knownSections = map[string]bool{
	"version": true, "schema_version": true, "metadata": true,
	"agent": true, "verifier": true, "environment": true, "solution": true, "task": true,
}

// EnvironmentConfig is task.toml's [environment].
type EnvironmentConfig struct {
	DockerImage     string            `toml:"docker_image"`
	BuildTimeoutSec float64           `toml:"build_timeout_sec"`
	CPUs            Number            `toml:"cpus"`
	Memory          string            `toml:"memory"` // e.g. "4G"
	MemoryMB        Number            `toml:"memory_mb"`
	Storage         string            `toml:"storage"`
	StorageMB       Number            `toml:"storage_mb"`
	GPUs            Number            `toml:"gpus"`
	AllowInternet   bool              `toml:"allow_internet"` // true unless the task says false
	Workdir         string            `toml:"workdir"`
	Env             map[string]string `toml:"env"`
}

// Number accepts a TOML integer, float or numeric string ("2", "1.5").
type Number float64

// UnmarshalTOML implements toml.Unmarshaler.
func (n *Number) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		*n = Number(x)
	case float64:
		*n = Number(x)
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return fmt.Errorf("not a number: %q", x)
		}
		*n = Number(f)
	default:
		return fmt.Errorf("not a number: %v", v)
	}
	return nil
}

// StorageBytes returns [environment]'s storage (storage_mb, or storage
// such as "10G"), 0 when unset.
func (e EnvironmentConfig) StorageBytes() (int64, error) {
	if e.StorageMB > 0 {
		return int64(e.StorageMB) << 20, nil
	}
	return parseSize(e.Storage)
}

// MemoryBytes returns [environment]'s memory (memory_mb, or memory such as
// "4G", "512M", "1024"(MB)), 0 when unset.
func (e EnvironmentConfig) MemoryBytes() (int64, error) {
	if e.MemoryMB > 0 {
		return int64(e.MemoryMB) << 20, nil
	}
	return parseSize(e.Memory)
}

func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	if s == "" {
		return 0, nil
	}
	mult := float64(1 << 20) // bare numbers are MB, as in Harbor's memory_mb
	for _, u := range []struct {
		suf string
		m   float64
	}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if strings.HasSuffix(s, u.suf) {
			s, mult = strings.TrimSuffix(s, u.suf), u.m
			break
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return int64(f * mult), nil
}

// Task is a loaded task directory.
type Task struct {
	Name        string // the directory's base name
	Dir         string // absolute path
	Instruction string
	Config      Config
}

// Default timeouts when task.toml leaves them out.
const (
	DefaultAgentTimeout    = 600 * time.Second
	DefaultVerifierTimeout = 300 * time.Second
)

// AgentTimeout is [agent] timeout_sec.
func (t *Task) AgentTimeout() time.Duration {
	if t.Config.Agent.TimeoutSec > 0 {
		return time.Duration(t.Config.Agent.TimeoutSec * float64(time.Second))
	}
	return DefaultAgentTimeout
}

// VerifierTimeout is [verifier] timeout_sec.
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

// Load reads one task directory. instruction.md, task.toml and
// tests/test.sh are required; solution/ is optional (the oracle needs it).
func Load(dir string) (*Task, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("load task %s: %w", dir, err)
	}
	ins, err := os.ReadFile(filepath.Join(abs, "instruction.md"))
	if err != nil {
		return nil, fmt.Errorf("load task %s: %w", dir, err)
	}
	t := &Task{Name: filepath.Base(abs), Dir: abs, Instruction: strings.TrimSpace(string(ins))}
	t.Config.Environment.AllowInternet = true // Harbor's default
	if t.Instruction == "" {
		return nil, fmt.Errorf("load task %s: instruction.md is empty", dir)
	}
	md, err := toml.DecodeFile(filepath.Join(abs, "task.toml"), &t.Config)
	if err != nil {
		return nil, fmt.Errorf("load task %s: task.toml: %w", dir, err)
	}
	toml := filepath.Join(abs, "task.toml")
	for _, k := range md.Undecoded() {
		if len(k) > 0 && !knownSections[k[0]] {
			return nil, fmt.Errorf("load task %s: %s: unknown section or key %q (known: agent, environment, metadata, solution, verifier, version, schema_version)", dir, toml, k[0])
		}
		t.Config.Extra = append(t.Config.Extra, k.String())
	}
	if t.Config.Agent.TimeoutSec < 0 || t.Config.Verifier.TimeoutSec < 0 {
		return nil, fmt.Errorf("load task %s: %s: negative timeout_sec", dir, toml)
	}
	env := t.Config.Environment
	for _, n := range []struct {
		name string
		v    Number
	}{{"cpus", env.CPUs}, {"memory_mb", env.MemoryMB}, {"storage_mb", env.StorageMB}, {"gpus", env.GPUs}} {
		if n.v < 0 || math.IsNaN(float64(n.v)) || math.IsInf(float64(n.v), 0) {
			return nil, fmt.Errorf("load task %s: %s: [environment] %s = %v, want a finite number ≥ 0", dir, toml, n.name, float64(n.v))
		}
	}
	if _, err := env.MemoryBytes(); err != nil {
		return nil, fmt.Errorf("load task %s: %s: [environment] memory: %w", dir, toml, err)
	}
	if _, err := env.StorageBytes(); err != nil {
		return nil, fmt.Errorf("load task %s: %s: [environment] storage: %w", dir, toml, err)
	}
	if _, err := os.Stat(filepath.Join(abs, "tests", "test.sh")); err != nil {
		return nil, fmt.Errorf("load task %s: verifier: %w", dir, err)
	}
	return t, nil
}

// IsTaskDir reports whether dir looks like one task (has instruction.md).
func IsTaskDir(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "instruction.md"))
	return err == nil
}

// LoadAll loads dir itself if it is a task, else every immediate
// subdirectory that is one, sorted by name.
func LoadAll(dir string) ([]*Task, error) {
	if IsTaskDir(dir) {
		t, err := Load(dir)
		if err != nil {
			return nil, err
		}
		return []*Task{t}, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load tasks %s: %w", dir, err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && IsTaskDir(filepath.Join(dir, e.Name())) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("load tasks %s: no task directories (with instruction.md) found", dir)
	}
	tasks := make([]*Task, 0, len(names))
	for _, n := range names {
		t, err := Load(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, t)
	}
	return tasks, nil
}

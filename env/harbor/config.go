package harbor

import (
	"fmt"
	"math"
	"net/netip"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Config is task.toml as Harbor 0.26's TaskConfig reads it (same fields,
// defaults, coercions and validation). Optional scalars Harbor leaves as
// None are zero here ("" or 0); optional lists and tables are nil.
type Config struct {
	// SchemaVersion defaults to "1.4"; the legacy top-level `version` is
	// read as schema_version when schema_version is absent.
	SchemaVersion string
	Task          *PackageInfo // [task]; nil when absent
	Metadata      map[string]any
	Verifier      VerifierConfig
	Agent         AgentConfig
	Environment   EnvironmentConfig
	Solution      SolutionConfig
	Source        string
	// MultiStepRewardStrategy is "mean", "final" or "" (unset; Harbor
	// then uses "mean" for a multi-step task).
	MultiStepRewardStrategy string
	Steps                   []StepConfig     // [[steps]]; nil for a single-step task
	Artifacts               []ArtifactConfig // string entries become {Source: s}
}

// NetworkMode is a network policy: "public", "no-network" or "allowlist".
type NetworkMode string

// Network modes.
const (
	NetworkPublic    NetworkMode = "public"
	NetworkNone      NetworkMode = "no-network"
	NetworkAllowlist NetworkMode = "allowlist"
)

// PackageInfo is [task]: the registry identity of the task.
type PackageInfo struct {
	Name        string // org/name
	Version     string // "" when unset (an explicit "" is invalid)
	Description string
	Authors     []Author
	Keywords    []string
}

// Author is one of [task] authors.
type Author struct{ Name, Email string }

// AgentConfig is [agent] (and a step's agent).
type AgentConfig struct {
	// TimeoutSec is the agent's time limit; 0 when unset, which Harbor
	// reads as no limit and compactrl as DefaultAgentTimeout.
	TimeoutSec float64
	User       string      // user name or UID ("" = the image's USER)
	Network    NetworkMode // "" = inherit [environment]'s
	// AllowedHosts (normalized) with Network "allowlist"; nil when unset.
	AllowedHosts []string
}

// VerifierConfig is [verifier] (and a step's verifier).
type VerifierConfig struct {
	TimeoutSec      float64 // default 600
	Env             map[string]string
	User            string
	Network         NetworkMode // "" = inherit
	AllowedHosts    []string
	EnvironmentMode string             // "shared", "separate" or "" (unset)
	Environment     *EnvironmentConfig // [verifier.environment]; nil when absent
	Collect         []CollectConfig    // [[verifier.collect]]
}

// CollectConfig is one [[verifier.collect]] hook.
type CollectConfig struct {
	Command    string
	Service    string  // default "main"
	TimeoutSec float64 // default 60
	User       string
}

// SolutionConfig is [solution].
type SolutionConfig struct {
	Env map[string]string
}

// EnvironmentConfig is [environment] (and [verifier.environment]).
type EnvironmentConfig struct {
	BuildTimeoutSec float64 // default 600
	DockerImage     string
	OS              string  // "linux" (default) or "windows"
	CPUs            float64 // 0 when unset
	MemoryMB        int64   // 0 when unset; legacy `memory` ("4G") lands here
	StorageMB       int64   // 0 when unset; legacy `storage` lands here
	GPUs            int64
	GPUTypes        []string // nil: any GPU type
	TPU             *TPUSpec
	MCPServers      []MCPServerConfig
	Env             map[string]string
	SkillsDir       string
	Healthcheck     *HealthcheckConfig
	Workdir         string
	Network         NetworkMode // default "public"; legacy allow_internet maps here
	AllowedHosts    []string
	// AllowInternet is Network == NetworkPublic: compactrl's sandboxes
	// either share the host's network or have none, so an allowlist
	// runs without network.
	AllowInternet bool
}

// TPUSpec is [environment.tpu].
type TPUSpec struct{ Type, Topology string }

// HealthcheckConfig is [environment.healthcheck] (and a step's).
type HealthcheckConfig struct {
	Command                                                   string
	IntervalSec, TimeoutSec, StartPeriodSec, StartIntervalSec float64 // defaults 5, 30, 0, 5
	Retries                                                   int64   // default 3
}

// MCPServerConfig is one [[environment.mcp_servers]].
type MCPServerConfig struct {
	Name      string
	Transport string // "sse" (default), "streamable-http" ("http" too) or "stdio"
	URL       string
	Command   string
	Args      []string
	Headers   map[string]string
}

// ArtifactConfig is one artifacts entry (a string is its Source).
type ArtifactConfig struct {
	Source      string
	Destination string // "" = as Source
	Exclude     []string
	Service     string // "" = main
}

// StepConfig is one [[steps]] of a multi-step task.
type StepConfig struct {
	Name     string
	Agent    AgentConfig
	Verifier VerifierConfig
	// MinReward gates on the "reward" key; MinRewards on each key. Both
	// nil when unset.
	MinReward   *float64
	MinRewards  map[string]float64
	Healthcheck *HealthcheckConfig
	Artifacts   []ArtifactConfig
}

// StorageBytes returns [environment] storage_mb in bytes, 0 when unset.
// The error is always nil (Load checked the value); it stays for callers.
func (e EnvironmentConfig) StorageBytes() (int64, error) { return e.StorageMB << 20, nil }

// MemoryBytes returns [environment] memory_mb in bytes, 0 when unset. The
// error is always nil (Load checked the value).
func (e EnvironmentConfig) MemoryBytes() (int64, error) { return e.MemoryMB << 20, nil }

var (
	orgNamePattern      = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$`)
	hostLabelPattern    = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$`)
	serviceNamePattern  = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
	headerNamePattern   = regexp.MustCompile(`^[!#$%&'*+.^_` + "`" + `|~0-9A-Za-z-]+$`)
	topologyPattern     = regexp.MustCompile(`^[1-9]\d*(x[1-9]\d*)+$`)
	embeddedTemplate    = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}`)
	templatedCredential = regexp.MustCompile(`^\s*(?:[A-Za-z]+\s+)?\$\{[A-Za-z_][A-Za-z0-9_]*(?::-)?\}(?:[\s:-]*\$\{[A-Za-z_][A-Za-z0-9_]*(?::-)?\})*\s*$`)
	stepInvalidChars    = regexp.MustCompile(`[<>:"/\\|?*\x00-\x1f\x7f]`)
	windowsDeviceName   = regexp.MustCompile(`(?i)^(CON|PRN|AUX|NUL|CONIN\$|CONOUT\$|(?:COM|LPT)[1-9¹²³])$`)
	windowsDrive        = regexp.MustCompile(`^[A-Za-z]:[/\\]`)
)

// parseConfig validates task.toml's decoded table as TaskConfig does.
func (d *decoder) parseConfig(m map[string]any) (Config, error) {
	c := Config{SchemaVersion: "1.4", Metadata: map[string]any{}}
	c.Verifier = defaultVerifier()
	c.Environment = defaultEnvironment()
	c.Solution.Env = map[string]string{}
	d.extras("", m, "schema_version", "version", "task", "metadata", "verifier", "agent", "environment",
		"solution", "source", "multi_step_reward_strategy", "steps", "artifacts")
	var err error
	if v, ok := m["schema_version"]; ok {
		if c.SchemaVersion, err = d.str("schema_version", v); err != nil {
			return c, err
		}
	} else if v, ok := m["version"]; ok {
		if c.SchemaVersion, err = d.str("version", v); err != nil {
			return c, err
		}
	}
	if v, ok := m["task"]; ok {
		p, err := d.packageInfo("task", v)
		if err != nil {
			return c, err
		}
		c.Task = &p
	}
	if v, ok := m["metadata"]; ok {
		if c.Metadata, err = d.table("metadata", v); err != nil {
			return c, err
		}
	}
	if v, ok := m["verifier"]; ok {
		if c.Verifier, err = d.verifier("verifier", v); err != nil {
			return c, err
		}
	}
	if v, ok := m["agent"]; ok {
		if c.Agent, err = d.agent("agent", v); err != nil {
			return c, err
		}
	}
	if v, ok := m["environment"]; ok {
		if c.Environment, err = d.environment("environment", v); err != nil {
			return c, err
		}
	}
	if v, ok := m["solution"]; ok {
		t, err := d.table("solution", v)
		if err != nil {
			return c, err
		}
		d.extras("solution", t, "env")
		if e, ok := t["env"]; ok {
			if c.Solution.Env, err = d.strMap("solution.env", e); err != nil {
				return c, err
			}
		}
	}
	if v, ok := m["source"]; ok {
		if c.Source, err = d.str("source", v); err != nil {
			return c, err
		}
	}
	if v, ok := m["multi_step_reward_strategy"]; ok {
		if c.MultiStepRewardStrategy, err = d.enum("multi_step_reward_strategy", v, "mean", "final"); err != nil {
			return c, err
		}
	}
	if v, ok := m["steps"]; ok {
		l, err := d.list("steps", v)
		if err != nil {
			return c, err
		}
		c.Steps = []StepConfig{}
		seen := map[string]bool{}
		for i, x := range l {
			s, err := d.step(index("steps", i), x)
			if err != nil {
				return c, err
			}
			key := cases.Fold().String(norm.NFC.String(s.Name))
			if seen[key] {
				return c, d.errf(index("steps", i)+".name", "step names must be unique, including case and Unicode normalization variants: %q", s.Name)
			}
			seen[key] = true
			c.Steps = append(c.Steps, s)
		}
	}
	if v, ok := m["artifacts"]; ok {
		if c.Artifacts, err = d.artifacts("artifacts", v); err != nil {
			return c, err
		}
	}
	return c, nil
}

func defaultVerifier() VerifierConfig {
	return VerifierConfig{TimeoutSec: 600, Env: map[string]string{}}
}

func defaultEnvironment() EnvironmentConfig {
	return EnvironmentConfig{BuildTimeoutSec: 600, OS: "linux", Env: map[string]string{}, Network: NetworkPublic, AllowInternet: true}
}

func (d *decoder) packageInfo(p string, v any) (PackageInfo, error) {
	var pi PackageInfo
	t, err := d.table(p, v)
	if err != nil {
		return pi, err
	}
	d.extras(p, t, "name", "version", "description", "authors", "keywords")
	n, ok := t["name"]
	if !ok {
		return pi, d.errf(join(p, "name"), "required (org/name)")
	}
	if pi.Name, err = d.str(join(p, "name"), n); err != nil {
		return pi, err
	}
	if !orgNamePattern.MatchString(pi.Name) || strings.Contains(pi.Name, "..") {
		return pi, d.errf(join(p, "name"), "%q: want org/name (letters, digits, '.', '_', '-'; not starting with '.', no '..')", pi.Name)
	}
	if x, ok := t["version"]; ok {
		if pi.Version, err = d.str(join(p, "version"), x); err != nil {
			return pi, err
		}
		if pi.Version == "" {
			return pi, d.errf(join(p, "version"), "must not be empty")
		}
	}
	if x, ok := t["description"]; ok {
		if pi.Description, err = d.str(join(p, "description"), x); err != nil {
			return pi, err
		}
	}
	pi.Authors = []Author{}
	if x, ok := t["authors"]; ok {
		l, err := d.list(join(p, "authors"), x)
		if err != nil {
			return pi, err
		}
		for i, a := range l {
			ap := index(join(p, "authors"), i)
			at, err := d.table(ap, a)
			if err != nil {
				return pi, err
			}
			d.extras(ap, at, "name", "email")
			var au Author
			n, ok := at["name"]
			if !ok {
				return pi, d.errf(join(ap, "name"), "required")
			}
			if au.Name, err = d.str(join(ap, "name"), n); err != nil {
				return pi, err
			}
			if e, ok := at["email"]; ok {
				if au.Email, err = d.str(join(ap, "email"), e); err != nil {
					return pi, err
				}
			}
			pi.Authors = append(pi.Authors, au)
		}
	}
	pi.Keywords = []string{}
	if x, ok := t["keywords"]; ok {
		if pi.Keywords, err = d.strList(join(p, "keywords"), x); err != nil {
			return pi, err
		}
	}
	return pi, nil
}

// phaseNetwork reads an [agent]/[verifier] network override.
func (d *decoder) phaseNetwork(p string, t map[string]any) (NetworkMode, []string, error) {
	var mode NetworkMode
	var hosts []string
	if v, ok := t["network_mode"]; ok {
		s, err := d.enum(join(p, "network_mode"), v, string(NetworkNone), string(NetworkPublic), string(NetworkAllowlist))
		if err != nil {
			return "", nil, err
		}
		mode = NetworkMode(s)
	}
	if v, ok := t["allowed_hosts"]; ok {
		var err error
		if hosts, err = d.allowedHosts(join(p, "allowed_hosts"), v); err != nil {
			return "", nil, err
		}
	}
	if mode == "" && hosts != nil || mode != "" && mode != NetworkAllowlist && len(hosts) > 0 {
		return "", nil, d.errf(join(p, "allowed_hosts"), "only valid with network_mode = \"allowlist\"")
	}
	return mode, hosts, nil
}

func (d *decoder) agent(p string, v any) (AgentConfig, error) {
	var a AgentConfig
	t, err := d.table(p, v)
	if err != nil {
		return a, err
	}
	d.extras(p, t, "timeout_sec", "user", "network_mode", "allowed_hosts")
	if x, ok := t["timeout_sec"]; ok {
		if a.TimeoutSec, err = d.float(join(p, "timeout_sec"), x); err != nil {
			return a, err
		}
		if err := d.duration(join(p, "timeout_sec"), a.TimeoutSec, true); err != nil {
			return a, err
		}
	}
	if x, ok := t["user"]; ok {
		if a.User, err = d.user(join(p, "user"), x); err != nil {
			return a, err
		}
	}
	a.Network, a.AllowedHosts, err = d.phaseNetwork(p, t)
	return a, err
}

func (d *decoder) verifier(p string, v any) (VerifierConfig, error) {
	vc := defaultVerifier()
	t, err := d.table(p, v)
	if err != nil {
		return vc, err
	}
	d.extras(p, t, "timeout_sec", "env", "user", "network_mode", "allowed_hosts", "environment_mode", "environment", "collect")
	if x, ok := t["timeout_sec"]; ok {
		if vc.TimeoutSec, err = d.float(join(p, "timeout_sec"), x); err != nil {
			return vc, err
		}
	}
	if err := d.duration(join(p, "timeout_sec"), vc.TimeoutSec, true); err != nil {
		return vc, err
	}
	if x, ok := t["env"]; ok {
		if vc.Env, err = d.strMap(join(p, "env"), x); err != nil {
			return vc, err
		}
	}
	if x, ok := t["user"]; ok {
		if vc.User, err = d.user(join(p, "user"), x); err != nil {
			return vc, err
		}
	}
	if x, ok := t["environment_mode"]; ok {
		if vc.EnvironmentMode, err = d.enum(join(p, "environment_mode"), x, "shared", "separate"); err != nil {
			return vc, err
		}
	}
	if x, ok := t["environment"]; ok {
		e, err := d.environment(join(p, "environment"), x)
		if err != nil {
			return vc, err
		}
		vc.Environment = &e
	}
	if x, ok := t["collect"]; ok {
		l, err := d.list(join(p, "collect"), x)
		if err != nil {
			return vc, err
		}
		vc.Collect = []CollectConfig{}
		for i, y := range l {
			cc, err := d.collect(index(join(p, "collect"), i), y)
			if err != nil {
				return vc, err
			}
			vc.Collect = append(vc.Collect, cc)
		}
	}
	if vc.Network, vc.AllowedHosts, err = d.phaseNetwork(p, t); err != nil {
		return vc, err
	}
	if vc.EnvironmentMode == "shared" && vc.Environment != nil {
		return vc, d.errf(join(p, "environment_mode"), "\"shared\" is incompatible with [%s.environment]; omit the environment or set environment_mode = \"separate\"", p)
	}
	return vc, nil
}

func (d *decoder) collect(p string, v any) (CollectConfig, error) {
	cc := CollectConfig{Service: "main", TimeoutSec: 60}
	t, err := d.table(p, v)
	if err != nil {
		return cc, err
	}
	d.extras(p, t, "command", "service", "timeout_sec", "user")
	x, ok := t["command"]
	if !ok {
		return cc, d.errf(join(p, "command"), "required")
	}
	if cc.Command, err = d.str(join(p, "command"), x); err != nil {
		return cc, err
	}
	if x, ok := t["service"]; ok {
		if cc.Service, err = d.serviceName(join(p, "service"), x); err != nil {
			return cc, err
		}
	}
	if x, ok := t["timeout_sec"]; ok {
		if cc.TimeoutSec, err = d.float(join(p, "timeout_sec"), x); err != nil {
			return cc, err
		}
	}
	if err := d.duration(join(p, "timeout_sec"), cc.TimeoutSec, false); err != nil {
		return cc, err
	}
	if x, ok := t["user"]; ok {
		if cc.User, err = d.user(join(p, "user"), x); err != nil {
			return cc, err
		}
	}
	return cc, nil
}

// serviceName is a Docker Compose service name (trimmed).
func (d *decoder) serviceName(p string, v any) (string, error) {
	s, err := d.str(p, v)
	if err != nil {
		return "", err
	}
	s = strings.TrimFunc(s, pySpace)
	if !serviceNamePattern.MatchString(s) {
		return "", d.errf(p, "invalid Docker Compose service name %q", s)
	}
	return s, nil
}

// sizeToMB is Harbor's legacy size parser: "4G" → 4096, "512M", "2048K".
func sizeToMB(s string) (int64, error) {
	s = strings.ToUpper(strings.TrimFunc(s, pySpace))
	var mult float64
	switch {
	case strings.HasSuffix(s, "G"):
		mult = 1024
	case strings.HasSuffix(s, "M"):
		mult = 1
	case strings.HasSuffix(s, "K"):
		mult = 1.0 / 1024
	default:
		return 0, fmt.Errorf("invalid size %q: want e.g. 1G, 512M", s)
	}
	f, err := pyFloatText(s[:len(s)-1])
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: want e.g. 1G, 512M", s)
	}
	if mult == 1.0/1024 {
		f /= 1024
	} else {
		f *= mult
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) >= 1<<62 {
		return 0, fmt.Errorf("invalid size %q: not a finite size", s)
	}
	return int64(f), nil // int() truncates toward zero, as Go's conversion
}

// pyEqual is Python's == between a TOML value and an integer (for the
// legacy memory/memory_mb conflict check: only numbers can be equal).
func pyEqual(v any, n int64) bool {
	switch x := v.(type) {
	case int64:
		return x == n
	case float64:
		return x == float64(n)
	case bool:
		return (x && n == 1) || (!x && n == 0)
	}
	return false
}

func (d *decoder) environment(p string, v any) (EnvironmentConfig, error) {
	e := defaultEnvironment()
	t, err := d.table(p, v)
	if err != nil {
		return e, err
	}
	d.extras(p, t, "build_timeout_sec", "docker_image", "os", "cpus", "memory_mb", "storage_mb", "gpus", "gpu_types",
		"tpu", "mcp_servers", "env", "skills_dir", "healthcheck", "workdir", "network_mode", "allowed_hosts",
		"allow_internet", "memory", "storage")
	// Harbor's migration of the deprecated fields, before validation.
	t2 := make(map[string]any, len(t))
	for k, x := range t {
		t2[k] = x
	}
	t = t2
	if x, ok := t["allow_internet"]; ok && x != nil {
		d.warnings = append(d.warnings, fmt.Sprintf("%s: %s.allow_internet is deprecated; use network_mode", d.file, p))
	}
	for _, legacy := range []string{"memory", "storage"} {
		x, ok := t[legacy]
		if !ok {
			continue
		}
		d.warnings = append(d.warnings, fmt.Sprintf("%s: %s.%s is deprecated; use %s_mb", d.file, p, legacy, legacy))
		delete(t, legacy)
		s, ok := x.(string)
		if !ok {
			continue // Harbor drops a non-string legacy size
		}
		mb, err := sizeToMB(s)
		if err != nil {
			return e, d.errf(join(p, legacy), "%v", err)
		}
		if cur, ok := t[legacy+"_mb"]; ok {
			if !pyEqual(cur, mb) {
				return e, d.errf(join(p, legacy), "%q (%d MB) conflicts with %s_mb = %v", s, mb, legacy, cur)
			}
		} else {
			t[legacy+"_mb"] = mb
		}
	}
	if x, ok := t["build_timeout_sec"]; ok {
		if e.BuildTimeoutSec, err = d.float(join(p, "build_timeout_sec"), x); err != nil {
			return e, err
		}
	}
	if err := d.duration(join(p, "build_timeout_sec"), e.BuildTimeoutSec, false); err != nil {
		return e, err
	}
	if x, ok := t["docker_image"]; ok {
		if e.DockerImage, err = d.str(join(p, "docker_image"), x); err != nil {
			return e, err
		}
	}
	if x, ok := t["os"]; ok {
		if s, isStr := x.(string); isStr {
			x = strings.ToLower(s)
		}
		if e.OS, err = d.enum(join(p, "os"), x, "linux", "windows"); err != nil {
			return e, err
		}
	}
	if x, ok := t["cpus"]; ok {
		// int | float: an integer-looking string is an int, else a float.
		if s, isStr := x.(string); isStr {
			if n, ok := pydanticIntString(s); ok {
				x = n
			}
		}
		if e.CPUs, err = d.float(join(p, "cpus"), x); err != nil {
			return e, err
		}
		if math.IsNaN(e.CPUs) || math.IsInf(e.CPUs, 0) {
			return e, d.errf(join(p, "cpus"), "must be a finite number; got %v", e.CPUs)
		}
		if err := d.bounded(join(p, "cpus"), e.CPUs, MaxCPUs, "CPUs"); err != nil {
			return e, err
		}
	}
	for _, f := range []struct {
		key  string
		dst  *int64
		max  float64
		what string
	}{{"memory_mb", &e.MemoryMB, MaxMemoryMB, "1 TiB"}, {"storage_mb", &e.StorageMB, MaxMemoryMB, "1 TiB"}, {"gpus", &e.GPUs, MaxGPUs, "GPUs"}} {
		x, ok := t[f.key]
		if !ok {
			continue
		}
		if *f.dst, err = d.integer(join(p, f.key), x); err != nil {
			return e, err
		}
		if err := d.bounded(join(p, f.key), float64(*f.dst), f.max, f.what); err != nil {
			return e, err
		}
	}
	if x, ok := t["gpu_types"]; ok {
		if e.GPUTypes, err = d.strList(join(p, "gpu_types"), x); err != nil {
			return e, err
		}
	}
	if x, ok := t["tpu"]; ok {
		tp, err := d.tpu(join(p, "tpu"), x)
		if err != nil {
			return e, err
		}
		e.TPU = &tp
	}
	if x, ok := t["mcp_servers"]; ok {
		l, err := d.list(join(p, "mcp_servers"), x)
		if err != nil {
			return e, err
		}
		for i, y := range l {
			s, err := d.mcpServer(index(join(p, "mcp_servers"), i), y)
			if err != nil {
				return e, err
			}
			e.MCPServers = append(e.MCPServers, s)
		}
	}
	if x, ok := t["env"]; ok {
		if e.Env, err = d.strMap(join(p, "env"), x); err != nil {
			return e, err
		}
	}
	if x, ok := t["skills_dir"]; ok {
		if e.SkillsDir, err = d.str(join(p, "skills_dir"), x); err != nil {
			return e, err
		}
	}
	if x, ok := t["healthcheck"]; ok {
		h, err := d.healthcheck(join(p, "healthcheck"), x)
		if err != nil {
			return e, err
		}
		e.Healthcheck = &h
	}
	if x, ok := t["workdir"]; ok {
		if e.Workdir, err = d.str(join(p, "workdir"), x); err != nil {
			return e, err
		}
	}
	var allowInternet *bool
	if x, ok := t["allow_internet"]; ok {
		b, err := d.boolean(join(p, "allow_internet"), x)
		if err != nil {
			return e, err
		}
		allowInternet = &b
	}
	_, modeSet := t["network_mode"]
	if modeSet {
		s, err := d.enum(join(p, "network_mode"), t["network_mode"], string(NetworkNone), string(NetworkPublic), string(NetworkAllowlist))
		if err != nil {
			return e, err
		}
		e.Network = NetworkMode(s)
	}
	if x, ok := t["allowed_hosts"]; ok {
		if e.AllowedHosts, err = d.allowedHosts(join(p, "allowed_hosts"), x); err != nil {
			return e, err
		}
	}
	if e.Network != NetworkAllowlist && len(e.AllowedHosts) > 0 {
		return e, d.errf(join(p, "allowed_hosts"), "only valid with network_mode = \"allowlist\"")
	}
	// The deprecated allow_internet sets the mode unless the table sets
	// network_mode or allowed_hosts itself.
	if allowInternet != nil && !modeSet && e.AllowedHosts == nil {
		e.Network = NetworkNone
		if *allowInternet {
			e.Network = NetworkPublic
		}
	}
	e.AllowInternet = e.Network == NetworkPublic
	return e, nil
}

func (d *decoder) tpu(p string, v any) (TPUSpec, error) {
	var tp TPUSpec
	t, err := d.table(p, v)
	if err != nil {
		return tp, err
	}
	d.extras(p, t, "type", "topology")
	x, ok := t["type"]
	if !ok {
		return tp, d.errf(join(p, "type"), "required")
	}
	if tp.Type, err = d.str(join(p, "type"), x); err != nil {
		return tp, err
	}
	if tp.Type == "" {
		return tp, d.errf(join(p, "type"), "must not be empty")
	}
	x, ok = t["topology"]
	if !ok {
		return tp, d.errf(join(p, "topology"), "required")
	}
	if tp.Topology, err = d.str(join(p, "topology"), x); err != nil {
		return tp, err
	}
	tp.Topology = strings.TrimFunc(tp.Topology, pySpace)
	if !topologyPattern.MatchString(tp.Topology) {
		return tp, d.errf(join(p, "topology"), "%q: want positive dimensions separated by 'x' (e.g. 2x4, 2x2x1)", tp.Topology)
	}
	return tp, nil
}

func (d *decoder) healthcheck(p string, v any) (HealthcheckConfig, error) {
	h := HealthcheckConfig{IntervalSec: 5, TimeoutSec: 30, StartIntervalSec: 5, Retries: 3}
	t, err := d.table(p, v)
	if err != nil {
		return h, err
	}
	d.extras(p, t, "command", "interval_sec", "timeout_sec", "start_period_sec", "start_interval_sec", "retries")
	x, ok := t["command"]
	if !ok {
		return h, d.errf(join(p, "command"), "required")
	}
	if h.Command, err = d.str(join(p, "command"), x); err != nil {
		return h, err
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"interval_sec", &h.IntervalSec}, {"timeout_sec", &h.TimeoutSec}, {"start_period_sec", &h.StartPeriodSec}, {"start_interval_sec", &h.StartIntervalSec}} {
		if x, ok := t[f.key]; ok {
			if *f.dst, err = d.float(join(p, f.key), x); err != nil {
				return h, err
			}
		}
		if err := d.duration(join(p, f.key), *f.dst, false); err != nil {
			return h, err
		}
	}
	if x, ok := t["retries"]; ok {
		if h.Retries, err = d.integer(join(p, "retries"), x); err != nil {
			return h, err
		}
		if err := d.bounded(join(p, "retries"), float64(h.Retries), MaxRetries, "retries"); err != nil {
			return h, err
		}
	}
	return h, nil
}

func (d *decoder) mcpServer(p string, v any) (MCPServerConfig, error) {
	s := MCPServerConfig{Transport: "sse", Args: []string{}, Headers: map[string]string{}}
	t, err := d.table(p, v)
	if err != nil {
		return s, err
	}
	d.extras(p, t, "name", "transport", "url", "command", "args", "headers")
	x, ok := t["name"]
	if !ok {
		return s, d.errf(join(p, "name"), "required")
	}
	if s.Name, err = d.str(join(p, "name"), x); err != nil {
		return s, err
	}
	if x, ok := t["transport"]; ok {
		if x == "http" {
			x = "streamable-http"
		}
		if s.Transport, err = d.enum(join(p, "transport"), x, "stdio", "sse", "streamable-http"); err != nil {
			return s, err
		}
	}
	if x, ok := t["url"]; ok {
		if s.URL, err = d.str(join(p, "url"), x); err != nil {
			return s, err
		}
	}
	if x, ok := t["command"]; ok {
		if s.Command, err = d.str(join(p, "command"), x); err != nil {
			return s, err
		}
	}
	if x, ok := t["args"]; ok {
		if s.Args, err = d.strList(join(p, "args"), x); err != nil {
			return s, err
		}
	}
	if x, ok := t["headers"]; ok {
		if s.Headers, err = d.strMap(join(p, "headers"), x); err != nil {
			return s, err
		}
		for name, val := range s.Headers {
			hp := join(join(p, "headers"), name)
			switch {
			case !headerNamePattern.MatchString(name):
				return s, d.errf(hp, "invalid HTTP header name %q", name)
			case strings.ContainsAny(val, "\r\n"):
				return s, d.errf(hp, "must not contain newlines")
			case strings.Contains(embeddedTemplate.ReplaceAllString(val, " "), "${") || badTemplateDefault(val):
				return s, d.errf(hp, "invalid environment variable template")
			case literalHeaderCredential(name, val):
				return s, d.errf(hp, "must reference credentials as ${VAR} without a default, such as 'Bearer ${TOKEN}'")
			}
		}
	}
	switch {
	case (s.Transport == "sse" || s.Transport == "streamable-http") && s.URL == "":
		return s, d.errf(join(p, "url"), "required for transport %q", s.Transport)
	case s.Transport == "stdio" && s.Command == "":
		return s, d.errf(join(p, "command"), "required for transport \"stdio\"")
	case s.Transport == "stdio" && len(s.Headers) > 0:
		return s, d.errf(join(p, "headers"), "only supported for HTTP transports")
	}
	return s, nil
}

// badTemplateDefault: a ${VAR:-default} whose default holds "${".
func badTemplateDefault(val string) bool {
	for _, m := range embeddedTemplate.FindAllStringSubmatch(val, -1) {
		if strings.Contains(m[2], "${") {
			return true
		}
	}
	return false
}

// sensitiveKey is Harbor's (KEY|SECRET|TOKEN(?!S)|PASSWORD|CREDENTIAL|AUTH),
// case-insensitive.
func sensitiveKey(k string) bool {
	u := strings.ToUpper(k)
	for _, w := range []string{"KEY", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH"} {
		if strings.Contains(u, w) {
			return true
		}
	}
	for i := 0; ; {
		j := strings.Index(u[i:], "TOKEN")
		if j < 0 {
			return false
		}
		i += j + len("TOKEN")
		if i >= len(u) || u[i] != 'S' {
			return true
		}
	}
}

// literalHeaderCredential is Harbor's has_literal_header_credential.
func literalHeaderCredential(name, val string) bool {
	sensitive := sensitiveKey(name) || strings.EqualFold(name, "cookie") || strings.EqualFold(name, "set-cookie")
	for _, m := range embeddedTemplate.FindAllStringSubmatch(val, -1) {
		if m[2] != "" && (sensitive || sensitiveKey(m[1])) {
			return true
		}
	}
	return sensitive && strings.TrimFunc(val, pySpace) != "" && !templatedCredential.MatchString(val)
}

// allowedHosts is Harbor's _validate_allowed_host_names: lower-cased,
// trailing dots dropped, IPv6 addresses and CIDR ranges normalized.
func (d *decoder) allowedHosts(p string, v any) ([]string, error) {
	hosts, err := d.strList(p, v)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for i, h := range hosts {
		hp := index(p, i)
		h = strings.TrimRight(strings.ToLower(strings.TrimFunc(h, pySpace)), ".")
		invalid := d.errf(hp, "%q: want a hostname, IP address or IP CIDR range, not a URL, port or path", h)
		switch {
		case h == "":
			return nil, d.errf(hp, "must be a non-empty hostname")
		case strings.Contains(h, "/"):
			pf, err := netip.ParsePrefix(h)
			if err != nil || strings.Contains(h, "%") || pf.Masked() != pf {
				return nil, invalid
			}
			out = append(out, pf.String())
			continue
		case strings.Contains(h, ":"):
			a, err := netip.ParseAddr(h)
			if err != nil || !a.Is6() || a.Zone() != "" {
				return nil, invalid
			}
			out = append(out, a.String())
			continue
		case strings.ContainsAny(h, "[]"):
			return nil, invalid
		}
		name := h
		if strings.HasPrefix(h, "*.") {
			name = h[2:]
			if name == "" {
				return nil, d.errf(hp, "a wildcard entry needs a hostname suffix")
			}
			if _, err := netip.ParseAddr(name); err == nil {
				return nil, d.errf(hp, "wildcard entries must target hostnames, not IP addresses")
			}
		} else if strings.Contains(h, "*") {
			return nil, d.errf(hp, "wildcard entries must use a leading '*.'")
		}
		for _, label := range strings.Split(name, ".") {
			if !hostLabelPattern.MatchString(label) {
				return nil, d.errf(hp, "%q: want an IP address, CIDR range, or hostname (letters, digits, hyphens, dots; optional leading '*.')", h)
			}
		}
		out = append(out, h)
	}
	return out, nil
}

func (d *decoder) step(p string, v any) (StepConfig, error) {
	s := StepConfig{Verifier: defaultVerifier(), Artifacts: []ArtifactConfig{}}
	t, err := d.table(p, v)
	if err != nil {
		return s, err
	}
	d.extras(p, t, "name", "agent", "verifier", "min_reward", "healthcheck", "artifacts")
	x, ok := t["name"]
	if !ok {
		return s, d.errf(join(p, "name"), "required")
	}
	if s.Name, err = d.str(join(p, "name"), x); err != nil {
		return s, err
	}
	if msg := badStepName(s.Name); msg != "" {
		return s, d.errf(join(p, "name"), "%q: %s", s.Name, msg)
	}
	if x, ok := t["agent"]; ok {
		if s.Agent, err = d.agent(join(p, "agent"), x); err != nil {
			return s, err
		}
	}
	if x, ok := t["verifier"]; ok {
		if s.Verifier, err = d.verifier(join(p, "verifier"), x); err != nil {
			return s, err
		}
	}
	if x, ok := t["min_reward"]; ok {
		mp := join(p, "min_reward")
		if m, isTable := x.(map[string]any); isTable {
			s.MinRewards = map[string]float64{}
			for k, y := range m {
				if s.MinRewards[k], err = d.float(join(mp, k), y); err != nil {
					return s, err
				}
			}
		} else {
			f, err := d.float(mp, x)
			if err != nil {
				return s, d.errf(mp, "want a number or a table of numbers, got %s", describe(x))
			}
			s.MinReward = &f
		}
	}
	if x, ok := t["healthcheck"]; ok {
		h, err := d.healthcheck(join(p, "healthcheck"), x)
		if err != nil {
			return s, err
		}
		s.Healthcheck = &h
	}
	if x, ok := t["artifacts"]; ok {
		if s.Artifacts, err = d.artifacts(join(p, "artifacts"), x); err != nil {
			return s, err
		}
	}
	return s, nil
}

// badStepName is Harbor's validate_step_name ("" when valid).
func badStepName(n string) string {
	base, _, _ := strings.Cut(n, ".")
	switch {
	case strings.TrimFunc(n, pySpace) == "" || n == "." || n == ".." || strings.HasSuffix(n, ".") || strings.HasSuffix(n, " ") ||
		stepInvalidChars.MatchString(n) || windowsDeviceName.MatchString(strings.TrimRight(base, " ")):
		return "step names must be non-empty portable directory names, without path separators, control characters, Windows reserved characters or device names, or trailing dots/spaces"
	case len(n) > 255:
		return "step names must be at most 255 UTF-8 bytes"
	case !utf8.ValidString(n):
		return "not valid UTF-8"
	}
	return ""
}

func (d *decoder) artifacts(p string, v any) ([]ArtifactConfig, error) {
	l, err := d.list(p, v)
	if err != nil {
		return nil, err
	}
	out := []ArtifactConfig{}
	for i, x := range l {
		a, err := d.artifact(index(p, i), x)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func (d *decoder) artifact(p string, v any) (ArtifactConfig, error) {
	a := ArtifactConfig{Exclude: []string{}}
	var err error
	if s, ok := v.(string); ok {
		a.Source = s
	} else {
		t, ok := v.(map[string]any)
		if !ok {
			return a, d.errf(p, "want a path or a table, got %s", describe(v))
		}
		d.extras(p, t, "source", "destination", "exclude", "service")
		x, ok := t["source"]
		if !ok {
			return a, d.errf(join(p, "source"), "required")
		}
		if a.Source, err = d.str(join(p, "source"), x); err != nil {
			return a, err
		}
		if x, ok := t["destination"]; ok {
			if a.Destination, err = d.str(join(p, "destination"), x); err != nil {
				return a, err
			}
		}
		if x, ok := t["exclude"]; ok {
			if a.Exclude, err = d.strList(join(p, "exclude"), x); err != nil {
				return a, err
			}
		}
		if x, ok := t["service"]; ok {
			if a.Service, err = d.serviceName(join(p, "service"), x); err != nil {
				return a, err
			}
		}
	}
	if hasDotDot(a.Source) {
		return a, d.errf(join(p, "source"), "%q must not contain '..' components", a.Source)
	}
	if dst := a.Destination; dst != "" {
		dp := join(p, "destination")
		switch {
		case strings.Contains(dst, `\`):
			return a, d.errf(dp, "%q: use forward slashes", dst)
		case strings.HasPrefix(dst, "/"):
			return a, d.errf(dp, "%q must be a relative path", dst)
		case path.Clean(dst) == ".":
			return a, d.errf(dp, "%q must name a file or directory", dst)
		case hasDotDot(dst):
			return a, d.errf(dp, "%q must not contain '..' components", dst)
		case strings.TrimRight(dst, "/") == "manifest.json":
			return a, d.errf(dp, "\"manifest.json\" is reserved for the collection manifest")
		}
	}
	if a.Service != "" && a.Service != "main" && !strings.HasPrefix(a.Source, "/") && !windowsDrive.MatchString(a.Source) {
		return a, d.errf(join(p, "source"), "%q collected from service %q must be an absolute path", a.Source, a.Service)
	}
	return a, nil
}

func hasDotDot(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

// ResolveEnv resolves an env table as Harbor's resolve_env_vars does when
// it runs a task: a value that is exactly ${VAR} or ${VAR:-default} takes
// VAR from lookup (os.LookupEnv for the host), else the default; an unset
// VAR without a default is an error. Other values are literal.
func ResolveEnv(env map[string]string, lookup func(string) (string, bool)) (map[string]string, error) {
	out := make(map[string]string, len(env))
	for k, v := range env {
		m := fullTemplate.FindStringSubmatchIndex(v)
		if m == nil {
			out[k] = v
			continue
		}
		name := v[m[2]:m[3]]
		if x, ok := lookup(name); ok {
			out[k] = x
		} else if m[4] >= 0 {
			out[k] = v[m[4]:m[5]]
		} else {
			return nil, fmt.Errorf("env %s: environment variable %q not set on the host", k, name)
		}
	}
	return out, nil
}

// fullTemplate is Harbor's _TEMPLATE_PATTERN, matched against a whole value.
var fullTemplate = regexp.MustCompile(`^\$\{([^}:]+)(?::-(.*))?\}$`)

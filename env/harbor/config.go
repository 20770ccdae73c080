package harbor

import (
	"fmt"
	"maps"
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

// StorageBytes returns [environment] storage_mb in bytes, 0 when unset
// (Load checked the value).
func (e EnvironmentConfig) StorageBytes() int64 { return e.StorageMB << 20 }

// MemoryBytes returns [environment] memory_mb in bytes, 0 when unset
// (Load checked the value).
func (e EnvironmentConfig) MemoryBytes() int64 { return e.MemoryMB << 20 }

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
	err := d.keys("", m,
		field("schema_version", &c.SchemaVersion, d.str),
		key{name: "version", set: func(p string, v any) error {
			if _, ok := m["schema_version"]; ok {
				return nil // the legacy name yields to schema_version
			}
			var err error
			c.SchemaVersion, err = d.str(p, v)
			return err
		}},
		fieldRef("task", &c.Task, d.packageInfo),
		field("metadata", &c.Metadata, d.table),
		field("verifier", &c.Verifier, d.verifier),
		field("agent", &c.Agent, d.agent),
		field("environment", &c.Environment, d.environment),
		field("solution", &c.Solution, d.solution),
		field("source", &c.Source, d.str),
		field("multi_step_reward_strategy", &c.MultiStepRewardStrategy, d.oneOf("mean", "final")),
		field("steps", &c.Steps, d.steps),
		field("artifacts", &c.Artifacts, d.artifacts),
	)
	return c, err
}

func defaultVerifier() VerifierConfig {
	return VerifierConfig{TimeoutSec: 600, Env: map[string]string{}}
}

func defaultEnvironment() EnvironmentConfig {
	return EnvironmentConfig{BuildTimeoutSec: 600, OS: "linux", Env: map[string]string{}, Network: NetworkPublic, AllowInternet: true}
}

func (d *decoder) packageInfo(p string, v any) (PackageInfo, error) {
	pi := PackageInfo{Authors: []Author{}, Keywords: []string{}}
	t, err := d.table(p, v)
	if err != nil {
		return pi, err
	}
	err = d.keys(p, t,
		field("name", &pi.Name, d.orgName).requiredAs("required (org/name)"),
		field("version", &pi.Version, d.nonEmpty),
		field("description", &pi.Description, d.str),
		field("authors", &pi.Authors, listOf(d, d.author)),
		field("keywords", &pi.Keywords, d.strList),
	)
	return pi, err
}

// orgName is [task] name: org/name.
func (d *decoder) orgName(p string, v any) (string, error) {
	s, err := d.str(p, v)
	if err == nil && (!orgNamePattern.MatchString(s) || strings.Contains(s, "..")) {
		err = d.errf(p, "%q: want org/name (letters, digits, '.', '_', '-'; not starting with '.', no '..')", s)
	}
	return s, err
}

func (d *decoder) author(p string, v any) (Author, error) {
	var a Author
	t, err := d.table(p, v)
	if err != nil {
		return a, err
	}
	err = d.keys(p, t,
		field("name", &a.Name, d.str).required(),
		field("email", &a.Email, d.str),
	)
	return a, err
}

// networkMode is a network_mode value.
func (d *decoder) networkMode(p string, v any) (NetworkMode, error) {
	s, err := d.enum(p, v, string(NetworkNone), string(NetworkPublic), string(NetworkAllowlist))
	return NetworkMode(s), err
}

// phaseNetwork checks an [agent]/[verifier] network override: hosts only
// with the allowlist mode.
func (d *decoder) phaseNetwork(p string, mode NetworkMode, hosts []string) error {
	if mode == "" && hosts != nil || mode != "" && mode != NetworkAllowlist && len(hosts) > 0 {
		return d.errf(join(p, "allowed_hosts"), "only valid with network_mode = \"allowlist\"")
	}
	return nil
}

func (d *decoder) agent(p string, v any) (AgentConfig, error) {
	var a AgentConfig
	t, err := d.table(p, v)
	if err != nil {
		return a, err
	}
	if err := d.keys(p, t,
		field("timeout_sec", &a.TimeoutSec, d.positiveSeconds),
		field("user", &a.User, d.user),
		field("network_mode", &a.Network, d.networkMode),
		field("allowed_hosts", &a.AllowedHosts, d.allowedHosts),
	); err != nil {
		return a, err
	}
	return a, d.phaseNetwork(p, a.Network, a.AllowedHosts)
}

func (d *decoder) verifier(p string, v any) (VerifierConfig, error) {
	vc := defaultVerifier()
	t, err := d.table(p, v)
	if err != nil {
		return vc, err
	}
	if err := d.keys(p, t,
		field("timeout_sec", &vc.TimeoutSec, d.positiveSeconds),
		field("env", &vc.Env, d.strMap),
		field("user", &vc.User, d.user),
		field("environment_mode", &vc.EnvironmentMode, d.oneOf("shared", "separate")),
		fieldRef("environment", &vc.Environment, d.environment),
		field("collect", &vc.Collect, listOf(d, d.collect)),
		field("network_mode", &vc.Network, d.networkMode),
		field("allowed_hosts", &vc.AllowedHosts, d.allowedHosts),
	); err != nil {
		return vc, err
	}
	if err := d.phaseNetwork(p, vc.Network, vc.AllowedHosts); err != nil {
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
	err = d.keys(p, t,
		field("command", &cc.Command, d.str).required(),
		field("service", &cc.Service, d.serviceName),
		field("timeout_sec", &cc.TimeoutSec, d.seconds),
		field("user", &cc.User, d.user),
	)
	return cc, err
}

func (d *decoder) solution(p string, v any) (SolutionConfig, error) {
	s := SolutionConfig{Env: map[string]string{}}
	t, err := d.table(p, v)
	if err != nil {
		return s, err
	}
	err = d.keys(p, t, field("env", &s.Env, d.strMap))
	return s, err
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
	var allowInternet *bool
	ks := []key{
		field("build_timeout_sec", &e.BuildTimeoutSec, d.seconds),
		field("docker_image", &e.DockerImage, d.str),
		field("os", &e.OS, d.osName),
		field("cpus", &e.CPUs, d.cpus),
		field("memory_mb", &e.MemoryMB, d.boundedInt(MaxMemoryMB, "1 TiB")),
		field("storage_mb", &e.StorageMB, d.boundedInt(MaxMemoryMB, "1 TiB")),
		field("gpus", &e.GPUs, d.boundedInt(MaxGPUs, "GPUs")),
		field("gpu_types", &e.GPUTypes, d.strList),
		fieldRef("tpu", &e.TPU, d.tpu),
		field("mcp_servers", &e.MCPServers, d.mcpServers),
		field("env", &e.Env, d.strMap),
		field("skills_dir", &e.SkillsDir, d.str),
		fieldRef("healthcheck", &e.Healthcheck, d.healthcheck),
		field("workdir", &e.Workdir, d.str),
		fieldRef("allow_internet", &allowInternet, d.boolean),
		field("network_mode", &e.Network, d.networkMode),
		field("allowed_hosts", &e.AllowedHosts, d.allowedHosts),
		{name: "memory"}, // legacy sizes: migrateLegacy moves them to *_mb
		{name: "storage"},
	}
	// Harbor migrates the deprecated fields after the unknown-key
	// warnings and before any field is validated.
	d.undeclared(p, t, ks)
	if t, err = d.migrateLegacy(p, t); err != nil {
		return e, err
	}
	if err := d.decode(p, t, ks); err != nil {
		return e, err
	}
	if e.Network != NetworkAllowlist && len(e.AllowedHosts) > 0 {
		return e, d.errf(join(p, "allowed_hosts"), "only valid with network_mode = \"allowlist\"")
	}
	// The deprecated allow_internet sets the mode unless the table sets
	// network_mode or allowed_hosts itself.
	if _, modeSet := t["network_mode"]; allowInternet != nil && !modeSet && e.AllowedHosts == nil {
		e.Network = NetworkNone
		if *allowInternet {
			e.Network = NetworkPublic
		}
	}
	e.AllowInternet = e.Network == NetworkPublic
	return e, nil
}

// migrateLegacy is Harbor's migration of [environment]'s deprecated
// fields before validation: it warns about allow_internet, memory and
// storage, and returns a copy of t with a string memory/storage size
// moved to memory_mb/storage_mb (a conflicting *_mb is an error).
func (d *decoder) migrateLegacy(p string, t map[string]any) (map[string]any, error) {
	t = maps.Clone(t)
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
			return nil, d.errf(join(p, legacy), "%v", err)
		}
		if cur, ok := t[legacy+"_mb"]; ok {
			if !pyEqual(cur, mb) {
				return nil, d.errf(join(p, legacy), "%q (%d MB) conflicts with %s_mb = %v", s, mb, legacy, cur)
			}
		} else {
			t[legacy+"_mb"] = mb
		}
	}
	return t, nil
}

// osName is [environment] os, case-insensitive.
func (d *decoder) osName(p string, v any) (string, error) {
	if s, ok := v.(string); ok {
		v = strings.ToLower(s)
	}
	return d.enum(p, v, "linux", "windows")
}

// cpus is [environment] cpus (int | float: an integer-looking string is
// an int, else a float), finite and within MaxCPUs.
func (d *decoder) cpus(p string, v any) (float64, error) {
	if s, ok := v.(string); ok {
		if n, ok := pydanticIntString(s); ok {
			v = n
		}
	}
	f, err := d.float(p, v)
	if err != nil {
		return f, err
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return f, d.errf(p, "must be a finite number; got %v", f)
	}
	return f, d.bounded(p, f, MaxCPUs, "CPUs")
}

func (d *decoder) tpu(p string, v any) (TPUSpec, error) {
	var tp TPUSpec
	t, err := d.table(p, v)
	if err != nil {
		return tp, err
	}
	err = d.keys(p, t,
		field("type", &tp.Type, d.nonEmpty).required(),
		field("topology", &tp.Topology, d.topology).required(),
	)
	return tp, err
}

// topology is a TPU topology such as 2x4 (trimmed).
func (d *decoder) topology(p string, v any) (string, error) {
	s, err := d.str(p, v)
	if err != nil {
		return s, err
	}
	s = strings.TrimFunc(s, pySpace)
	if !topologyPattern.MatchString(s) {
		return s, d.errf(p, "%q: want positive dimensions separated by 'x' (e.g. 2x4, 2x2x1)", s)
	}
	return s, nil
}

func (d *decoder) healthcheck(p string, v any) (HealthcheckConfig, error) {
	h := HealthcheckConfig{IntervalSec: 5, TimeoutSec: 30, StartIntervalSec: 5, Retries: 3}
	t, err := d.table(p, v)
	if err != nil {
		return h, err
	}
	err = d.keys(p, t,
		field("command", &h.Command, d.str).required(),
		field("interval_sec", &h.IntervalSec, d.seconds),
		field("timeout_sec", &h.TimeoutSec, d.seconds),
		field("start_period_sec", &h.StartPeriodSec, d.seconds),
		field("start_interval_sec", &h.StartIntervalSec, d.seconds),
		field("retries", &h.Retries, d.boundedInt(MaxRetries, "retries")),
	)
	return h, err
}

// mcpServers is [[environment.mcp_servers]]; an empty array is nil, as
// an absent one.
func (d *decoder) mcpServers(p string, v any) ([]MCPServerConfig, error) {
	l, err := listOf(d, d.mcpServer)(p, v)
	if len(l) == 0 {
		return nil, err
	}
	return l, err
}

func (d *decoder) mcpServer(p string, v any) (MCPServerConfig, error) {
	s := MCPServerConfig{Transport: "sse", Args: []string{}, Headers: map[string]string{}}
	t, err := d.table(p, v)
	if err != nil {
		return s, err
	}
	if err := d.keys(p, t,
		field("name", &s.Name, d.str).required(),
		field("transport", &s.Transport, d.transport),
		field("url", &s.URL, d.str),
		field("command", &s.Command, d.str),
		field("args", &s.Args, d.strList),
		field("headers", &s.Headers, d.headers),
	); err != nil {
		return s, err
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

// transport is an MCP server's transport ("http" is "streamable-http").
func (d *decoder) transport(p string, v any) (string, error) {
	if v == "http" {
		v = "streamable-http"
	}
	return d.enum(p, v, "stdio", "sse", "streamable-http")
}

// headers is an MCP server's HTTP headers: valid names, no newlines, and
// credentials only as ${VAR} templates.
func (d *decoder) headers(p string, v any) (map[string]string, error) {
	h, err := d.strMap(p, v)
	if err != nil {
		return h, err
	}
	for name, val := range h {
		hp := join(p, name)
		switch {
		case !headerNamePattern.MatchString(name):
			return h, d.errf(hp, "invalid HTTP header name %q", name)
		case strings.ContainsAny(val, "\r\n"):
			return h, d.errf(hp, "must not contain newlines")
		case strings.Contains(embeddedTemplate.ReplaceAllString(val, " "), "${") || badTemplateDefault(val):
			return h, d.errf(hp, "invalid environment variable template")
		case literalHeaderCredential(name, val):
			return h, d.errf(hp, "must reference credentials as ${VAR} without a default, such as 'Bearer ${TOKEN}'")
		}
	}
	return h, nil
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

// steps is [[steps]]: step names are unique up to case and Unicode
// normalization.
func (d *decoder) steps(p string, v any) ([]StepConfig, error) {
	l, err := d.list(p, v)
	if err != nil {
		return nil, err
	}
	out := []StepConfig{}
	seen := map[string]bool{}
	for i, x := range l {
		s, err := d.step(index(p, i), x)
		if err != nil {
			return out, err
		}
		key := cases.Fold().String(norm.NFC.String(s.Name))
		if seen[key] {
			return out, d.errf(index(p, i)+".name", "step names must be unique, including case and Unicode normalization variants: %q", s.Name)
		}
		seen[key] = true
		out = append(out, s)
	}
	return out, nil
}

func (d *decoder) step(p string, v any) (StepConfig, error) {
	s := StepConfig{Verifier: defaultVerifier(), Artifacts: []ArtifactConfig{}}
	t, err := d.table(p, v)
	if err != nil {
		return s, err
	}
	err = d.keys(p, t,
		field("name", &s.Name, d.stepName).required(),
		field("agent", &s.Agent, d.agent),
		field("verifier", &s.Verifier, d.verifier),
		key{name: "min_reward", set: func(p string, x any) error {
			var err error
			s.MinReward, s.MinRewards, err = d.minReward(p, x)
			return err
		}},
		fieldRef("healthcheck", &s.Healthcheck, d.healthcheck),
		field("artifacts", &s.Artifacts, d.artifacts),
	)
	return s, err
}

// stepName is a step's name: a portable directory name.
func (d *decoder) stepName(p string, v any) (string, error) {
	s, err := d.str(p, v)
	if err != nil {
		return s, err
	}
	if msg := badStepName(s); msg != "" {
		return s, d.errf(p, "%q: %s", s, msg)
	}
	return s, nil
}

// minReward is a step's min_reward: a number (the gate on "reward") or a
// table of numbers (a gate per key).
func (d *decoder) minReward(p string, v any) (*float64, map[string]float64, error) {
	if m, isTable := v.(map[string]any); isTable {
		out := map[string]float64{}
		for k, x := range m {
			f, err := d.float(join(p, k), x)
			if err != nil {
				return nil, out, err
			}
			out[k] = f
		}
		return nil, out, nil
	}
	f, err := d.float(p, v)
	if err != nil {
		return nil, nil, d.errf(p, "want a number or a table of numbers, got %s", describe(v))
	}
	return &f, nil, nil
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
	if s, ok := v.(string); ok {
		a.Source = s
	} else {
		t, ok := v.(map[string]any)
		if !ok {
			return a, d.errf(p, "want a path or a table, got %s", describe(v))
		}
		if err := d.keys(p, t,
			field("source", &a.Source, d.str).required(),
			field("destination", &a.Destination, d.str),
			field("exclude", &a.Exclude, d.strList),
			field("service", &a.Service, d.serviceName),
		); err != nil {
			return a, err
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

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ErrNoCompose means the engine has no compose implementation here.
var ErrNoCompose = errors.New("no compose implementation")

// MainService is the compose service the agent and the verifier run in,
// as in Harbor: the task's image, started as `sh -c "sleep infinity"`.
const MainService = "main"

// ComposeCommand finds the engine's compose implementation, an existing
// one (compactrl writes none): for podman, $COMPACTRL_PODMAN_COMPOSE or
// podman-compose on PATH (PyPI's, as Harbor's podman environment uses);
// for Docker, `docker compose` (v2) where it answers, else docker-compose
// on PATH.
func (c Container) ComposeCommand(ctx context.Context) ([]string, error) {
	if c.Name() == "podman" {
		if p := os.Getenv("COMPACTRL_PODMAN_COMPOSE"); p != "" {
			return []string{p}, nil
		}
		if p, err := exec.LookPath("podman-compose"); err == nil {
			return []string{p}, nil
		}
		return nil, fmt.Errorf("%w for podman: install podman-compose (pip install podman-compose==1.6.0) or set COMPACTRL_PODMAN_COMPOSE", ErrNoCompose)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if exec.CommandContext(ctx, c.engine(), "compose", "version").Run() == nil {
		return []string{c.engine(), "compose"}, nil
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}, nil
	}
	return nil, fmt.Errorf("%w for %s: install the compose plugin (docker compose) or docker-compose", ErrNoCompose, c.Name())
}

// ComposeSpec is one episode's compose project: the task's compose file
// with Harbor's main service added (Main: its image, environment,
// working directory, mounts, limits, network and owner, as for Create),
// every service labelled with Main.Owner, and, without Main.Network, the
// project's default network internal (the services reach each other, not
// the outside).
type ComposeSpec struct {
	Project  string // the compose project name (unique per episode)
	TaskFile string // the task's compose file (its directory is the project directory)
	Dir      string // a host directory for the generated files
	Main     BoxSpec
	// Vars are set in the compose implementation's environment (over the
	// process's own), for the ${NAME} references of the task's file: the
	// variables Harbor sets (MAIN_IMAGE_NAME, CONTEXT_DIR, CPUS, MEMORY).
	Vars map[string]string
}

// ComposeProject is a running compose project.
type ComposeProject struct {
	c     Container
	cmd   []string
	env   []string
	files []string
	name  string
}

// ComposeUp starts the project (`compose up -d`) and returns it with its
// main service's container as a Box. On failure nothing of the project is
// left running.
func (c Container) ComposeUp(ctx context.Context, spec ComposeSpec) (*ComposeProject, *Box, error) {
	if err := sandboxSupported(); err != nil {
		return nil, nil, err
	}
	cmd, err := c.ComposeCommand(ctx)
	if err != nil {
		return nil, nil, err
	}
	services, err := composeServices(spec.TaskFile)
	if err != nil {
		return nil, nil, err
	}
	base, override, err := c.composeOverrides(spec, services)
	if err != nil {
		return nil, nil, err
	}
	p := &ComposeProject{c: c, cmd: cmd, name: spec.Project, env: os.Environ()}
	for _, k := range slices.Sorted(maps.Keys(spec.Vars)) {
		p.env = append(p.env, k+"="+spec.Vars[k]) // later entries win
	}
	write := func(name string, v any) (string, error) {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return "", err
		}
		path := filepath.Join(spec.Dir, name)
		return path, os.WriteFile(path, b, 0o644)
	}
	basePath, err := write("compose-main.json", base)
	if err != nil {
		return nil, nil, err
	}
	overPath, err := write("compose-override.json", override)
	if err != nil {
		return nil, nil, err
	}
	// The task's file first: compose implementations resolve relative
	// paths (build contexts) against the first file's directory; again
	// after the main service's base, so that it can override it, as in
	// Harbor.
	p.files = []string{spec.TaskFile, basePath, spec.TaskFile, overPath}
	if c.Name() == "podman" {
		conf, err := c.podmanConf(spec.Dir)
		if err != nil {
			return nil, nil, err
		}
		p.env = append(p.env, "CONTAINERS_CONF="+conf)
	}
	if _, err := p.run(ctx, "up", "-d"); err != nil {
		p.Down()
		return nil, nil, err
	}
	cs, err := p.containers(ctx)
	var mains []composeContainer
	for _, ct := range cs {
		if ct.service() == MainService {
			mains = append(mains, ct)
		}
	}
	if err != nil || len(mains) != 1 {
		p.Down()
		return nil, nil, fmt.Errorf("compose project %s: the %s service's container not found (%v, %d found)", p.name, MainService, err, len(mains))
	}
	b := &Box{c: c, id: mains[0].ID, initPID: mains[0].State.Pid}
	b.initNS = pidNS(b.initPID)
	if c.Name() == "podman" {
		if err := p.pinHosts(ctx, cs); err != nil {
			p.Down()
			return nil, nil, err
		}
	}
	return p, b, nil
}

// containers lists and inspects the project's containers.
func (p *ComposeProject) containers(ctx context.Context) ([]composeContainer, error) {
	out, err := p.c.run(ctx, "ps", "-q", "--no-trunc", "--filter", "label=com.docker.compose.project="+p.name)
	if err != nil {
		return nil, fmt.Errorf("list its containers: %w", err)
	}
	ids := strings.Fields(string(out))
	if len(ids) == 0 {
		return nil, nil
	}
	js, err := p.c.run(ctx, append([]string{"inspect"}, ids...)...)
	if err != nil {
		return nil, fmt.Errorf("inspect its containers: %w", err)
	}
	var cs []composeContainer
	if err := json.Unmarshal(js, &cs); err != nil {
		return nil, fmt.Errorf("%s inspect: %w", p.c.Name(), err)
	}
	return cs, nil
}

// pinHosts writes every service's addresses into each container's
// /etc/hosts, so that the services find each other by name without asking
// podman's DNS server. aardvark-dns without its 2024 fix (Debian 12 ships 1.4)
// closes and reopens every listener whenever any network on the host gains
// or loses a container, and a lookup in that window fails with "Temporary
// failure in name resolution" (containers/aardvark-dns#389): one lookup in
// a few thousand while other episodes' projects come and go, enough to
// fail a verifier that looks its service up once. /etc/hosts is read
// before DNS by glibc and musl, and holds what DNS would answer: for each
// network two containers share, the other's address there under its
// service name, its container name and its aliases on that network.
// Docker's resolver lives in the daemon and has no such window, so Docker
// projects are left as Harbor leaves them.
func (p *ComposeProject) pinHosts(ctx context.Context, cs []composeContainer) error {
	for i, target := range cs {
		lines := hostsLines(cs, i)
		if lines == "" {
			continue
		}
		box := &Box{c: p.c, id: target.ID}
		// The exit status is not checked: a container that cannot take
		// the lines (an image without sh, a read-only /etc/hosts) keeps
		// DNS alone, as before. An engine failure is the project's.
		msg, _, err := box.Run(ctx, ExecSpec{User: "0", Cmd: []string{"sh", "-c", `printf '%s' "$1" >> /etc/hosts`, "sh", lines}})
		if err != nil {
			return fmt.Errorf("compose project %s: write the services' addresses into %s's /etc/hosts: %w %s", p.name, target.service(), err, tailString(msg, 500))
		}
	}
	return nil
}

// composeContainer is what ComposeUp and pinHosts read of `inspect`'s JSON
// (the same fields in podman's and Docker's).
type composeContainer struct {
	ID     string `json:"Id"`
	Name   string
	State  struct{ Pid int }
	Config struct {
		Labels map[string]string
	}
	NetworkSettings struct {
		Networks map[string]struct {
			IPAddress         string
			GlobalIPv6Address string
			Aliases           []string
		}
	}
}

func (c composeContainer) service() string {
	if s := c.Config.Labels["com.docker.compose.service"]; s != "" {
		return s
	}
	return strings.TrimPrefix(c.Name, "/")
}

// hostsLines are the /etc/hosts lines for container cs[target]: one per
// other container and network they share, "ADDRESS SERVICE NAME ALIASES…",
// networks in name order (the first line of a name is the one resolvers
// use).
func hostsLines(cs []composeContainer, target int) string {
	var b strings.Builder
	for j, other := range cs {
		if j == target {
			continue
		}
		for _, net := range slices.Sorted(maps.Keys(other.NetworkSettings.Networks)) {
			if _, shared := cs[target].NetworkSettings.Networks[net]; !shared {
				continue
			}
			n := other.NetworkSettings.Networks[net]
			names := []string{other.service(), strings.TrimPrefix(other.Name, "/")}
			names = append(names, n.Aliases...)
			seen := map[string]bool{}
			var uniq []string
			for _, name := range names {
				if name != "" && !seen[name] && !strings.ContainsAny(name, " \t\n#") {
					seen[name] = true
					uniq = append(uniq, name)
				}
			}
			for _, addr := range []string{n.IPAddress, n.GlobalIPv6Address} {
				if addr != "" && len(uniq) > 0 {
					fmt.Fprintf(&b, "%s\t%s\n", addr, strings.Join(uniq, " "))
				}
			}
		}
	}
	return b.String()
}

// composeServices lists the services a compose file defines.
func composeServices(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Services map[string]any `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []string
	for s := range doc.Services {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}

// composeOverrides are the main service's base (image and command) and
// the override applied after the task's file (pure, for tests).
func (c Container) composeOverrides(spec ComposeSpec, services []string) (base, override map[string]any, err error) {
	m := spec.Main
	if m.Image == "" {
		return nil, nil, errors.New("sandbox: compose main service needs an image")
	}
	base = map[string]any{"services": map[string]any{MainService: map[string]any{
		"image": m.Image, "command": []string{"sh", "-c", "sleep infinity"},
	}}}
	lim := m.Limits.withDefaults()
	nofile, nproc := hostHardLimits()
	ulimits := map[string]any{
		"nofile": map[string]uint64{"soft": nofile, "hard": nofile},
		"nproc":  map[string]uint64{"soft": nproc, "hard": nproc},
	}
	main := map[string]any{
		"mem_limit":  lim.SessionMemoryBytes,
		"pids_limit": lim.Processes,
		"ulimits": map[string]any{
			"nofile": ulimits["nofile"], "nproc": ulimits["nproc"],
			"fsize": map[string]int64{"soft": lim.FileSizeBytes, "hard": lim.FileSizeBytes},
		},
	}
	if lim.CPUs > 0 {
		main["cpus"] = lim.CPUs
	}
	if m.Workdir != "" {
		main["working_dir"] = m.Workdir
	}
	if len(m.Env) > 0 {
		main["environment"] = m.Env
	}
	var vols []string
	for _, mt := range m.Mounts {
		v := mt.Host + ":" + mt.Target
		if !mt.Writable {
			v += ":ro"
		}
		vols = append(vols, v)
	}
	if len(vols) > 0 {
		main["volumes"] = vols
	}
	svcs := map[string]any{}
	for _, s := range append(services, MainService) {
		svc := map[string]any{"ulimits": ulimits}
		if s == MainService {
			svc = main
		}
		if m.Owner != "" {
			svc["labels"] = map[string]string{RunLabel: m.Owner}
		}
		svcs[s] = svc
	}
	override = map[string]any{"services": svcs}
	network := map[string]any{}
	if !m.Network {
		network["internal"] = true
	}
	if m.Owner != "" {
		network["labels"] = map[string]string{RunLabel: m.Owner} // ReapContainers removes it
	}
	if len(network) > 0 {
		override["networks"] = map[string]any{"default": network}
	}
	return base, override, nil
}

// podmanConf writes a containers.conf for podman-compose's podman calls:
// the runtime Container would pick (runc where installed) and ulimits
// within this process's hard limits for every container.
func (c Container) podmanConf(dir string) (string, error) {
	nofile, nproc := hostHardLimits()
	conf := fmt.Sprintf("[containers]\ndefault_ulimits = [\"nofile=%d:%d\", \"nproc=%d:%d\"]\n", nofile, nofile, nproc, nproc)
	if a := c.runtimeArgs(); len(a) == 2 {
		conf += fmt.Sprintf("[engine]\nruntime = %q\n", a[1])
	}
	path := filepath.Join(dir, "containers.conf")
	return path, os.WriteFile(path, []byte(conf), 0o644)
}

// run runs the compose CLI on the project; output past
// MaxEngineOutputBytes is dropped.
func (p *ComposeProject) run(ctx context.Context, args ...string) (string, error) {
	a := append(append([]string{}, p.cmd[1:]...), "-p", p.name)
	for _, f := range p.files {
		a = append(a, "-f", f)
	}
	a = append(a, args...)
	cmd := exec.CommandContext(ctx, p.cmd[0], a...)
	cmd.Env = p.env
	out := newCapWriter(MaxEngineOutputBytes)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(p.cmd[0]), strings.Join(args, " "), err, tailString(strings.TrimSpace(out.String()), 4000))
	}
	return out.String(), nil
}

// Down removes every container, network and anonymous volume of the
// project (`compose down -v -t 0 --remove-orphans`).
func (p *ComposeProject) Down() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := p.run(ctx, "down", "-v", "-t", "0", "--remove-orphans")
	if err != nil {
		return fmt.Errorf("sandbox: compose project %s: %w", p.name, err)
	}
	return nil
}

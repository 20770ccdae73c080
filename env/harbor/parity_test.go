package harbor

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/internal/testenv"
)

// The Harbor parity corpus: tasks/*.toml and rewards/*/ are read by
// Harbor 0.26.0 (parity.py, under the venv setup.sh makes) and by
// compactrl, and the answers compared field by field. golden.json holds
// Harbor's recorded answers, so a machine without Python still checks
// against them; where the venv exists the live answers must equal it too.
const parityDir = "testdata/harbor-parity"

// HarborVenvEnv names the venv with harbor==0.26.0 (default
// $HOME/.cache/compactrl/harbor-venv, where .ci/run makes it).
const HarborVenvEnv = "COMPACTRL_HARBOR_VENV"

type harborAnswers struct {
	Harbor  string                     `json:"harbor"`
	Tasks   map[string]json.RawMessage `json:"tasks"`
	Rewards map[string]json.RawMessage `json:"rewards"`
}

type taskAnswer struct {
	Accepted bool           `json:"accepted"`
	Config   map[string]any `json:"config"`
}

type rewardAnswer struct {
	Accepted bool               `json:"accepted"`
	Rewards  map[string]float64 `json:"rewards"`
	Primary  *float64           `json:"primary"`
}

func TestHarborParityGolden(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(parityDir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkParity(t, b)
}

func TestHarborParityLive(t *testing.T) {
	venv := os.Getenv(HarborVenvEnv)
	if venv == "" {
		home, _ := os.UserHomeDir()
		venv = filepath.Join(home, ".cache", "compactrl", "harbor-venv")
	}
	py := filepath.Join(venv, "bin", "python")
	if out, err := exec.Command(py, "-c", "import harbor.models.task.config").CombinedOutput(); err != nil {
		testenv.Unavailable(t, "Harbor venv not usable (%s; make it with %s/setup.sh): %v %s", py, parityDir, err, out)
	}
	cmd := exec.Command(py, "parity.py", ".")
	cmd.Dir = parityDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	live, err := cmd.Output()
	if err != nil {
		t.Fatalf("parity.py: %v\n%s", err, stderr.Bytes())
	}
	golden, err := os.ReadFile(filepath.Join(parityDir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(live), bytes.TrimSpace(golden)) {
		t.Errorf("Harbor's live answers differ from golden.json (corpus or Harbor changed): regenerate with\n  cd env/harbor/%s && %s parity.py . > golden.json", parityDir, py)
	}
	checkParity(t, live)
}

func checkParity(t *testing.T, answers []byte) {
	var a harborAnswers
	if err := json.Unmarshal(answers, &a); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(parityDir, "tasks", "*.toml"))
	if len(files) != len(a.Tasks) || len(files) < 25 {
		t.Fatalf("%d task cases in the corpus, %d answered by Harbor", len(files), len(a.Tasks))
	}
	same, stricter := 0, 0
	for _, f := range files {
		name := filepath.Base(f)
		var want taskAnswer
		if err := json.Unmarshal(a.Tasks[name], &want); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		data, _ := os.ReadFile(f)
		cfg, _, err := ParseConfig(f, data)
		if field, e := os.ReadFile(f + ".stricter"); e == nil {
			// Harbor accepts; compactrl's range limits refuse, naming the field.
			switch {
			case !want.Accepted:
				t.Errorf("%s: marked stricter but Harbor rejects it", name)
			case err == nil || !strings.Contains(err.Error(), strings.TrimSpace(string(field))) || !strings.Contains(err.Error(), f):
				t.Errorf("%s: want compactrl's error naming %s and %s, got %v", name, f, strings.TrimSpace(string(field)), err)
			default:
				stricter++
			}
			continue
		}
		if (err == nil) != want.Accepted {
			t.Errorf("%s: Harbor accepted=%v, compactrl error %v", name, want.Accepted, err)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), f) {
				t.Errorf("%s: error does not name the file: %v", name, err)
			}
			same++
			continue
		}
		got := roundTrip(t, normalizeConfig(cfg))
		ok := true
		for _, k := range sortedKeys(want.Config, got) {
			if !reflect.DeepEqual(want.Config[k], got[k]) {
				ok = false
				t.Errorf("%s: %s: Harbor %s\ncompactrl %s", name, k, js(want.Config[k]), js(got[k]))
			}
		}
		if ok {
			same++
		}
	}
	t.Logf("task.toml: %d of %d cases agree with Harbor %s, %d more refused by compactrl's documented range limits", same, len(files)-stricter, a.Harbor, stricter)

	dirs, _ := filepath.Glob(filepath.Join(parityDir, "rewards", "*"))
	if len(dirs) != len(a.Rewards) {
		t.Fatalf("%d reward cases in the corpus, %d answered by Harbor", len(dirs), len(a.Rewards))
	}
	same, stricter = 0, 0
	for _, d := range dirs {
		name := filepath.Base(d)
		var want rewardAnswer
		if err := json.Unmarshal(a.Rewards[name], &want); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := ReadRewards(d)
		if name == "both" { // compactrl's rule, stricter than Harbor's
			if !want.Accepted || !errors.Is(err, ErrTwoRewardFiles) {
				t.Errorf("both: Harbor %+v, compactrl %v (want ErrTwoRewardFiles)", want, err)
			} else {
				stricter++
			}
			continue
		}
		if (err == nil) != want.Accepted {
			t.Errorf("rewards %s: Harbor accepted=%v, compactrl error %v", name, want.Accepted, err)
			continue
		}
		if err == nil {
			p, ok := Primary(got)
			if !reflect.DeepEqual(map[string]float64(got), want.Rewards) && !(len(got) == 0 && len(want.Rewards) == 0) {
				t.Errorf("rewards %s: Harbor %v, compactrl %v", name, want.Rewards, got)
				continue
			}
			if ok != (want.Primary != nil) || (ok && (p != *want.Primary || math.Signbit(p) != math.Signbit(*want.Primary))) {
				t.Errorf("rewards %s: primary Harbor %v, compactrl %v %v", name, want.Primary, p, ok)
				continue
			}
		}
		same++
	}
	t.Logf("rewards: %d of %d cases agree with Harbor, %d refused by compactrl's both-files rule", same, len(dirs)-stricter, stricter)
}

func sortedKeys(a, b map[string]any) []string {
	seen := map[string]bool{}
	var ks []string
	for _, m := range []map[string]any{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				ks = append(ks, k)
			}
		}
	}
	sort.Strings(ks)
	return ks
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func roundTrip(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// normalizeConfig is parity.py's shape of a config.
func normalizeConfig(c Config) map[string]any {
	var task any
	if c.Task != nil {
		authors := []any{}
		for _, a := range c.Task.Authors {
			authors = append(authors, map[string]any{"name": a.Name, "email": a.Email})
		}
		task = map[string]any{"name": c.Task.Name, "version": c.Task.Version, "description": c.Task.Description,
			"authors": authors, "keywords": c.Task.Keywords}
	}
	var steps any
	if c.Steps != nil {
		l := []any{}
		for _, s := range c.Steps {
			var mr any
			if s.MinReward != nil {
				mr = *s.MinReward
			} else if s.MinRewards != nil {
				mr = s.MinRewards
			}
			l = append(l, map[string]any{"name": s.Name, "agent": normAgent(s.Agent), "verifier": normVerifier(s.Verifier),
				"min_reward": mr, "healthcheck": normHealth(s.Healthcheck), "artifacts": normArtifacts(s.Artifacts)})
		}
		steps = l
	}
	return map[string]any{
		"schema_version": c.SchemaVersion, "task": task, "metadata": c.Metadata,
		"verifier": normVerifier(c.Verifier), "agent": normAgent(c.Agent), "environment": normEnv(&c.Environment),
		"solution": map[string]any{"env": c.Solution.Env}, "source": c.Source,
		"multi_step_reward_strategy": c.MultiStepRewardStrategy, "steps": steps, "artifacts": normArtifacts(c.Artifacts),
	}
}

func normAgent(a AgentConfig) map[string]any {
	return map[string]any{"timeout_sec": a.TimeoutSec, "user": a.User, "network_mode": string(a.Network), "allowed_hosts": a.AllowedHosts}
}

func normVerifier(v VerifierConfig) map[string]any {
	collect := []any{}
	for _, c := range v.Collect {
		collect = append(collect, map[string]any{"command": c.Command, "service": c.Service, "timeout_sec": c.TimeoutSec, "user": c.User})
	}
	var env any
	if v.Environment != nil {
		env = normEnv(v.Environment)
	}
	return map[string]any{"timeout_sec": v.TimeoutSec, "env": v.Env, "user": v.User, "network_mode": string(v.Network),
		"allowed_hosts": v.AllowedHosts, "environment_mode": v.EnvironmentMode, "environment": env, "collect": collect}
}

func normEnv(e *EnvironmentConfig) map[string]any {
	var tpu any
	if e.TPU != nil {
		tpu = map[string]any{"type": e.TPU.Type, "topology": e.TPU.Topology}
	}
	mcp := []any{}
	for _, m := range e.MCPServers {
		mcp = append(mcp, map[string]any{"name": m.Name, "transport": m.Transport, "url": m.URL, "command": m.Command, "args": m.Args, "headers": m.Headers})
	}
	return map[string]any{
		"build_timeout_sec": e.BuildTimeoutSec, "docker_image": e.DockerImage, "os": e.OS, "cpus": e.CPUs,
		"memory_mb": e.MemoryMB, "storage_mb": e.StorageMB, "gpus": e.GPUs, "gpu_types": e.GPUTypes, "tpu": tpu,
		"mcp_servers": mcp, "env": e.Env, "skills_dir": e.SkillsDir, "healthcheck": normHealth(e.Healthcheck),
		"workdir": e.Workdir, "network_mode": string(e.Network), "allowed_hosts": e.AllowedHosts,
	}
}

func normHealth(h *HealthcheckConfig) any {
	if h == nil {
		return nil
	}
	return map[string]any{"command": h.Command, "interval_sec": h.IntervalSec, "timeout_sec": h.TimeoutSec,
		"start_period_sec": h.StartPeriodSec, "start_interval_sec": h.StartIntervalSec, "retries": h.Retries}
}

func normArtifacts(l []ArtifactConfig) []any {
	out := []any{}
	for _, a := range l {
		out = append(out, map[string]any{"source": a.Source, "destination": a.Destination, "exclude": a.Exclude, "service": a.Service})
	}
	return out
}

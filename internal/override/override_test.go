package override

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type inner struct {
	Steps int     `yaml:"steps"`
	LR    float64 `yaml:"lr"`
}

type embedded struct {
	Context int `yaml:"context"`
}

type schema struct {
	Run   inner `yaml:"run"`
	Agent struct {
		embedded `yaml:",inline"`
		TopP     float64 `yaml:"top_p"`
	} `yaml:"agent"`
	Tags map[string]string `yaml:"tags"`
	Name string            `yaml:"name"`
}

const doc = `# the recipe
run:
  steps: 10 # a comment
agent:
  top_p: 1
name: demo
`

func decode(t *testing.T, b []byte) schema {
	t.Helper()
	var s schema
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return s
}

func TestApplySetsAndCreatesKeys(t *testing.T) {
	kv := []string{"run.steps=5", "run.lr=3e-4", "agent.context=2048", "tags.arm=base", "name=", "run.steps=7"}
	if err := Check(schema{}, kv); err != nil {
		t.Fatal(err)
	}
	b, err := Apply([]byte(doc), kv)
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, b)
	if got.Run.Steps != 7 || got.Run.LR != 3e-4 || got.Agent.Context != 2048 || got.Agent.TopP != 1 || got.Tags["arm"] != "base" || got.Name != "" {
		t.Fatalf("got %+v from\n%s", got, b)
	}
	if !strings.Contains(string(b), "# a comment") {
		t.Errorf("comments lost:\n%s", b)
	}
	empty, err := Apply(nil, []string{"run.steps=3"})
	if err != nil || decode(t, empty).Run.Steps != 3 {
		t.Fatalf("empty document: %v\n%s", err, empty)
	}
}

func TestErrorsNameTheOverride(t *testing.T) {
	for _, tc := range []struct {
		name, arg, want string
		check           bool // the error comes from Check (else from Apply)
	}{
		{"malformed", "run.steps", `override "run.steps": want section.key=value`, false},
		{"empty part", "run..steps=1", `override "run..steps=1": key "run..steps" has an empty part`, false},
		{"into a scalar", "run.steps.x=1", `override "run.steps.x=1": run.steps is a value in the config, not a section`, false},
		{"not YAML", "name=[1", `override "name=[1": value "[1" is not a YAML value`, false},
		{"unknown key", "run.stepz=1", `override "run.stepz=1": run has no key "stepz" (known: steps, lr)`, true},
		{"unknown section", "rnu.steps=1", `override "rnu.steps=1": the config has no key "rnu" (known: run, agent, tags, name)`, true},
		{"schema scalar", "name.x=1", `override "name.x=1": name is a value in the config, not a section`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.check {
				err = Check(schema{}, []string{tc.arg})
			} else {
				_, err = Apply([]byte(doc), []string{tc.arg})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want %q", err, tc.want)
			}
		})
	}
	if err := Check(schema{}, []string{"agent.context=1", "tags.anything=x"}); err != nil {
		t.Fatalf("inline and map keys refused: %v", err)
	}
}

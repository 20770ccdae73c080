package swebench

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/internal/testenv"
)

// Parity with the official harness: testdata/harness/cases.json holds
// test logs of every parser family (recorded from the container tests'
// images, and written to exercise each parser's corner cases) with their
// instances; golden.json is what the pinned swebench package answers on
// them (testdata/harness/parity.py). TestHarnessParityGolden checks this
// package against the recorded answers everywhere; TestHarnessParityLive
// asks the package itself, in the venv named by $COMPACTRL_SWEBENCH_PYTHON
// (skipped locally without it, failing under CI=true).

type parityCase struct {
	Name     string   `json:"name"`
	Instance Instance `json:"instance"`
	Log      string   `json:"log"`
}

type parityAnswer struct {
	EvalScript string            `json:"eval_script"`
	Parsed     map[string]string `json:"parsed"`
	Status     map[string]string `json:"status"`
	Found      bool              `json:"found"`
	Report     TestsReport       `json:"report"`
	Resolution string            `json:"resolution"`
}

type parityFile struct {
	Version string                  `json:"swebench_version"`
	Cases   map[string]parityAnswer `json:"cases"`
}

func loadCases(t *testing.T) []parityCase {
	t.Helper()
	b, err := os.ReadFile("testdata/harness/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []parityCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// goAnswer is this package's answer on c.
func goAnswer(t *testing.T, c parityCase) parityAnswer {
	t.Helper()
	script, err := EvalScript(&c.Instance)
	if err != nil {
		t.Fatalf("%s: EvalScript: %v", c.Name, err)
	}
	var a parityAnswer
	a.EvalScript = script
	a.Parsed = RepoParser(c.Instance.Repo)(c.Log)
	a.Status, a.Report, a.Found = GradeLog(&c.Instance, c.Log)
	a.Resolution = ResolvedNo
	if a.Found {
		a.Resolution = a.Report.Resolution()
	} else {
		// get_eval_tests_report on the harness's empty status map.
		a.Report = GradeTests(a.Status, c.Instance.FailToPass, c.Instance.PassToPass)
	}
	return a
}

func compareAnswers(t *testing.T, who string, want parityFile, cases []parityCase) {
	t.Helper()
	if want.Version != HarnessVersion {
		t.Errorf("%s answers are from swebench %s, want %s", who, want.Version, HarnessVersion)
	}
	for _, c := range cases {
		w, ok := want.Cases[c.Name]
		if !ok {
			t.Errorf("%s: no answer for %s", who, c.Name)
			continue
		}
		g := goAnswer(t, c)
		if g.EvalScript != w.EvalScript {
			t.Errorf("%s: eval script differs from %s's:\ngo:\n%s\nharness:\n%s", c.Name, who, g.EvalScript, w.EvalScript)
		}
		if !reflect.DeepEqual(g.Parsed, w.Parsed) {
			t.Errorf("%s: parser statuses differ from %s's:\ngo:      %v\nharness: %v", c.Name, who, g.Parsed, w.Parsed)
		}
		if !reflect.DeepEqual(g.Status, w.Status) || g.Found != w.Found {
			t.Errorf("%s: get_logs_eval differs from %s's:\ngo:      %v %v\nharness: %v %v", c.Name, who, g.Found, g.Status, w.Found, w.Status)
		}
		if !reflect.DeepEqual(g.Report, w.Report) || g.Resolution != w.Resolution {
			t.Errorf("%s: grade differs from %s's:\ngo:      %s %+v\nharness: %s %+v", c.Name, who, g.Resolution, g.Report, w.Resolution, w.Report)
		}
	}
}

// TestHarnessParityGolden: eval scripts, log parsing and grading agree
// with the harness's recorded answers on every case.
func TestHarnessParityGolden(t *testing.T) {
	cases := loadCases(t)
	b, err := os.ReadFile("testdata/harness/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var want parityFile
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Cases) != len(cases) {
		t.Errorf("golden.json has %d answers for %d cases: regenerate it with parity.py", len(want.Cases), len(cases))
	}
	compareAnswers(t, "golden.json", want, cases)
	// Every parser family is covered, and verdicts of each kind occur.
	families, verdicts := map[string]bool{}, map[string]bool{}
	for _, c := range cases {
		families[ParserName(c.Instance.Repo)] = true
		verdicts[want.Cases[c.Name].Resolution] = true
	}
	for name := range parsers {
		if !families[name] {
			t.Errorf("no case for the parser %s", name)
		}
	}
	for _, r := range []string{ResolvedFull, ResolvedPartial, ResolvedNo} {
		if !verdicts[r] {
			t.Errorf("no case resolves %s", r)
		}
	}
}

// harnessPython is the venv's interpreter holding the pinned swebench.
func harnessPython(t *testing.T) string {
	t.Helper()
	py := os.Getenv("COMPACTRL_SWEBENCH_PYTHON")
	if py == "" {
		testenv.Unavailable(t, "COMPACTRL_SWEBENCH_PYTHON not set: no venv with swebench==%s (pip install -r env/swebench/testdata/harness/requirements.txt)", HarnessVersion)
	}
	out, err := exec.Command(py, "-c", "import swebench; print(swebench.__version__)").CombinedOutput()
	if err != nil {
		testenv.Unavailable(t, "%s cannot import swebench: %v: %s", py, err, out)
	}
	if v := strings.TrimSpace(string(out)); v != HarnessVersion {
		t.Fatalf("%s has swebench %s, want %s (testdata/harness/requirements.txt)", py, v, HarnessVersion)
	}
	return py
}

// TestHarnessParityLive: the harness itself, run now, agrees with this
// package on every case, with golden.json, and on harness_specs.json.
func TestHarnessParityLive(t *testing.T) {
	py := harnessPython(t)
	cases := loadCases(t)
	out, err := exec.Command(py, "testdata/harness/parity.py", "testdata/harness/cases.json").Output()
	if err != nil {
		t.Fatalf("parity.py: %v", err)
	}
	var live parityFile
	if err := json.Unmarshal(out, &live); err != nil {
		t.Fatal(err)
	}
	compareAnswers(t, "the live harness", live, cases)
	golden, err := os.ReadFile("testdata/harness/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, golden) {
		t.Errorf("golden.json is stale: regenerate it with parity.py")
	}
	specs, err := exec.Command(py, "testdata/harness/dump_specs.py").Output()
	if err != nil {
		t.Fatalf("dump_specs.py: %v", err)
	}
	if !bytes.Equal(specs, harnessSpecsFile) {
		t.Errorf("harness_specs.json differs from dump_specs.py's output: regenerate it")
	}
}

func TestHarnessImageNames(t *testing.T) {
	for _, c := range []struct{ id, ns, want string }{
		{"django__django-11099", "swebench", "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"},
		{"Sphinx-Doc__sphinx-10323", "none", "sweb.eval.x86_64.sphinx-doc__sphinx-10323:latest"},
		{"pallets__flask-5014", "", "sweb.eval.x86_64.pallets__flask-5014:latest"},
	} {
		if got := HarnessImage(c.id, c.ns, ""); got != c.want {
			t.Errorf("HarnessImage(%q, %q) = %q, want %q", c.id, c.ns, got, c.want)
		}
	}
	inst := Instance{InstanceID: "a__b-1", Image: "img:1"}
	if got := ImageCandidates(&inst, "", ""); !reflect.DeepEqual(got, []string{"img:1", "swebench/sweb.eval.x86_64.a_1776_b-1:latest", "sweb.eval.x86_64.a__b-1:latest"}) {
		t.Errorf("ImageCandidates = %v", got)
	}
	if got := ImageCandidates(&inst, "over:2", ""); !reflect.DeepEqual(got, []string{"over:2"}) {
		t.Errorf("ImageCandidates with override = %v", got)
	}
}

// TestInstanceRowColumns: a Hugging Face row as it comes — JSON-encoded
// test lists, a numeric version, extra columns, image_name — loads with
// every column kept.
func TestInstanceRowColumns(t *testing.T) {
	row := `{"instance_id":"a__b-1","repo":"a/b","base_commit":"c","problem_statement":"p","version":3.10,` +
		`"FAIL_TO_PASS":"[\"t1\", \"t 2\"]","PASS_TO_PASS":[],"difficulty":"<15 min fix","image_name":"x/y:z"}`
	var in Instance
	if err := json.Unmarshal([]byte(row), &in); err != nil {
		t.Fatal(err)
	}
	if in.Version != "3.10" || in.Image != "x/y:z" || !reflect.DeepEqual([]string(in.FailToPass), []string{"t1", "t 2"}) || len(in.PassToPass) != 0 {
		t.Errorf("instance = %+v", in)
	}
	if string(in.Columns["difficulty"]) != `"<15 min fix"` || len(in.Columns) != 9 {
		t.Errorf("columns = %v", in.Columns)
	}
	if err := LocalRefusal(&Instance{InstanceID: "d", Repo: "django/django"}); err == nil || !strings.Contains(err.Error(), "runtests.py") {
		t.Errorf("LocalRefusal(django) = %v", err)
	}
	if err := LocalRefusal(&Instance{InstanceID: "x", Repo: "acme/calc"}); err != nil {
		t.Errorf("LocalRefusal(acme/calc) = %v", err)
	}
}

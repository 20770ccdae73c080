package swebench

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// HarnessVersion is the release of the official SWE-bench harness (the
// `swebench` package on PyPI) whose per-repository data harness_specs.json
// holds and whose eval scripts, log parsers and grading this package
// reproduces; testdata/harness/requirements.txt pins the same release for
// the parity check.
const HarnessVersion = "4.1.0"

// harnessSpecsFile is the harness's per-repository data, dumped from the
// pinned package by testdata/harness/dump_specs.py.
//
//go:embed harness_specs.json
var harnessSpecsFile []byte

// RepoSpec is the harness's data for one repository and version.
type RepoSpec struct {
	TestCmd      string   `json:"test_cmd"`
	EvalCommands []string `json:"eval_commands,omitempty"`
	Install      string   `json:"install,omitempty"`
}

type repoSpecs struct {
	Parser   string              `json:"parser"`
	Versions map[string]RepoSpec `json:"versions"`
}

var harnessSpecs = func() map[string]repoSpecs {
	var f struct {
		Version string               `json:"swebench_version"`
		Repos   map[string]repoSpecs `json:"repos"`
	}
	if err := json.Unmarshal(harnessSpecsFile, &f); err != nil {
		panic("swebench: harness_specs.json: " + err.Error())
	}
	if f.Version != HarnessVersion {
		panic("swebench: harness_specs.json is from swebench " + f.Version + ", want " + HarnessVersion)
	}
	for repo, s := range f.Repos {
		if parsers[s.Parser] == nil {
			panic("swebench: harness_specs.json: " + repo + ": no Go log parser " + s.Parser)
		}
	}
	return f.Repos
}()

// HarnessRepos lists the repositories the harness has test commands and
// log parsers for (its Python repositories), sorted.
func HarnessRepos() []string {
	out := make([]string, 0, len(harnessSpecs))
	for r := range harnessSpecs {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// ErrNoHarnessSpec marks an instance whose repository or version the
// harness has no test command for.
var ErrNoHarnessSpec = errors.New("no SWE-bench harness spec")

// Spec is the harness's data for the instance's repository and version.
func Spec(inst *Instance) (RepoSpec, error) {
	rs, ok := harnessSpecs[inst.Repo]
	if !ok {
		return RepoSpec{}, fmt.Errorf("instance %s: %w for repository %q (swebench %s knows %s)", inst.InstanceID, ErrNoHarnessSpec, inst.Repo, HarnessVersion, strings.Join(HarnessRepos(), ", "))
	}
	s, ok := rs.Versions[inst.Version]
	if !ok {
		return RepoSpec{}, fmt.Errorf("instance %s: %w for %s version %q", inst.InstanceID, ErrNoHarnessSpec, inst.Repo, inst.Version)
	}
	return s, nil
}

// ParserName is the harness's log parser for repo (e.g.
// "parse_log_django"), "" for a repository it does not know.
func ParserName(repo string) string { return harnessSpecs[repo].Parser }

// Markers of the harness's eval script and test log
// (swebench/harness/constants/__init__.py).
const (
	StartTestOutput = ">>>>> Start Test Output"
	EndTestOutput   = ">>>>> End Test Output"
	applyPatchFail  = ">>>>> Patch Apply Failed"
	resetFailed     = ">>>>> Reset Failed"
	testsError      = ">>>>> Tests Errored"
	testsTimeout    = ">>>>> Tests Timed Out"
)

// The harness's container layout (DOCKER_WORKDIR, env_name).
const (
	Testbed = "/testbed"
	envName = "testbed"
)

// nonTestExts are the harness's NON_TEST_EXTS: test_patch files ending so
// are not test directives ("csv" has no dot there, and so none here).
var nonTestExts = []string{".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml"}

var directiveRe = regexp.MustCompile(`diff --git a/.* b/(.*)`)

// TestDirectives are the arguments the harness appends to the test
// command: the files test_patch touches (the b/ side of each `diff --git`
// line), less non-test files; for Django, as dotted module labels relative
// to tests/ (get_test_directives in swebench/harness/test_spec/python.py).
func TestDirectives(inst *Instance) []string {
	var out []string
	for _, m := range directiveRe.FindAllStringSubmatch(inst.TestPatch, -1) {
		d := m[1]
		skip := false
		for _, ext := range nonTestExts {
			if strings.HasSuffix(d, ext) {
				skip = true
				break
			}
		}
		if skip {
			continue
		}
		if inst.Repo == "django/django" {
			d = strings.TrimSuffix(d, ".py")
			d = strings.TrimPrefix(d, "tests/")
			d = strings.ReplaceAll(d, "/", ".")
		}
		out = append(out, d)
	}
	return out
}

// ModifiedFiles are the existing files a patch changes: each file's
// source side (its `--- a/…` line, else its `diff --git a/…` header), new
// files (/dev/null) left out — what the harness's get_modified_files reads
// with unidiff.
func ModifiedFiles(patch string) []string {
	var out []string
	src, have := "", false
	flush := func() {
		if have && strings.HasPrefix(src, "a/") {
			out = append(out, src[2:])
		}
		have = false
	}
	lines := strings.Split(patch, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSuffix(lines[i], "\r")
		switch {
		case strings.HasPrefix(l, "diff --git "):
			flush()
			if m := gitHeaderRe.FindStringSubmatch(l); m != nil {
				src, have = "a/"+m[1], true
			}
		case strings.HasPrefix(l, "new file mode"):
			if have {
				src = "/dev/null"
			}
		case strings.HasPrefix(l, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ "):
			p := strings.TrimPrefix(l, "--- ")
			if t := strings.IndexByte(p, '\t'); t >= 0 {
				p = p[:t]
			}
			if !have {
				have = true
			}
			src = p
			i++
		}
	}
	flush()
	return out
}

var gitHeaderRe = regexp.MustCompile(`^diff --git a/(\S+) b/(\S+)$`)

// heredoc delimiters of the harness's scripts.
const evalHeredoc = "EOF_114329324912"

// EvalScript is the script the harness runs in a fresh container of the
// instance's image after applying the model's patch: the dataset's
// eval_script column when the instance has one, else the harness's own,
// built as make_eval_script_list_py (swebench/harness/test_spec/python.py)
// builds it: activate the testbed environment, the version's
// eval_commands, the repository state for the record, the version's
// install, the test files reset to base_commit, test_patch applied, the
// version's test_cmd on the test directives between the start and end
// markers, the test files reset again.
func EvalScript(inst *Instance) (string, error) {
	if inst.EvalScript != "" {
		return inst.EvalScript, nil
	}
	spec, err := Spec(inst)
	if err != nil {
		return "", err
	}
	base := inst.BaseCommit
	reset := "git checkout " + base + " " + strings.Join(ModifiedFiles(inst.TestPatch), " ")
	lines := []string{"#!/bin/bash", "set -uxo pipefail",
		"source /opt/miniconda3/bin/activate", "conda activate " + envName, "cd " + Testbed}
	lines = append(lines, spec.EvalCommands...)
	lines = append(lines,
		"git config --global --add safe.directory "+Testbed,
		"cd "+Testbed,
		"git status",
		"git show",
		"git -c core.fileMode=false diff "+base,
		"source /opt/miniconda3/bin/activate",
		"conda activate "+envName,
	)
	if spec.Install != "" {
		lines = append(lines, spec.Install)
	}
	lines = append(lines,
		reset,
		"git apply -v - <<'"+evalHeredoc+"'\n"+inst.TestPatch+"\n"+evalHeredoc,
		": '"+StartTestOutput+"'",
		strings.Join(append([]string{spec.TestCmd}, TestDirectives(inst)...), " "),
		": '"+EndTestOutput+"'",
		reset,
	)
	return strings.Join(lines, "\n") + "\n", nil
}

// DefaultNamespace is the harness's default image namespace
// (run_evaluation's --namespace).
const DefaultNamespace = "swebench"

// HarnessImage is the name the harness gives the instance's image
// (TestSpec.instance_image_key in swebench/harness/test_spec/test_spec.py):
// sweb.eval.ARCH.<instance id, lower case>:latest, and with a namespace
// NS/sweb.eval.… with every "__" written "_1776_" (the published images,
// e.g. swebench/sweb.eval.x86_64.django_1776_django-11099:latest).
func HarnessImage(instanceID, namespace, arch string) string {
	if arch == "" {
		arch = "x86_64"
	}
	key := "sweb.eval." + arch + "." + strings.ToLower(instanceID) + ":latest"
	if namespace != "" && namespace != "none" {
		key = strings.ReplaceAll(namespace+"/"+key, "__", "_1776_")
	}
	return key
}

// ImageCandidates are the images an instance may run in, in the order
// they are tried: override (a --image-map entry) alone when set, else the
// dataset's image column, the harness's namespaced name, the harness's local build name.
func ImageCandidates(inst *Instance, override, namespace string) []string {
	var out []string
	add := func(s string) {
		if s == "" {
			return
		}
		for _, o := range out {
			if o == s {
				return
			}
		}
		out = append(out, s)
	}
	if override != "" {
		return []string{override}
	}
	add(inst.Image)
	if namespace == "" {
		namespace = DefaultNamespace
	}
	add(HarnessImage(inst.InstanceID, namespace, ""))
	add(HarnessImage(inst.InstanceID, "none", ""))
	return out
}

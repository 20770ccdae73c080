// Package swebench runs SWE-bench instances as agent.Environments, in one
// of two modes, the Env's backend (backend.go), which New picks once from
// Options: container mode when Options.Engine is set, else the
// local-repository mode on Options.Runner.
//
// Container mode (Options.Engine: podman or docker) runs an
// instance the way the official harness (the `swebench` package of
// SWE-bench/SWE-bench, release HarnessVersion) runs it:
//
//	LoadInstances(rows as they come from a published file or a Hugging
//	Face dataset: FAIL_TO_PASS/PASS_TO_PASS as lists or JSON-encoded
//	strings, every column kept in Instance.Columns) → New(inst, opts).Reset:
//	a container of the instance's image (ResolveImage: Options.Image, else
//	the row's image column, else the harness's names
//	swebench/sweb.eval.x86_64.<id, "__" as "_1776_">:latest and
//	sweb.eval.x86_64.<id>:latest; a missing image is ErrImageMissing naming
//	them), the agent's shell in /testbed with the testbed environment
//	active (source /opt/miniconda3/bin/activate; conda activate testbed) →
//	Step: the shell-action language of env/shelltask → submit: the model's
//	patch is the reply's ```diff block, else the agent's change (git add -A
//	against /testbed's starting commit, text diff, binary files left out)
//	→ the agent's container removed; a fresh container of the same image:
//	the patch applied by the harness's apply commands, the eval script
//	(EvalScript: the row's eval_script, else built as the harness builds it
//	for the repository and version — test files reset to base_commit,
//	test_patch applied, the version's test_cmd on the test files between
//	start/end markers), its log graded by the repository's log parser and
//	the harness's FAIL_TO_PASS/PASS_TO_PASS rules (GradeLog: PASSED and
//	XFAIL pass; FAILED, ERROR and missing tests fail; skipped tests count
//	neither way; ids are what the parser reads, cut at spaces) → reward 1
//	only for RESOLVED_FULL. The verdict comes from the parsed per-test
//	statuses, never from an exit status: a patch that forces the runner's
//	exit status to 0 resolves nothing. Like the harness, it trusts test
//	names the log prints: a patch whose code prints fake "PASSED id" lines
//	in the test run could fool both.
//
// The harness's per-repository data (test commands, eval commands,
// install commands, log parser names) is harness_specs.json, dumped from
// the pinned package by testdata/harness/dump_specs.py; the parity tests
// compare eval scripts, parsing and grading with the package's own
// functions (testdata/harness/parity.py, golden.json).
//
// The local-repository mode (any other runner, bubblewrap by default)
// clones a local git repository at base_commit into a workspace the agent
// sees at /app, and grades by running each test id on the host's tools in
// a sandbox, its exit status the verdict (see TestCommand): it reproduces
// neither an instance's environment nor the harness's runner and log
// grading, so it refuses instances of the harness's repositories
// (LocalRefusal) and serves custom instances (a test_cmd extension, or a
// repository the harness does not know).
//
// The package registers itself with env/tasks as the task source
// "swebench" (source.go): `compactrl eval --tasks FILE.jsonl` loads
// instances through LoadTasks, and Env.Oracle (the gold patch) and Close
// are tasks.Oracle and tasks.Closer.
package swebench

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Instance is one SWE-bench task. TestCmd and RepoPath are extensions of
// this package (absent from the official data sets).
type Instance struct {
	InstanceID       string   `json:"instance_id"`
	Repo             string   `json:"repo"` // owner/name
	BaseCommit       string   `json:"base_commit"`
	ProblemStatement string   `json:"problem_statement"`
	Patch            string   `json:"patch"`      // the gold patch (oracle)
	TestPatch        string   `json:"test_patch"` // applied before the tests run
	FailToPass       TestList `json:"FAIL_TO_PASS"`
	PassToPass       TestList `json:"PASS_TO_PASS"`
	Version          string   `json:"version,omitempty"` // a number in the row is kept as written
	HintsText        string   `json:"hints_text,omitempty"`
	// EnvironmentSetupCommit and CreatedAt are kept for the record: the
	// environment they describe is the instance's image.
	EnvironmentSetupCommit string `json:"environment_setup_commit,omitempty"`
	CreatedAt              string `json:"created_at,omitempty"`

	// Image is the dataset's image column ("image", else "image_name",
	// else "docker_image"), where a dataset has one: the instance's
	// environment, tried before the harness's image names.
	Image string `json:"image,omitempty"`
	// EvalScript is the dataset's eval_script column, where a dataset has
	// one: run instead of the script built as the harness builds it.
	EvalScript string `json:"eval_script,omitempty"`

	// Columns holds every column of the row as it came (the fields above
	// included), for columns this package does not read.
	Columns map[string]json.RawMessage `json:"-"`

	// TestCmd runs one test: "{test}" is replaced by the shell-quoted test
	// id (appended when absent). A test passes when the command exits 0.
	TestCmd string `json:"test_cmd,omitempty"`
	// RepoPath is the local repository (absolute, or relative to the
	// repositories directory); default: see Options.ReposDir.
	RepoPath string `json:"repo_path,omitempty"`
}

// UnmarshalJSON implements json.Unmarshaler: the fields above from a row
// of a published SWE-bench file or a Hugging Face dataset as it comes,
// every column kept in Columns.
func (in *Instance) UnmarshalJSON(b []byte) error {
	var cols map[string]json.RawMessage
	if err := json.Unmarshal(b, &cols); err != nil {
		return err
	}
	type plain Instance
	aux := struct {
		*plain
		Version     json.RawMessage `json:"version"`
		ImageName   string          `json:"image_name"`
		DockerImage string          `json:"docker_image"`
	}{plain: (*plain)(in)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	in.Version = ""
	if v := bytes.TrimSpace(aux.Version); len(v) > 0 && string(v) != "null" {
		if v[0] == '"' {
			if err := json.Unmarshal(v, &in.Version); err != nil {
				return fmt.Errorf("version: %w", err)
			}
		} else {
			var n json.Number
			if err := json.Unmarshal(v, &n); err != nil {
				return fmt.Errorf("version must be a string or a number: %s", truncate(string(v), 40))
			}
			in.Version = n.String()
		}
	}
	if in.Image == "" {
		in.Image = cmp.Or(aux.ImageName, aux.DockerImage)
	}
	in.Columns = cols
	return nil
}

// TestList is a list of test ids; in JSON either a list or a string holding
// a JSON-encoded list (as in the published SWE-bench files).
type TestList []string

// UnmarshalJSON implements json.Unmarshaler.
func (l *TestList) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*l = list
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("test list must be a list of strings or a JSON string of one: %s", truncate(string(b), 80))
	}
	if strings.TrimSpace(s) == "" {
		*l = nil
		return nil
	}
	if err := json.Unmarshal([]byte(s), &list); err != nil {
		return fmt.Errorf("test list string is not a JSON list: %s", truncate(s, 80))
	}
	*l = list
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Validate checks the fields the environment needs.
func (in *Instance) Validate() error {
	switch {
	case in.InstanceID == "":
		return fmt.Errorf("instance_id is empty")
	case in.BaseCommit == "":
		return fmt.Errorf("instance %s: base_commit is empty", in.InstanceID)
	case in.Repo == "" && in.RepoPath == "":
		return fmt.Errorf("instance %s: repo (and repo_path) empty", in.InstanceID)
	case strings.TrimSpace(in.ProblemStatement) == "":
		return fmt.Errorf("instance %s: problem_statement is empty", in.InstanceID)
	case len(in.FailToPass) == 0:
		return fmt.Errorf("instance %s: FAIL_TO_PASS is empty", in.InstanceID)
	}
	return nil
}

// LoadInstances reads a JSONL file of instances (blank lines skipped).
func LoadInstances(path string) ([]Instance, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load instances: %w", err)
	}
	defer f.Close()
	var out []Instance
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	line := 0
	seen := map[string]bool{}
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var in Instance
		if err := json.Unmarshal(b, &in); err != nil {
			return nil, fmt.Errorf("load instances %s:%d: %w", path, line, err)
		}
		if err := in.Validate(); err != nil {
			return nil, fmt.Errorf("load instances %s:%d: %w", path, line, err)
		}
		if seen[in.InstanceID] {
			return nil, fmt.Errorf("load instances %s:%d: duplicate instance_id %s", path, line, in.InstanceID)
		}
		seen[in.InstanceID] = true
		out = append(out, in)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("load instances %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("load instances %s: no instances", path)
	}
	return out, nil
}

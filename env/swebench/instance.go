// Package swebench runs SWE-bench instances against local git repositories
// as agent.Environments, confined by package sandbox.
//
// Data flow of one episode:
//
//	LoadInstances(file.jsonl) → New(inst, opts).Reset: the instance's local
//	repository cloned into a fresh workspace at base_commit, seen by the
//	agent at /app; the task is prompts/task.tmpl (embedded; Options.TaskTemplate
//	replaces it) rendered for the instance → Step(reply), shelltask.Shell.Step:
//	the shell-action language of env/shelltask (one ```bash block,
//	<submit/>) → submit: the model's patch is the reply's
//	```diff block if it has one, else `git diff` of the workspace against
//	base_commit (untracked files included) → a fresh clone at base_commit,
//	the model's patch applied (git apply, then git apply --3way, then
//	patch --fuzz=5), files touched by test_patch reset to base and
//	test_patch applied, every FAIL_TO_PASS and PASS_TO_PASS test run in a
//	new sandbox → reward 1 (resolved) only if all of them pass, else 0.
//
// Tests run one at a time, each with its own command (see TestCommand): an
// instance may carry a test_cmd extension; otherwise Go repositories (go.mod)
// use `go test -run`, Python ones `python3 -m pytest` when pytest is present
// in the sandbox, else `python3 -m unittest`.
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

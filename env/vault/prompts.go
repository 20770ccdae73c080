package vault

import (
	_ "embed"
	"fmt"
	"strings"
	"text/template"
)

// The suite's prompts, one file each under prompts/. A file ends with one
// newline, which is not part of the text.
var (
	//go:embed prompts/system.txt
	systemFile string
	//go:embed prompts/task.tmpl
	taskFile string
)

// SystemPrompt describes the suite's actions to the policy
// (prompts/system.txt). It is read-only: a run that wants another system
// prompt sets agent.Config.SystemPrompt.
var SystemPrompt = strings.TrimSuffix(systemFile, "\n")

// taskTemplate renders an episode's task text from taskFields
// (prompts/task.tmpl).
var taskTemplate = template.Must(template.New("task").Parse(strings.TrimSuffix(taskFile, "\n")))

// taskFields are the values prompts/task.tmpl may use.
type taskFields struct {
	Keys  string // the asked keys, space-separated, in task order
	Files int    // files in the vault
}

// taskText renders the task of an episode that asks for keys in a vault of
// files files.
func taskText(keys []string, files int) (string, error) {
	var b strings.Builder
	if err := taskTemplate.Execute(&b, taskFields{Keys: strings.Join(keys, " "), Files: files}); err != nil {
		return "", fmt.Errorf("prompts/task.tmpl: %w", err)
	}
	return b.String(), nil
}

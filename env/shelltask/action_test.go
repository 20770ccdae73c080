package shelltask

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestParseAction(t *testing.T) {
	for _, c := range []struct {
		name, reply string
		want        Action
		err         error
	}{
		{"bash", "Let me look.\n```bash\nls -la\ncd /app\n```\n", Action{Command: "ls -la\ncd /app"}, nil},
		{"sh untagged", "```\necho hi\n```", Action{Command: "echo hi"}, nil},
		{"submit tag", "All done. <submit/>", Action{Submit: true}, nil},
		{"submit spaced", "< submit />", Action{Submit: true}, nil},
		{"submit command", "```bash\nsubmit\n```", Action{Submit: true}, nil},
		{"command then submit", "```bash\nmake\n```\n<submit/>", Action{Command: "make", Submit: true}, nil},
		{"submit inside block is code", "```bash\necho '<submit/>'\n```", Action{Command: "echo '<submit/>'"}, nil},
		{"python block ignored", "```python\nprint(1)\n```\n```bash\npython3 x.py\n```", Action{Command: "python3 x.py"}, nil},
		{"diff", "```diff\n--- a/x\n+++ b/x\n```\n<submit/>", Action{Patch: "--- a/x\n+++ b/x\n", Submit: true}, nil},
		{"tool bash", `<tool_call>{"name": "bash", "arguments": {"command": "pwd"}}</tool_call>`, Action{Command: "pwd"}, nil},
		{"tool string args", `<tool_call>{"name": "bash", "arguments": "{\"command\": \"pwd\"}"}</tool_call>`, Action{Command: "pwd"}, nil},
		{"tool submit", `<tool_call>{"name": "submit", "arguments": {}}</tool_call>`, Action{Submit: true}, nil},
		{"none", "I think we should list files.", Action{}, ErrNoAction},
		{"empty block", "```bash\n\n```", Action{}, ErrNoAction},
		{"two blocks", "```bash\nls\n```\nthen\n```bash\npwd\n```", Action{}, ErrMultiple},
		{"unclosed", "```bash\nls -la", Action{}, ErrUnclosed},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseAction(c.reply)
			if !errors.Is(err, c.err) || got != c.want {
				t.Errorf("ParseAction = %+v, %v; want %+v, %v", got, err, c.want, c.err)
			}
		})
	}
	for _, bad := range []string{
		`<tool_call>{"name": "rm"}</tool_call>`, `<tool_call>not json</tool_call>`,
		`<tool_call>{"name": "bash", "arguments": {}}</tool_call>`,
		`<tool_call>{"name":"submit"}</tool_call><tool_call>{"name":"submit"}</tool_call>`,
	} {
		if _, err := ParseAction(bad); err == nil {
			t.Errorf("ParseAction(%q) accepted", bad)
		}
	}
}

// The prompts moved from Go string literals to embedded files unchanged.
func TestPromptsAreTheOldLiterals(t *testing.T) {
	const oldFormatHint = "Act in a Linux shell (bash, working directory /app, no network). " +
		"Each reply must contain exactly one command block:\n\n```bash\n<commands>\n```\n\n" +
		"It runs in a persistent shell (cd and variables persist); you will see its output and exit code. " +
		"When the task is done, reply with <submit/> (alone, or after a final command block)."
	const oldToolsJSON = `[{"type":"function","function":{"name":"bash","description":"Run a command in the persistent bash shell (working directory /app, no network).","parameters":{"type":"object","properties":{"command":{"type":"string","description":"The shell command to run."}},"required":["command"]}}},` +
		`{"type":"function","function":{"name":"submit","description":"Declare the task complete; the verifier runs next.","parameters":{"type":"object","properties":{}}}}]`
	const oldSystem = "You are an autonomous agent working in a Linux shell to complete a task. " +
		"Think briefly, then act: one command block per reply. Check your work before you submit."
	if SystemPrompt() != oldSystem {
		t.Errorf("system.txt differs from eval's old system prompt:\n%q\n%q", SystemPrompt(), oldSystem)
	}
	if FormatHint() != oldFormatHint {
		t.Errorf("format_hint.txt differs from the old FormatHint:\n%q\n%q", FormatHint(), oldFormatHint)
	}
	if ToolsJSON() != oldToolsJSON {
		t.Errorf("tools.json differs from the old ToolsJSON:\n%q\n%q", ToolsJSON(), oldToolsJSON)
	}
	var tools []struct {
		Function struct{ Name string } `json:"function"`
	}
	if err := json.Unmarshal([]byte(ToolsJSON()), &tools); err != nil || len(tools) != 2 || tools[0].Function.Name != "bash" || tools[1].Function.Name != "submit" {
		t.Errorf("tools.json: %v %+v", err, tools)
	}
}

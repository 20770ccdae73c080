package shelltask

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Action is one parsed policy reply. A reply may carry a command, a submit,
// or both (the command runs first, then the episode is submitted).
type Action struct {
	Command string // shell command for the persistent shell; "" for none
	Submit  bool   // the policy declares the task complete
	Patch   string // a ```diff block, if any (env/swebench takes it as the model's patch)
}

// SubmitReply submits at once: the whole reply of the empty policy.
const SubmitReply = "<submit/>"

// The package's prompts, one file each under prompts/. A file ends with one
// newline, which is not part of the text.
var (
	//go:embed prompts/format_hint.txt
	formatHintFile string
	//go:embed prompts/tools.json
	toolsFile string
	//go:embed prompts/system.txt
	systemFile string
)

// SystemPrompt is the system prompt s of an agent on shell tasks: eval and
// serve start from it (prompts/system.txt; --system-prompt replaces it).
func SystemPrompt() string { return strings.TrimSuffix(systemFile, "\n") }

// FormatHint states the action format ParseAction accepts; the shell-task
// environments append it to every task shown to the policy unless their
// options turn it off or replace it (prompts/format_hint.txt).
func FormatHint() string { return strings.TrimSuffix(formatHintFile, "\n") }

// ToolsJSON declares the same two actions as OpenAI-style tools, for engines
// that support tool calls. A tool call reaches ParseAction as text in the
// Hermes form <tool_call>{"name": "bash", "arguments": {"command": "..."}}</tool_call>
// (or {"name": "submit", "arguments": {}}). The file is prompts/tools.json.
func ToolsJSON() string { return strings.TrimSuffix(toolsFile, "\n") }

var (
	fenceRe    = regexp.MustCompile("(?m)^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*$")
	submitRe   = regexp.MustCompile(`(?i)<\s*submit\s*/?\s*>`)
	toolCallRe = regexp.MustCompile(`(?s)<tool_call>(.*?)</tool_call>`)
)

// ErrNoAction and friends explain an unusable reply; their text is shown to
// the policy as the observation of an invalid step.
var (
	ErrNoAction = errors.New("no action found: reply with exactly one ```bash ... ``` block containing your commands, or <submit/> when the task is complete")
	ErrMultiple = errors.New("more than one command block: send exactly one ```bash ... ``` block per reply (combine commands with newlines or &&)")
	ErrUnclosed = errors.New("unterminated ``` block: close the command block with ``` on its own line")
)

// ParseAction reads one reply:
//
//   - a command is the content of the single fenced block tagged bash, sh,
//     shell or untagged; two or more such blocks are an error;
//   - a ```diff (or ```patch) block is returned as Patch;
//   - submit is <submit/> (also <submit> or < submit />) outside code blocks,
//     or a command block whose whole content is `submit`;
//   - a Hermes-style <tool_call>{"name": "bash"|"submit", "arguments": ...}</tool_call>
//     takes precedence over blocks; more than one tool call is an error.
func ParseAction(reply string) (Action, error) {
	if calls := toolCallRe.FindAllStringSubmatch(reply, -1); len(calls) > 0 {
		if len(calls) > 1 {
			return Action{}, errors.New("more than one tool call: call exactly one tool (bash or submit) per reply")
		}
		return parseToolCall(calls[0][1])
	}
	var a Action
	outside := &strings.Builder{}
	rest := reply
	commands := 0
	for {
		loc := fenceRe.FindStringSubmatchIndex(rest)
		if loc == nil {
			outside.WriteString(rest)
			break
		}
		outside.WriteString(rest[:loc[0]])
		lang := strings.ToLower(rest[loc[2]:loc[3]])
		body := rest[loc[1]:]
		if strings.HasPrefix(body, "\n") {
			body = body[1:]
		}
		end := closingFence(body)
		if end < 0 {
			return Action{}, ErrUnclosed
		}
		content := body[:end]
		rest = body[end:]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[nl+1:]
		} else {
			rest = ""
		}
		switch lang {
		case "bash", "sh", "shell", "":
			commands++
			if commands > 1 {
				return Action{}, ErrMultiple
			}
			if strings.TrimSpace(content) == "submit" {
				a.Submit = true
			} else {
				a.Command = strings.TrimRight(content, "\n")
			}
		case "diff", "patch":
			a.Patch = content
		}
	}
	if submitRe.MatchString(outside.String()) {
		a.Submit = true
	}
	if strings.TrimSpace(a.Command) == "" {
		a.Command = ""
	}
	if a.Command == "" && !a.Submit && a.Patch == "" {
		return Action{}, ErrNoAction
	}
	return a, nil
}

// closingFence returns the offset of the line that closes a block in body
// (a line that is ``` alone), or -1.
func closingFence(body string) int {
	off := 0
	for off <= len(body) {
		line := body[off:]
		nl := strings.IndexByte(line, '\n')
		if nl >= 0 {
			line = line[:nl]
		}
		if strings.TrimSpace(line) == "```" {
			return off
		}
		if nl < 0 {
			return -1
		}
		off += nl + 1
	}
	return -1
}

func parseToolCall(body string) (Action, error) {
	var call struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &call); err != nil {
		return Action{}, fmt.Errorf("tool call is not valid JSON (%v): use {\"name\": \"bash\", \"arguments\": {\"command\": \"...\"}}", err)
	}
	args := call.Arguments
	// Some engines send the arguments as a JSON-encoded string.
	var s string
	if json.Unmarshal(args, &s) == nil {
		args = json.RawMessage(s)
	}
	switch call.Name {
	case "submit":
		return Action{Submit: true}, nil
	case "bash":
		var p struct {
			Command string `json:"command"`
		}
		if err := json.Unmarshal(args, &p); err != nil || strings.TrimSpace(p.Command) == "" {
			return Action{}, errors.New(`bash tool call needs {"command": "<non-empty string>"}`)
		}
		return Action{Command: p.Command}, nil
	default:
		return Action{}, fmt.Errorf("unknown tool %q: the tools are bash and submit", call.Name)
	}
}

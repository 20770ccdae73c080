// Package shelltask is what the shell-task environments (env/harbor,
// env/swebench) share: the action language a policy speaks to a persistent
// sandbox shell, the hint that teaches it, the observation a command's
// result becomes, the episode's workspace, and the agent phase of an
// episode (Shell).
//
// Data flow of one episode: the environment's Reset makes a workspace
// (Shell.MakeWorkspace: a size-limited tmpfs where the runner can mount
// one), fills it and starts the agent's shell in it (Shell.Start); it shows
// the task followed by FormatHint. Each policy reply goes through
// Shell.Step: ParseAction → the command runs, bounded by the per-command
// timeout and the agent's deadline → FormatResult is the observation. On
// submit, or when the agent's time is up, the agent's sandbox is closed
// (every process in it dead) and the environment's SubmitFunc verifies the
// workspace and returns the reward; Shell.Close removes the workspace.
//
// The prompts are embedded files, one per prompt, under prompts/:
// format_hint.txt (FormatHint) and tools.json (ToolsJSON).
package shelltask

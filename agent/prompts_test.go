package agent

import "testing"

// TestDefaultPrompts pins the embedded prompt files to the texts the loop
// used when they were Go literals: an edit to a file (a stray trailing space
// or newline too) changes every rollout's tokens and must be deliberate.
func TestDefaultPrompts(t *testing.T) {
	for _, tc := range []struct{ name, got, want string }{
		{"summary_instruction", DefaultSummaryInstruction(), "Your context is full. Write a summary of your work so far that lets you continue without it: " +
			"the goal (the task will not be shown again), what is done (do not redo it), the key facts observed, " +
			"unresolved errors, the current state and the next step."},
		{"resume", DefaultResumeText(), "Your context was compacted. Your summary of the work so far follows; continue the task from it."},
		{"invalid_action", invalidActionObservation(), "invalid action: it could not be parsed; reply with one action in the format the system prompt gives"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("prompts/%s:\n got %q\nwant %q", tc.name, tc.got, tc.want)
			}
		})
	}
	if c := DefaultConfig(); c.SummaryInstruction != DefaultSummaryInstruction() || c.ResumeText != DefaultResumeText() {
		t.Error("DefaultConfig does not use the prompt files")
	}
}

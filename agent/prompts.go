package agent

import (
	_ "embed"
	"strings"
)

// The loop's default texts, one file each under prompts/. A file ends with
// one newline, which is not part of the text (fileText drops it).
var (
	//go:embed prompts/summary_instruction.txt
	summaryInstructionFile string
	//go:embed prompts/resume.txt
	resumeTextFile string
	//go:embed prompts/invalid_action.txt
	invalidActionFile string
)

// DefaultSummaryInstruction is the text of q_sum (prompts/summary_instruction.txt):
// it asks for what docs/design.md §1.3 lists.
func DefaultSummaryInstruction() string { return fileText(summaryInstructionFile) }

// DefaultResumeText introduces the summary after a compaction
// (prompts/resume.txt).
func DefaultResumeText() string { return fileText(resumeTextFile) }

// invalidActionObservation is shown after an invalid action when the
// environment says nothing (prompts/invalid_action.txt).
func invalidActionObservation() string { return fileText(invalidActionFile) }

// fileText is an embedded prompt file's text: the file without its final
// newline.
func fileText(file string) string { return strings.TrimSuffix(file, "\n") }

package vault

import (
	"fmt"
	"strings"
	"testing"
)

// TestPrompts pins the embedded prompt files to the texts the suite used
// when they were Go literals: an edit to a file (a stray trailing space or
// newline too) changes every episode's tokens and must be deliberate.
func TestPrompts(t *testing.T) {
	t.Run("system", func(t *testing.T) {
		want := "You search a vault of files for the values of keys. " +
			"Reply with exactly one action per turn: open F shows how many pages file F has; " +
			"read F P shows page P of file F; answer k v k v gives the value of every key asked for and ends the task. " +
			"Facts appear on pages as record key value."
		if SystemPrompt != want {
			t.Errorf("prompts/system.txt:\n got %q\nwant %q", SystemPrompt, want)
		}
	})
	for _, keys := range [][]string{{"amber"}, {"jade", "zinc", "sage"}} {
		t.Run("task "+strings.Join(keys, ","), func(t *testing.T) {
			got, err := taskText(keys, 7)
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("task: report the values of %s. the vault has %d files.", strings.Join(keys, " "), 7)
			if got != want {
				t.Errorf("prompts/task.tmpl:\n got %q\nwant %q", got, want)
			}
		})
	}
}

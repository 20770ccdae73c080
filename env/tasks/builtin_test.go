package tasks_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	_ "github.com/compactrl/compactrl/env/harbor"
	_ "github.com/compactrl/compactrl/env/swebench"
	"github.com/compactrl/compactrl/env/tasks"
)

// The environments register themselves, and a directory and a file each
// go to exactly one of them (also those neither says Yes to).
func TestBuiltinSources(t *testing.T) {
	if got := tasks.Names(); !slices.Equal(got, []string{"harbor", "swebench"}) {
		t.Fatalf("Names = %v", got)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "instances.jsonl")
	if err := os.WriteFile(file, []byte("\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "instances.txt")
	os.WriteFile(other, []byte("\n"), 0o644)
	task := filepath.Join(dir, "suite", "hello")
	os.MkdirAll(task, 0o755)
	os.WriteFile(filepath.Join(task, "task.toml"), nil, 0o644)
	for path, want := range map[string]string{dir: "harbor", file: "swebench", other: "swebench", task: "harbor", filepath.Dir(task): "harbor"} {
		if name, _, _, _ := tasks.Open(context.Background(), path, tasks.Options{}); name != want {
			t.Errorf("Open(%s) went to %q, want %q", path, name, want)
		}
	}
}

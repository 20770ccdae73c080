package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/internal/field"
	"github.com/compactrl/compactrl/recipe"
)

// A bad setting, from the file or from a KEY=VALUE override, is a
// field.Error naming its YAML path, and the message names the file too.
func TestLoadConfigNamesFileAndField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(path, []byte("rl:\n  lr: -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		overrides []string
		field     string
		want      string
	}{
		{nil, "rl.lr", "config " + path + ": rl.lr: -1 must not be negative"},
		{[]string{"rl.lr=0.001", "run.workers=0"}, "run.workers", "config " + path + " with rl.lr=0.001 run.workers=0: run.workers: 0 must be positive"},
		{[]string{"rl.lr=0.001", "agent.context=0"}, "agent.context", "agent.context: 0 must be positive"},
	} {
		_, err := loadConfig(path, recipe.DefaultConfig(), c.overrides)
		var fe *field.Error
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &fe) || fe.Path != c.field {
			t.Errorf("%v: %v (field %+v), want %q naming %s", c.overrides, err, fe, c.want, c.field)
		}
	}
}

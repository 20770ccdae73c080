package agent

import (
	"bytes"
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/compactrl/compactrl/internal/field"
)

// TestConfigYAML decodes every key over DefaultConfig strictly: each field
// has its key, and an absent key keeps the default.
func TestConfigYAML(t *testing.T) {
	const doc = `
context: 512
reserve: 192
keep_last: 1
max_compactions: 4
max_turns: 30
max_format_errors: 5
max_action_tokens: 16
max_summary_tokens: 48
max_observation_tokens: 40
no_compaction: true
temperature: 0.5
top_p: 0.9
system_prompt: sys
summary_instruction: sum
resume_text: go on
`
	want := Config{
		Context: 512, Reserve: 192, KeepLast: 1, MaxCompactions: 4, MaxTurns: 30, MaxFormatErrors: 5,
		MaxActionTokens: 16, MaxSummaryTokens: 48, MaxObservationTokens: 40, NoCompaction: true,
		Temperature: 0.5, TopP: 0.9, SystemPrompt: "sys", SummaryInstruction: "sum", ResumeText: "go on",
	}
	keys := strings.Count(strings.TrimSpace(doc), "\n") + 1
	if n := reflect.TypeFor[Config]().NumField(); n != keys {
		t.Fatalf("Config has %d fields, the document %d keys: a field lacks its key here", n, keys)
	}
	for _, tc := range []struct {
		name string
		doc  string
		want Config
	}{
		{"every key", doc, want},
		{"absent keys keep defaults", "reserve: 300\n", func() Config { c := DefaultConfig(); c.Reserve = 300; return c }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DefaultConfig()
			dec := yaml.NewDecoder(strings.NewReader(tc.doc))
			dec.KnownFields(true)
			if err := dec.Decode(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("decoded %+v\nwant    %+v", got, tc.want)
			}
		})
	}
	t.Run("unknown key", func(t *testing.T) {
		dec := yaml.NewDecoder(bytes.NewReader([]byte("window: 512\n")))
		dec.KnownFields(true)
		var c Config
		if err := dec.Decode(&c); err == nil {
			t.Error("the Go field name window was accepted as a key; the key is context")
		}
	})
}

// Budgets beyond MaxContextTokens / MaxCount, a NaN or huge temperature
// and a top_p outside [0, 1] are refused when the agent is built (before,
// only their lower ends were checked).
func TestConfigUpperBounds(t *testing.T) {
	for name, set := range map[string]func(*Config){
		"context":           func(c *Config) { c.Context = MaxContextTokens + 1 },
		"max_turns":         func(c *Config) { c.MaxTurns = MaxCount + 1 },
		"max_compactions":   func(c *Config) { c.MaxCompactions = 1 << 40 },
		"temperature":       func(c *Config) { c.Temperature = math.NaN() },
		"temperature ":      func(c *Config) { c.Temperature = 1e308 },
		"top_p":             func(c *Config) { c.TopP = 2 },
		"max_action_tokens": func(c *Config) { c.MaxActionTokens = 1 << 40 },
	} {
		cfg := testConfig()
		set(&cfg)
		_, err := New(context.Background(), cfg, Local(byteTok{}), testTmpl, &randSampler{})
		var fe *field.Error
		if !errors.Is(err, ErrConfig) || !errors.As(err, &fe) || fe.Path != strings.TrimSpace(name) {
			t.Errorf("%s: %v, want an ErrConfig with a field.Error naming it", name, err)
		}
	}
}

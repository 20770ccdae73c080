package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ConfigFile is the conventional name of a Hugging Face tokenizer's
// configuration (chat template, special tokens) in a checkpoint directory.
const ConfigFile = "tokenizer_config.json"

// Config is what the agent needs of tokenizer_config.json.
type Config struct {
	// ChatTemplate is the Jinja source of the default chat template ("" when
	// the file has none, e.g. GPT-OSS ships it as chat_template.jinja).
	ChatTemplate string
	BOS, EOS     string // bos_token and eos_token contents ("" when null)
	Class        string // tokenizer_class
	AddBOS       bool   // add_bos_token
}

// LoadConfig reads a tokenizer_config.json (or the one in a directory).
func LoadConfig(path string) (Config, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, ConfigFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("load tokenizer config: %w", err)
	}
	c, err := parseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("load tokenizer config %s: %w", path, err)
	}
	return c, nil
}

func parseConfig(b []byte) (Config, error) {
	var f struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		Class        string          `json:"tokenizer_class"`
		AddBOS       bool            `json:"add_bos_token"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return Config{}, err
	}
	c := Config{Class: f.Class, AddBOS: f.AddBOS}
	var err error
	if c.BOS, err = tokenContent(f.BOS); err != nil {
		return Config{}, fmt.Errorf("bos_token: %w", err)
	}
	if c.EOS, err = tokenContent(f.EOS); err != nil {
		return Config{}, fmt.Errorf("eos_token: %w", err)
	}
	if !isNull(f.ChatTemplate) {
		// a string, or a list of {name, template} of which "default" is used
		if err := json.Unmarshal(f.ChatTemplate, &c.ChatTemplate); err != nil {
			var named []struct{ Name, Template string }
			if err2 := json.Unmarshal(f.ChatTemplate, &named); err2 != nil {
				return Config{}, fmt.Errorf("chat_template: neither a string nor a list of {name, template}: %w", err)
			}
			for _, n := range named {
				if n.Name == "default" {
					c.ChatTemplate = n.Template
				}
			}
			if c.ChatTemplate == "" {
				return Config{}, errors.New("chat_template: a list without a \"default\" entry")
			}
		}
	}
	return c, nil
}

// tokenContent reads a special token given as a string or as an
// AddedToken object {"content": …}.
func tokenContent(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.Content == nil {
		return "", fmt.Errorf("want a string or an object with content, got %s", raw)
	}
	return *o.Content, nil
}

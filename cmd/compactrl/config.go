package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/compactrl/compactrl/internal/override"
	"github.com/compactrl/compactrl/recipe"
)

// overridesHelp is the part of train's, pretrain's and experiment's usage
// on KEY=VALUE arguments.
const overridesHelp = "Arguments KEY=VALUE override the config's keys (section.key, as in the YAML: rl.estimator=grpo\nrun.iterations=5); a key the config does not have is an error."

// parseOverrides parses a config command's line, whose positional
// arguments are KEY=VALUE overrides.
func parseOverrides(c *cmdLine, e env, args []string) ([]string, error) {
	c.maxArgs = -1
	pos, err := c.parse(e, args)
	if err != nil {
		return nil, err
	}
	if _, err := override.Parse(pos); err != nil {
		return nil, c.usageErr("%v", err)
	}
	return pos, nil
}

// loadConfig is the training config at path ("": def) with the key=value
// overrides applied to its YAML and the result parsed strictly
// (recipe.ParseConfig): an override of a key the config does not have is an
// error naming it.
func loadConfig(path string, def recipe.Config, overrides []string) (recipe.Config, error) {
	switch {
	case len(overrides) == 0 && path == "":
		return def, nil
	case len(overrides) == 0:
		return recipe.LoadConfig(path)
	}
	name := "config " + path
	var doc []byte
	var err error
	if path == "" {
		name = "default config"
		doc, err = def.YAML()
	} else {
		doc, err = os.ReadFile(path)
	}
	if err != nil {
		return def, fmt.Errorf("%s: %w", name, err)
	}
	if err := override.Check(recipe.Config{}, overrides); err != nil {
		return def, err
	}
	if doc, err = override.Apply(doc, overrides); err != nil {
		return def, fmt.Errorf("%s: %w", name, err)
	}
	cfg, err := recipe.ParseConfig(bytes.NewReader(doc))
	if err != nil {
		return cfg, fmt.Errorf("%s with %s: %w", name, strings.Join(overrides, " "), err)
	}
	return cfg, nil
}

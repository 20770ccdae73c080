package tasks

import (
	"errors"
	"slices"
	"strings"
)

// Setting is one option of a source's own (SWE-bench's --repos, Harbor's
// --reward-key): the command line offers it as a flag named Name and hands
// its value to every source in Options.Settings under the same name.
type Setting struct {
	Name    string // the flag's name, without dashes; the key in Settings
	Default string // the value when the flag is not given
	Usage   string // the flag's help text
}

// Settings are the values of the registered Settings, by Name (the
// Default of those not given).
type Settings map[string]string

// CheckFunc validates a source's settings before any task is loaded; its
// error names the flag.
type CheckFunc func(Settings) error

type sourceSettings struct {
	source string
	list   []Setting
	check  CheckFunc
}

var settings []sourceSettings // guarded by mu

// RegisterSettings adds source's own settings and the check of their
// values (nil: none). It panics if a name is empty or already registered,
// by any source (a programming error, found at start-up).
func RegisterSettings(source string, check CheckFunc, ss ...Setting) {
	mu.Lock()
	defer mu.Unlock()
	for _, s := range ss {
		if s.Name == "" || strings.HasPrefix(s.Name, "-") {
			panic("tasks: source " + source + " registers a setting without a name")
		}
		for _, r := range settings {
			if slices.ContainsFunc(r.list, func(o Setting) bool { return o.Name == s.Name }) {
				panic("tasks: setting " + s.Name + " registered by " + r.source + " and " + source)
			}
		}
	}
	settings = append(settings, sourceSettings{source, slices.Clone(ss), check})
}

// AllSettings are every source's settings, sorted by Name (the command
// line registers a flag for each).
func AllSettings() []Setting {
	mu.RLock()
	defer mu.RUnlock()
	var out []Setting
	for _, r := range settings {
		out = append(out, r.list...)
	}
	slices.SortFunc(out, func(a, b Setting) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// CheckSettings runs every source's check on s and joins their errors.
func CheckSettings(s Settings) error {
	mu.RLock()
	defer mu.RUnlock()
	var errs []error
	for _, r := range settings {
		if r.check == nil {
			continue
		}
		if err := r.check(s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Get is the value of setting name: its registered Default when s does
// not hold it (a caller that built Options by hand).
func (s Settings) Get(name string) string {
	if v, ok := s[name]; ok {
		return v
	}
	mu.RLock()
	defer mu.RUnlock()
	for _, r := range settings {
		for _, o := range r.list {
			if o.Name == name {
				return o.Default
			}
		}
	}
	return ""
}

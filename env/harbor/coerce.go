package harbor

import (
	"fmt"
	fielderr "github.com/compactrl/compactrl/internal/field"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// decoder turns task.toml's decoded TOML into Config the way Harbor's
// pydantic models validate it (lax mode): the first invalid value is an
// error naming the file and the field's dotted path; a key Harbor's model
// does not have is a warning (pydantic ignores extra keys).
type decoder struct {
	file     string
	warnings []string
	// declared, when set, is told each table's path and declared keys as
	// the table is decoded (tests reach every declared key through it).
	declared func(path string, names []string)
}

// errf is an invalid value in task.toml: a field.Error at path (the
// dotted key), wrapped with the file's name.
func (d *decoder) errf(path, format string, args ...any) error {
	return fmt.Errorf("%s: %w", d.file, fielderr.Errorf(path, format, args...))
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// table checks v is a TOML table (a pydantic model or dict field).
func (d *decoder) table(path string, v any) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, d.errf(path, "want a table, got %s", describe(v))
	}
	return m, nil
}

// key is one key of a task.toml table: its name and how its value is
// decoded into the config (set gets the key's dotted path). A key with a
// nil set is decoded by its table's own code; need, when not "", makes
// the key required, its absence an error saying need.
type key struct {
	name string
	set  func(path string, v any) error
	need string
}

// required makes k's absence an error.
func (k key) required() key { return k.requiredAs("required") }

// requiredAs makes k's absence an error saying msg.
func (k key) requiredAs(msg string) key {
	k.need = msg
	return k
}

// field declares a key whose value dec decodes into *dst.
func field[T any](name string, dst *T, dec func(string, any) (T, error)) key {
	return key{name: name, set: func(path string, v any) error {
		var err error
		*dst, err = dec(path, v)
		return err
	}}
}

// fieldRef declares an optional sub-table (or value) whose decoded value
// *dst points to; *dst stays nil when the key is absent or invalid.
func fieldRef[T any](name string, dst **T, dec func(string, any) (T, error)) key {
	return key{name: name, set: func(path string, v any) error {
		x, err := dec(path, v)
		if err != nil {
			return err
		}
		*dst = &x
		return nil
	}}
}

// listOf decodes an array whose elements dec decodes (an empty array is
// an empty, non-nil slice).
func listOf[T any](d *decoder, dec func(string, any) (T, error)) func(string, any) ([]T, error) {
	return func(path string, v any) ([]T, error) {
		l, err := d.list(path, v)
		if err != nil {
			return nil, err
		}
		out := make([]T, 0, len(l))
		for i, x := range l {
			y, err := dec(index(path, i), x)
			if err != nil {
				return nil, err
			}
			out = append(out, y)
		}
		return out, nil
	}
}

// keys decodes table t at path by its declared keys ks: it warns about
// each key of t that ks does not declare, then decodes t's keys in the
// order ks declares them, stopping at the first error.
func (d *decoder) keys(path string, t map[string]any, ks ...key) error {
	d.undeclared(path, t, ks)
	return d.decode(path, t, ks)
}

// undeclared warns about each key of m that ks does not declare
// (pydantic ignores extra keys; compactrl says so).
func (d *decoder) undeclared(path string, m map[string]any, ks []key) {
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.name
	}
	if d.declared != nil {
		d.declared(path, names)
	}
	var unknown []string
	for k := range m {
		if !slices.Contains(names, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		d.warnings = append(d.warnings, fmt.Sprintf("%s: unknown key %s (Harbor's task model has no such field; ignored)", d.file, join(path, k)))
	}
}

// decode runs, in declared order, the set of each key of ks that t holds;
// a required key t lacks is an error where it is declared.
func (d *decoder) decode(path string, t map[string]any, ks []key) error {
	for _, k := range ks {
		v, ok := t[k.name]
		switch {
		case ok && k.set != nil:
			if err := k.set(join(path, k.name), v); err != nil {
				return err
			}
		case !ok && k.need != "":
			return d.errf(join(path, k.name), "%s", k.need)
		}
	}
	return nil
}

// describe names a TOML value's type for an error message.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("string %q", x)
	case int64:
		return fmt.Sprintf("integer %d", x)
	case float64:
		return fmt.Sprintf("float %v", x)
	case bool:
		return fmt.Sprintf("boolean %v", x)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("%T %v", v, v)
}

// str is a pydantic str field: strings only (no coercion from numbers).
func (d *decoder) str(path string, v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", d.errf(path, "want a string, got %s", describe(v))
	}
	return s, nil
}

// integer is a pydantic int field (lax): an integer, a boolean, a float
// with no fractional part, or a string holding one.
func (d *decoder) integer(path string, v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) || x != math.Trunc(x) || math.Abs(x) >= 1<<63 {
			return 0, d.errf(path, "want an integer, got %v", x)
		}
		return int64(x), nil
	case string:
		if n, ok := pydanticIntString(x); ok {
			return n, nil
		}
	}
	return 0, d.errf(path, "want an integer, got %s", describe(v))
}

// float is a pydantic float field (lax): a number, a boolean, or a string
// holding one (inf and nan included, as pydantic allows them).
func (d *decoder) float(path string, v any) (float64, error) {
	switch x := v.(type) {
	case int64:
		return float64(x), nil
	case float64:
		return x, nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case string:
		if f, err := parseFloatASCII(strings.TrimFunc(x, pySpace)); err == nil {
			return f, nil
		}
	}
	return 0, d.errf(path, "want a number, got %s", describe(v))
}

// boolean is a pydantic bool field (lax): a boolean, 0 or 1, or one of
// pydantic's words (true/false, yes/no, on/off, t/f, y/n, 1/0).
func (d *decoder) boolean(path string, v any) (bool, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case int64:
		if x == 0 || x == 1 {
			return x == 1, nil
		}
	case float64:
		if x == 0 || x == 1 {
			return x == 1, nil
		}
	case string:
		if b, ok := pydanticBoolString(x); ok {
			return b, nil
		}
	}
	return false, d.errf(path, "want a boolean, got %s", describe(v))
}

// user is a `str | int | None` field (a user name or UID), kept as text.
func (d *decoder) user(path string, v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	n, err := d.integer(path, v)
	if err != nil {
		return "", d.errf(path, "want a user name or UID, got %s", describe(v))
	}
	return strconv.FormatInt(n, 10), nil
}

// list is a TOML array (of values or of tables).
func (d *decoder) list(path string, v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case []map[string]any:
		out := make([]any, len(x))
		for i, m := range x {
			out[i] = m
		}
		return out, nil
	}
	return nil, d.errf(path, "want an array, got %s", describe(v))
}

func (d *decoder) strList(path string, v any) ([]string, error) {
	l, err := d.list(path, v)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(l))
	for i, x := range l {
		if out[i], err = d.str(index(path, i), x); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (d *decoder) strMap(path string, v any) (map[string]string, error) {
	m, err := d.table(path, v)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		if out[k], err = d.str(join(path, k), x); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// nonEmpty is a str field that must not be "".
func (d *decoder) nonEmpty(path string, v any) (string, error) {
	s, err := d.str(path, v)
	if err == nil && s == "" {
		err = d.errf(path, "must not be empty")
	}
	return s, err
}

// oneOf is a Literal[...] field of the allowed strings.
func (d *decoder) oneOf(allowed ...string) func(string, any) (string, error) {
	return func(path string, v any) (string, error) { return d.enum(path, v, allowed...) }
}

func (d *decoder) enum(path string, v any, allowed ...string) (string, error) {
	s, err := d.str(path, v)
	if err != nil {
		return "", err
	}
	if !slices.Contains(allowed, s) {
		return "", d.errf(path, "%q is not one of %s", s, strings.Join(allowed, ", "))
	}
	return s, nil
}

// Range limits compactrl puts on task.toml on top of Harbor's model (which
// has none): values past them are refused at load, never wrapped or
// clamped.
const (
	MaxTimeoutSec = 7 * 24 * 3600 // any duration: 7 days
	MaxMemoryMB   = 1 << 20       // memory_mb, storage_mb: 1 TiB
	MaxCPUs       = 1024
	MaxGPUs       = 1024
	MaxRetries    = 1 << 20 // healthcheck retries
)

// duration checks a seconds value against [lo, MaxTimeoutSec] (lo = 0 with
// positive set means > 0).
func (d *decoder) duration(path string, v float64, positive bool) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return d.errf(path, "%v is not a finite number of seconds", v)
	case positive && v <= 0:
		return d.errf(path, "%v: want > 0 seconds", v)
	case v < 0:
		return d.errf(path, "%v: want ≥ 0 seconds", v)
	case v > MaxTimeoutSec:
		return d.errf(path, "%v seconds exceeds compactrl's limit of %d (7 days)", v, MaxTimeoutSec)
	}
	return nil
}

// seconds is a duration in seconds: a float in [0, MaxTimeoutSec].
func (d *decoder) seconds(path string, v any) (float64, error) {
	f, err := d.float(path, v)
	if err == nil {
		err = d.duration(path, f, false)
	}
	return f, err
}

// positiveSeconds is a duration in seconds in (0, MaxTimeoutSec].
func (d *decoder) positiveSeconds(path string, v any) (float64, error) {
	f, err := d.float(path, v)
	if err == nil {
		err = d.duration(path, f, true)
	}
	return f, err
}

// boundedInt is an int field in [0, max]; what names the limit in errors.
func (d *decoder) boundedInt(max float64, what string) func(string, any) (int64, error) {
	return func(path string, v any) (int64, error) {
		n, err := d.integer(path, v)
		if err == nil {
			err = d.bounded(path, float64(n), max, what)
		}
		return n, err
	}
}

// bounded checks 0 ≤ v ≤ max.
func (d *decoder) bounded(path string, v, max float64, what string) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return d.errf(path, "%v is not a finite number", v)
	case v < 0:
		return d.errf(path, "%v: want ≥ 0", v)
	case v > max:
		return d.errf(path, "%v exceeds compactrl's limit of %v (%s)", v, max, what)
	}
	return nil
}

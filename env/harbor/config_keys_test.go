package harbor

import (
	"bytes"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// keyExamples holds a valid value for each declared key, by the key's
// path with array indices dropped ("steps.agent.user") or, failing that,
// by its name. A table's example holds its required keys, and for a
// table that a config always has, one more key, so that its presence
// shows in the Config.
var keyExamples = map[string]any{
	"schema_version":             "1.0",
	"version":                    "1.1",
	"task":                       map[string]any{"name": "org/t"},
	"metadata":                   map[string]any{"k": "v"},
	"verifier":                   map[string]any{"user": "v"},
	"agent":                      map[string]any{"user": "a"},
	"environment":                map[string]any{"docker_image": "img"},
	"solution":                   map[string]any{"env": map[string]any{"S": "s"}},
	"source":                     "src",
	"multi_step_reward_strategy": "final",
	"steps":                      []map[string]any{{"name": "s"}},
	"artifacts":                  []map[string]any{{"source": "/out"}},

	"task.name":   "org/n",
	"name":        "n2",
	"authors":     []map[string]any{{"name": "A"}},
	"email":       "a@example.com",
	"description": "d",
	"keywords":    []any{"k"},

	"timeout_sec":      5,
	"env":              map[string]any{"K": "v"},
	"user":             "u",
	"network_mode":     "no-network",
	"allowed_hosts":    []any{"example.com"},
	"environment_mode": "separate",
	"collect":          []map[string]any{{"command": "c"}},
	"command":          "cmd2",
	"service":          "svc",

	"build_timeout_sec":  5,
	"docker_image":       "image2",
	"os":                 "windows",
	"cpus":               2,
	"memory_mb":          512,
	"storage_mb":         1024,
	"gpus":               1,
	"gpu_types":          []any{"h100"},
	"tpu":                map[string]any{"type": "v4", "topology": "2x2"},
	"type":               "v5",
	"topology":           "2x4",
	"mcp_servers":        []map[string]any{{"name": "m", "url": "http://x"}},
	"transport":          "streamable-http",
	"url":                "http://y",
	"args":               []any{"a"},
	"headers":            map[string]any{"X-A": "b"},
	"skills_dir":         "skills",
	"healthcheck":        map[string]any{"command": "hc"},
	"interval_sec":       7,
	"start_period_sec":   1,
	"start_interval_sec": 2,
	"retries":            4,
	"workdir":            "/w",
	"allow_internet":     false,
	"memory":             "4G",
	"storage":            "8G",

	"min_reward":  0.5,
	"destination": "dst",
	"exclude":     []any{"x"},
}

// keySiblings are keys a key is only valid with; the key is checked
// against a table that already holds them.
var keySiblings = map[string]map[string]any{
	"allowed_hosts": {"network_mode": "allowlist"},
}

// Every key a table declares parses: set (with a valid value) in a
// task.toml, it draws no unknown-key warning and changes the Config.
// Tables are found through the declarations themselves: each table a
// parsed example opens is checked in turn.
func TestEveryDeclaredKeyParses(t *testing.T) {
	type parsed struct {
		cfg      Config
		warnings []string
		tables   map[string][]string
	}
	parse := func(doc map[string]any) (parsed, error) {
		var buf bytes.Buffer
		if err := toml.NewEncoder(&buf).Encode(doc); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if _, err := toml.Decode(buf.String(), &m); err != nil {
			t.Fatalf("%v\n%s", err, buf.String())
		}
		r := parsed{tables: map[string][]string{}}
		d := &decoder{file: "task.toml", declared: func(p string, names []string) { r.tables[p] = names }}
		var err error
		r.cfg, err = d.parseConfig(m)
		r.warnings = d.warnings
		if err != nil {
			return r, &docError{err, buf.String()}
		}
		return r, nil
	}

	checked := map[string]bool{}
	keys := 0
	queue := []map[string]any{{}}
	for len(queue) > 0 {
		doc := queue[0]
		queue = queue[1:]
		base, err := parse(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range sortedTables(base.tables) {
			if checked[p] {
				continue
			}
			checked[p] = true
			for _, name := range base.tables[p] {
				keys++
				path := join(p, name)
				ex, ok := keyExamples[join(stripIndices(p), name)]
				if !ok {
					ex, ok = keyExamples[name]
				}
				if !ok {
					t.Errorf("%s: declared key has no example value in keyExamples", path)
					continue
				}
				with := deepCopy(doc).(map[string]any)
				for k, v := range keySiblings[name] {
					at(with, p)[k] = v
				}
				without, err := parse(with)
				if err != nil {
					t.Errorf("%s: without the key: %v", path, err)
					continue
				}
				with = deepCopy(with).(map[string]any)
				at(with, p)[name] = deepCopy(ex)
				got, err := parse(with)
				if err != nil {
					t.Errorf("%s = %v: %v", path, ex, err)
					continue
				}
				for _, w := range got.warnings {
					if strings.Contains(w, "unknown key") {
						t.Errorf("%s = %v: %s", path, ex, w)
					}
				}
				if reflect.DeepEqual(got.cfg, without.cfg) {
					t.Errorf("%s = %v: the Config did not change", path, ex)
				}
				queue = append(queue, with)
			}
		}
	}
	t.Logf("%d declared keys checked in %d tables", keys, len(checked))
	// The walk must have reached the nested tables, not stopped at the top.
	for _, p := range []string{"", "task.authors[0]", "verifier.collect[0]", "verifier.environment.tpu",
		"environment.mcp_servers[0]", "steps[0].verifier.environment.healthcheck", "steps[0].artifacts[0]", "solution"} {
		if !checked[p] {
			t.Errorf("table %q never reached; reached %v", p, sortedTables(checkedNames(checked)))
		}
	}
}

type docError struct {
	err error
	doc string
}

func (e *docError) Error() string { return e.err.Error() + "\n" + e.doc }

func sortedTables(m map[string][]string) []string {
	var ps []string
	for p := range m {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

func checkedNames(m map[string]bool) map[string][]string {
	out := map[string][]string{}
	for p := range m {
		out[p] = nil
	}
	return out
}

// stripIndices drops a path's array indices: steps[0].agent → steps.agent.
func stripIndices(p string) string {
	for {
		i := strings.IndexByte(p, '[')
		if i < 0 {
			return p
		}
		j := strings.IndexByte(p[i:], ']')
		p = p[:i] + p[i+j+1:]
	}
}

// at is the table at a decoder path ("" is the document) in doc.
func at(doc map[string]any, p string) map[string]any {
	t := doc
	if p == "" {
		return t
	}
	for _, seg := range strings.Split(p, ".") {
		name, idx, indexed := strings.Cut(seg, "[")
		v := t[name]
		if indexed {
			i, _ := strconv.Atoi(strings.TrimSuffix(idx, "]"))
			v = v.([]map[string]any)[i]
		}
		t = v.(map[string]any)
	}
	return t
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, y := range x {
			out[k] = deepCopy(y)
		}
		return out
	case []map[string]any:
		out := make([]map[string]any, len(x))
		for i, y := range x {
			out[i] = deepCopy(y).(map[string]any)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, y := range x {
			out[i] = deepCopy(y)
		}
		return out
	}
	return v
}

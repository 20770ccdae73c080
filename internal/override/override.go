// Package override applies command-line settings of the form
// section.key=value (as Hydra and nanoGPT's configurator take them) to a
// YAML config document before it is parsed: Apply sets each dotted key in
// the document's node tree, creating the entries the file left out, and
// returns the edited document for the config's own strict parser; Check
// first refuses a key the config type does not have, naming the override.
package override

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Setting is one parsed key=value argument.
type Setting struct {
	Arg   string   // the argument as given
	Path  []string // the key split at dots
	Value string   // the text after the first '='
}

// Parse splits key=value arguments; a missing '=', an empty key or an
// empty path segment (a..b, .a, a.) is an error naming the argument.
func Parse(kv []string) ([]Setting, error) {
	out := make([]Setting, 0, len(kv))
	for _, arg := range kv {
		key, val, ok := strings.Cut(arg, "=")
		if !ok {
			return nil, fmt.Errorf("override %q: want section.key=value", arg)
		}
		path := strings.Split(key, ".")
		if slices.Contains(path, "") {
			return nil, fmt.Errorf("override %q: key %q has an empty part; want section.key=value", arg, key)
		}
		out = append(out, Setting{Arg: arg, Path: path, Value: val})
	}
	return out, nil
}

// Apply sets each key=value of kv in the YAML document doc and returns the
// document. A value is read as a YAML scalar or flow collection (5, 0.5,
// true, seq-mean-token-mean, [1, 2]); an empty value is the empty string.
// Later settings of one key win. A key that goes into a scalar or a list
// is an error naming the override.
func Apply(doc []byte, kv []string) ([]byte, error) {
	settings, err := Parse(kv)
	if err != nil {
		return nil, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("override: config: %w", err)
	}
	if root.Kind == 0 { // an empty document
		root = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}}
	}
	top := root.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, errors.New("override: config: the document is not a mapping of sections")
	}
	for _, s := range settings {
		v, err := valueNode(s)
		if err != nil {
			return nil, err
		}
		if err := set(top, s, v); err != nil {
			return nil, err
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, fmt.Errorf("override: %w", err)
	}
	return b.Bytes(), enc.Close()
}

// valueNode parses a setting's value as one YAML node.
func valueNode(s Setting) (*yaml.Node, error) {
	if s.Value == "" {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ""}, nil
	}
	var d yaml.Node
	if err := yaml.Unmarshal([]byte(s.Value), &d); err != nil || len(d.Content) != 1 {
		return nil, fmt.Errorf("override %q: value %q is not a YAML value: %v", s.Arg, s.Value, err)
	}
	v := d.Content[0]
	if v.Kind == yaml.MappingNode && v.Style&yaml.FlowStyle == 0 {
		return nil, fmt.Errorf("override %q: value %q reads as a key: quote it or set each key on its own", s.Arg, s.Value)
	}
	return v, nil
}

// set walks m along s.Path, adding missing sections, and puts v last.
func set(m *yaml.Node, s Setting, v *yaml.Node) error {
	for i, k := range s.Path {
		at := strings.Join(s.Path[:i+1], ".")
		j := Lookup(m, k)
		if i == len(s.Path)-1 {
			if j < 0 {
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, v)
			} else {
				old := m.Content[j+1]
				v.HeadComment, v.LineComment, v.FootComment = old.HeadComment, old.LineComment, old.FootComment
				m.Content[j+1] = v
			}
			return nil
		}
		if j < 0 {
			child := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, child)
			m = child
			continue
		}
		if next := m.Content[j+1]; next.Kind == yaml.MappingNode {
			m = next
			continue
		} else if next.Kind == yaml.ScalarNode && next.Tag == "!!null" { // "section:" left empty
			*next = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			m = next
			continue
		}
		return fmt.Errorf("override %q: %s is a value in the config, not a section", s.Arg, at)
	}
	return nil
}

// Lookup returns the index in m.Content of the key node k of mapping m
// (its value follows it), -1 if absent or m is not a mapping.
func Lookup(m *yaml.Node, k string) int {
	if m.Kind != yaml.MappingNode {
		return -1
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == k {
			return i
		}
	}
	return -1
}

// Check refuses an override whose key the config type of schema (a struct
// decoded from YAML) does not have, naming the override and the keys that
// exist there. Struct fields are known by their yaml tags (",inline"
// structs lend theirs); a map takes any key.
func Check(schema any, kv []string) error {
	settings, err := Parse(kv)
	if err != nil {
		return err
	}
	for _, s := range settings {
		t := reflect.TypeOf(schema)
		for i, k := range s.Path {
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			at := strings.Join(s.Path[:i], ".")
			switch t.Kind() {
			case reflect.Map:
				t = t.Elem()
				continue
			case reflect.Struct:
			default:
				return fmt.Errorf("override %q: %s is a value in the config, not a section", s.Arg, at)
			}
			f, ok := field(t, k)
			if !ok {
				where := "the config"
				if at != "" {
					where = at
				}
				return fmt.Errorf("override %q: %s has no key %q (known: %s)", s.Arg, where, k, strings.Join(keys(t), ", "))
			}
			t = f
		}
	}
	return nil
}

// YAMLKey is a struct field's YAML key as gopkg.in/yaml.v3 reads it (the
// tag's name, else the lower-cased field name; "" for a skipped field) and
// whether the field's own fields are inlined into the enclosing mapping.
func YAMLKey(f reflect.StructField) (string, bool) {
	name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || (!f.IsExported() && !f.Anonymous) {
		return "", false
	}
	if strings.Contains(","+opts+",", ",inline,") {
		return "", true
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, false
}

// field finds the type of key k in struct t, inline structs included.
func field(t reflect.Type, k string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline := YAMLKey(f)
		if inline {
			if ft, ok := field(f.Type, k); ok {
				return ft, true
			}
			continue
		}
		if name == k {
			return f.Type, true
		}
	}
	return nil, false
}

// keys lists the YAML keys of struct t, inline structs included.
func keys(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline := YAMLKey(f)
		switch {
		case inline:
			out = append(out, keys(f.Type)...)
		case name != "":
			out = append(out, name)
		}
	}
	return out
}

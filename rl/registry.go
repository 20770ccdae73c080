package rl

import "fmt"

// entry is one registered function under its name.
type entry[N ~string, F any] struct {
	name N
	fn   F
}

// names lists the names of entries in order.
func names[N ~string, F any](entries []entry[N, F]) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = string(e.name)
	}
	return out
}

// lookup returns the entry named name; an unknown name is an error naming
// what kind of entry was asked for and listing the valid names.
func lookup[N ~string, F any](entries []entry[N, F], kind, name string) (entry[N, F], error) {
	for _, e := range entries {
		if string(e.name) == name {
			return e, nil
		}
	}
	return entry[N, F]{}, fmt.Errorf("unknown %s %q, want one of %v", kind, name, names(entries))
}

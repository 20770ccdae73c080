package tasks

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/agent"
)

// withSources runs f with only the sources it registers.
func withSources(t *testing.T, f func()) {
	t.Helper()
	mu.Lock()
	saved := sources
	sources = map[string]source{}
	mu.Unlock()
	defer func() {
		mu.Lock()
		sources = saved
		mu.Unlock()
	}()
	f()
}

func isDir(_ string, fi fs.FileInfo) Match {
	if fi.IsDir() {
		return Yes
	}
	return No
}

func anyFile(_ string, fi fs.FileInfo) Match {
	if fi.IsDir() {
		return No
	}
	return Fallback
}

func named(name string) Source {
	return SourceFunc(func(_ context.Context, path string, o Options) ([]Task, []Skipped, error) {
		return []Task{{Name: name + ":" + filepath.Base(path) + ":" + o.Root(), New: func(bool) agent.Environment { return nil }}},
			[]Skipped{{Task: "x", Reason: "why"}}, nil
	})
}

func TestOpenDispatchesOnDetect(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "i.jsonl")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	withSources(t, func() {
		Register("dirs", isDir, named("dirs"))
		Register("files", func(p string, fi fs.FileInfo) Match {
			if !fi.IsDir() && strings.HasSuffix(p, ".jsonl") {
				return Yes
			}
			return No
		}, named("files"))
		if got := Names(); len(got) != 2 || got[0] != "dirs" || got[1] != "files" {
			t.Fatalf("Names = %v", got)
		}
		root := "/w"
		name, ts, sk, err := Open(context.Background(), file, Options{WorkRoot: func() string { return root }})
		if err != nil || name != "files" || len(ts) != 1 || ts[0].Name != "files:i.jsonl:/w" || len(sk) != 1 {
			t.Fatalf("Open(file) = %q %+v %+v %v", name, ts, sk, err)
		}
		if name, _, _, err := Open(context.Background(), dir, Options{}); err != nil || name != "dirs" {
			t.Fatalf("Open(dir) = %q %v", name, err)
		}
		other := filepath.Join(dir, "x.txt")
		os.WriteFile(other, nil, 0o644)
		if _, _, _, err := Open(context.Background(), other, Options{}); err == nil || !strings.Contains(err.Error(), "no task source takes it (registered: dirs, files)") {
			t.Fatalf("unclaimed path: %v", err)
		}
		if _, _, _, err := Open(context.Background(), filepath.Join(dir, "missing"), Options{}); !os.IsNotExist(err) {
			t.Fatalf("missing path: %v", err)
		}
		// A fallback takes what no source says Yes to, and only that.
		Register("anyfile", anyFile, named("anyfile"))
		if name, _, _, err := Open(context.Background(), other, Options{}); err != nil || name != "anyfile" {
			t.Fatalf("Open(other) = %q %v", name, err)
		}
		if name, _, _, err := Open(context.Background(), file, Options{}); err != nil || name != "files" {
			t.Fatalf("Open(context.Background(), file) with a fallback = %q %v", name, err)
		}
		Register("alsodirs", isDir, named("alsodirs"))
		if _, _, _, err := Open(context.Background(), dir, Options{}); err == nil || !strings.Contains(err.Error(), "alsodirs and dirs both take it") {
			t.Fatalf("overlap: %v", err)
		}
	})
}

func TestRegisterRefusesDuplicatesAndNil(t *testing.T) {
	withSources(t, func() {
		Register("a", isDir, named("a"))
		for name, f := range map[string]func(){
			"twice":     func() { Register("a", isDir, named("a")) },
			"no name":   func() { Register("", isDir, named("a")) },
			"no detect": func() { Register("b", nil, named("b")) },
			"no source": func() { Register("c", isDir, nil) },
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s: no panic", name)
					}
				}()
				f()
			}()
		}
	})
}

func TestOptionsCallbacksMayBeNil(t *testing.T) {
	var o Options
	o.Warning("w")
	o.Note("n")
	if o.Root() != "" {
		t.Fatal("Root of no WorkRoot")
	}
}

// A generated suite registered by name opens from NAME[:KNOBS]; anything
// else is not a suite (a path for Open); bad knobs are an error naming it.
func TestOpenSuite(t *testing.T) {
	RegisterSuite("gen-test", func(knobs string) (Suite, error) {
		if knobs == "bad" {
			return nil, errors.New("bad knobs")
		}
		return Named([]Task{{Name: "t-" + knobs, New: func(bool) agent.Environment { return nil }}}), nil
	})
	name, s, ok, err := OpenSuite("gen-test:x")
	if err != nil || !ok || name != "gen-test" || !s.Has("t-x") || s.Has("t-y") {
		t.Fatalf("OpenSuite: %q %v %v %v", name, s, ok, err)
	}
	_, err = s.Env("t-y")
	var ue *UnknownTaskError
	if !errors.As(err, &ue) || ue.ID != "t-y" {
		t.Errorf("Env of an unknown id: %v, want an *UnknownTaskError", err)
	}
	if _, _, ok, err := OpenSuite("some/dir"); ok || err != nil {
		t.Errorf("a path is a suite: %v %v", ok, err)
	}
	if _, _, ok, err := OpenSuite("gen-test:bad"); !ok || err == nil || !strings.HasPrefix(err.Error(), "gen-test: bad knobs") {
		t.Errorf("bad knobs: %v %v", ok, err)
	}
	if names := SuiteNames(); !slices.Contains(names, "gen-test") || !slices.IsSorted(names) {
		t.Errorf("SuiteNames %v: want gen-test among them, sorted", names)
	}
	defer func() {
		if recover() == nil {
			t.Error("a second registration under one name did not panic")
		}
	}()
	RegisterSuite("gen-test", func(string) (Suite, error) { return nil, nil })
}

// A source's settings come back sorted with the others', their defaults
// stand in for values not given, and a source's check refuses bad ones.
func TestRegisterSettings(t *testing.T) {
	RegisterSettings("settings-test", func(s Settings) error {
		if s.Get("zz-test-level") == "bad" {
			return errors.New("--zz-test-level bad")
		}
		return nil
	}, Setting{Name: "zz-test-level", Default: "easy", Usage: "test"})
	all := AllSettings()
	if len(all) == 0 || all[len(all)-1].Name != "zz-test-level" {
		t.Fatalf("AllSettings = %v, want zz-test-level last", all)
	}
	if got := (Settings{}).Get("zz-test-level"); got != "easy" {
		t.Fatalf("default: %q", got)
	}
	if err := CheckSettings(Settings{"zz-test-level": "bad"}); err == nil {
		t.Fatal("bad value accepted")
	}
	if err := CheckSettings(Settings{"zz-test-level": "hard"}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a setting registered twice did not panic")
		}
	}()
	RegisterSettings("other", nil, Setting{Name: "zz-test-level"})
}

package harbor

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// Staging the tests into a directory that container processes can change
// (the guarded /tests) never follows a link planted there: a process that
// keeps swapping test.sh for a symlink to a host file while the host
// stages cannot get that file's mode changed or its contents written.
func TestStageIntoNeverFollowsLinks(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "test.sh"), []byte("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "sub", "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(outside, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	// One swapper at a time: test.sh for a link to the host file, then
	// sub/ for a link to the host file's directory.
	for _, swap := range []struct{ name, target string }{{"test.sh", outside}, {"sub", filepath.Dir(outside)}} {
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			tmp := filepath.Join(dst, ".swap")
			for !stop.Load() {
				os.Symlink(swap.target, tmp)
				os.Rename(tmp, filepath.Join(dst, swap.name))
			}
		}()
		for range 300 {
			if err := clearDir(dst); err != nil {
				t.Fatal(err)
			}
			stageInto(src, dst) // errors are expected: the swapper races it
		}
		stop.Store(true)
		wg.Wait()
	}
	st, err := os.Stat(outside)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("the host file's mode became %v through a planted link", st.Mode().Perm())
	}
	if b, _ := os.ReadFile(outside); string(b) != "host" {
		t.Fatalf("the host file was written through a planted link: %q", b)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(outside), "data")); err == nil {
		t.Fatal("a file was staged outside through a planted directory link")
	}
	// Without interference the copy is exact, test.sh executable.
	if err := clearDir(dst); err != nil {
		t.Fatal(err)
	}
	if err := stageInto(src, dst); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(filepath.Join(dst, "test.sh")); err != nil || st.Mode() != 0o755 {
		t.Fatalf("test.sh staged as %v, %v; want a regular file 0755", st.Mode(), err)
	}
}

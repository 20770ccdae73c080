package serve

import (
	"strings"
	"syscall"
	"testing"
)

// RaiseOpenFiles lifts a low soft limit to what is needed, and refuses,
// saying so, when the hard limit is below it.
func TestRaiseOpenFiles(t *testing.T) {
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) })
	if orig.Max < 512 {
		t.Skipf("hard open-file limit %d", orig.Max)
	}
	low := orig
	low.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	got, err := RaiseOpenFiles(400)
	var now syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now)
	if err != nil || got != 400 || now.Cur != 400 {
		t.Fatalf("raise 256 → 400: %d %v (soft now %d)", got, err, now.Cur)
	}
	if orig.Max < 1<<62 {
		_, err = RaiseOpenFiles(uint64(orig.Max) + 1)
		if err == nil || !strings.Contains(err.Error(), "hard limit") || !strings.Contains(err.Error(), "--max-episodes") {
			t.Fatalf("above the hard limit: %v", err)
		}
	}
	s, _ := New(Config{MaxInFlight: 64, MaxQueue: 256}, &testFactory{})
	if n := s.OpenFilesNeeded(); n != 64+256+ConnHeadroom+64*FilesPerEpisode+baseFiles {
		t.Fatalf("OpenFilesNeeded %d", n)
	}
}

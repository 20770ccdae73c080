//go:build unix

package sandbox

import (
	"syscall"
	"testing"
)

// mkfifo makes a named pipe at path (TestReadRegular's FIFO case) and
// reports that the system has them.
func mkfifo(t *testing.T, path string) bool {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	return true
}

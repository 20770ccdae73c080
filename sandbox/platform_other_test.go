//go:build unix && !linux

package sandbox

import (
	"context"
	"strings"
	"testing"
)

// TestBubblewrapRefusesOffLinux checks that Bubblewrap says what to use
// instead where it cannot run.
func TestBubblewrapRefusesOffLinux(t *testing.T) {
	b := Bubblewrap{}
	if err := b.Available(); err == nil || !strings.Contains(err.Error(), "--runner docker") {
		t.Errorf("Available() = %v; want an error naming --runner docker", err)
	}
	if _, err := b.Start(context.Background(), Spec{Workdir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "needs Linux") {
		t.Errorf("Start = %v; want an error saying bubblewrap needs Linux", err)
	}
}

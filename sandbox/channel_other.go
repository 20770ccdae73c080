//go:build !linux

package sandbox

import (
	"fmt"
	"runtime"
)

// GuardedDir guards a verifier's reward directory; Linux only (fanotify).
type GuardedDir struct{}

// GuardAvailable reports whether this host can guard guarded dirs.
func GuardAvailable() error {
	return fmt.Errorf("%w on %s: it needs Linux fanotify", ErrNoGuard, runtime.GOOS)
}

// OpenGuardedDir is unavailable here.
func OpenGuardedDir(dir string, size int64) (*GuardedDir, error) {
	return nil, GuardAvailable()
}

// Admit is a no-op here.
func (c *GuardedDir) Admit(open, change AdmitFunc) {}

// Sync is a no-op here.
func (c *GuardedDir) Sync() {}

// ViolationCount is 0 here.
func (c *GuardedDir) ViolationCount() int { return 0 }

// Seal is a no-op here.
func (c *GuardedDir) Seal() {}

// Violations is empty here.
func (c *GuardedDir) Violations() []ChannelOpen { return nil }

// DeniedWhileClosed is 0 here.
func (c *GuardedDir) DeniedWhileClosed() int { return 0 }

// Close is a no-op here.
func (c *GuardedDir) Close() error { return nil }

// Holders is empty here.
func (c *GuardedDir) Holders() []string { return nil }

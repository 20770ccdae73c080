//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// hostHardLimits are the container ulimits asked for where the host's own
// limits cannot be read the Linux way.
func hostHardLimits() (nofile, nproc uint64) { return 20000, 4096 }

// execLeaders: the host cannot see a VM-backed engine's processes.
func (b *Box) execLeaders() map[int]bool { return nil }

func (b *Box) newLeader(map[int]bool, string, string) int { return 0 }

func (b *Box) killSession(int) error { return nil }

func procStat(int) (ppid, sid int, ok bool) { return 0, 0, false }

func sessionMembers(int) []int { return nil }

func threadsTraced(int) bool { return false }

func procAlive(int) bool { return false }

// killAll asks the engine to kill every process of the box.
func (b *Box) killAll() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := b.c.run(ctx, "kill", "--signal", "KILL", b.id); err != nil {
		return fmt.Errorf("sandbox: kill container %s: %w", b.id, err)
	}
	return nil
}

func pidNS(int) string { return "" }

// forkTracker follows a run's processes; Linux only.
type forkTracker struct{}

func newForkTracker(int) (*forkTracker, error) {
	return nil, errors.New("following a run's processes needs Linux's proc connector")
}

func (t *forkTracker) member(int) (yes, lost bool) { return false, false }

func (t *forkTracker) close() {}

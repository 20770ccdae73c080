//go:build !linux

package sandbox

// hostHardLimits are the container ulimits asked for where the host's own
// limits cannot be read the Linux way.
func hostHardLimits() (nofile, nproc uint64) { return 20000, 4096 }

// execLeaders: the host cannot see a VM-backed engine's processes.
func (b *Box) execLeaders() map[int]bool { return nil }

func (b *Box) newLeader(map[int]bool, string) int { return 0 }

func (b *Box) killSession(int) error { return nil }

func procStat(int) (ppid, sid int, ok bool) { return 0, 0, false }

func sessionMembers(int) []int { return nil }

func threadsTraced(int) bool { return false }

func procAlive(int) bool { return false }

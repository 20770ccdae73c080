//go:build unix

package train

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time (user + system) the process has used so far,
// which on a shared machine measures the work better than wall time.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

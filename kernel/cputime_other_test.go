//go:build !unix

package kernel

import "time"

// processCPU is unavailable here: the CPU-time metric is left out.
func processCPU() time.Duration { return 0 }

//go:build !unix

package bench

import "time"

// processCPU is unknown (0) off unix: CPU shares are then reported as 0.
func processCPU() time.Duration { return 0 }

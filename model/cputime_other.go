//go:build !unix

package model

import "time"

// processCPU is unavailable here; CPU-normalised rates are then 0.
func processCPU() time.Duration { return 0 }

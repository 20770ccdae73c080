package testenv

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TimeScaleEnv overrides the factor Deadline multiplies by (a number ≥ 1).
const TimeScaleEnv = "COMPACTRL_TEST_TIME_SCALE"

// maxScale bounds the load-derived factor: a deadline is there to catch a
// hang, and a machine loaded beyond this is not one a test can be timed on.
const maxScale = 8

// Deadline is d stretched by how busy the machine is, for a test's
// deadline on real work (a container, a server, an episode):
//
//	d · clamp(load₁ / NumCPU, 1, 8)
//
// with load₁ the one-minute load average (/proc/loadavg; 1 where there is
// none), or d · $COMPACTRL_TEST_TIME_SCALE when that is set. On a quiet
// machine it is d; with two CPU-bound processes beside the tests on two
// cores, about twice d. Only a hang is caught later; a test that finishes
// does not wait for it.
func Deadline(t testing.TB, d time.Duration) time.Duration {
	t.Helper()
	s, err := timeScale(os.Getenv(TimeScaleEnv), loadAverage(), runtime.NumCPU())
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(float64(d) * s)
}

// timeScale is Deadline's factor from the override (if not empty), the
// load average and the CPU count.
func timeScale(override string, load float64, cpus int) (float64, error) {
	if override != "" {
		s, err := strconv.ParseFloat(override, 64)
		if err != nil || !(s >= 1) || math.IsInf(s, 1) {
			return 0, fmt.Errorf("$%s=%q: want a number ≥ 1", TimeScaleEnv, override)
		}
		return s, nil
	}
	if cpus < 1 || !(load > 0) {
		return 1, nil
	}
	return min(max(load/float64(cpus), 1), maxScale), nil
}

// loadAverage is the one-minute load average, or 0 where it cannot be read.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return v
}

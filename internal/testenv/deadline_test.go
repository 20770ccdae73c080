package testenv

import (
	"testing"
	"time"
)

func TestTimeScale(t *testing.T) {
	for _, c := range []struct {
		override string
		load     float64
		cpus     int
		want     float64
	}{
		{"", 0.3, 2, 1},   // quiet: the deadline as written
		{"", 4.2, 2, 2.1}, // two hogs beside a test on two cores
		{"", 100, 2, 8},   // bounded
		{"", 0, 2, 1},     // no /proc/loadavg
		{"", 3, 0, 1},
		{"3", 0.1, 2, 3}, // the override wins
		{"1", 40, 2, 1},
	} {
		got, err := timeScale(c.override, c.load, c.cpus)
		if err != nil || got != c.want {
			t.Errorf("timeScale(%q, %g, %d) = %g, %v; want %g", c.override, c.load, c.cpus, got, err, c.want)
		}
	}
	for _, bad := range []string{"0.5", "x", "NaN", "-2", "+Inf"} {
		if _, err := timeScale(bad, 1, 2); err == nil {
			t.Errorf("override %q accepted", bad)
		}
	}
	t.Setenv(TimeScaleEnv, "2.5")
	if got := Deadline(t, 4*time.Second); got != 10*time.Second {
		t.Errorf("Deadline(4s) with scale 2.5 = %v", got)
	}
}

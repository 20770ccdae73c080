//go:build unix || windows

package cputime

import "testing"

func TestProcessAdvancesWithWork(t *testing.T) {
	c0 := Process()
	x := 0
	for i := range 50_000_000 {
		x += i ^ (x >> 3)
	}
	if c1 := Process(); c1 <= c0 || x == 0 {
		t.Fatalf("CPU time did not advance over a busy loop: %v → %v", c0, c1)
	}
}

package kernel

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// minTime returns the fastest of reps runs of f.
func minTime(reps int, f func()) time.Duration {
	best := time.Duration(1 << 62)
	for range reps {
		t0 := time.Now()
		f()
		best = min(best, time.Since(t0))
	}
	return best
}

func TestTuneDotT(t *testing.T) {
	if os.Getenv("KERNEL_TUNE") == "" {
		t.Skip()
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, k := range []int{64, 256, 688} {
		for _, m := range []int{4, 8, 16, 24, 32, 48, 64} {
			n := 1024
			a, b, c := randSlice(r, m*k), randSlice(r, n*k), make([]float32, m*n)
			g := gemmArgs{p: avx512, transB: true, k: k, alpha: 1, a: a, lda: k, b: b, ldb: k, c: c, ldc: n}
			td := minTime(30, func() { g.dotT(1, m, n) })
			tp := minTime(30, func() { g.run(0, m, 0, n) })
			fl := 2 * float64(m*n*k) / 1e9
			fmt.Printf("k=%d m=%d dotT %.1f GFLOP/s  packed %.1f GFLOP/s\n", k, m, fl/td.Seconds(), fl/tp.Seconds())
		}
	}
}

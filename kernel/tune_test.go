package kernel

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

// minTime returns the least thread CPU time of reps runs of f (single-threaded f only): time
// spent preempted by other processes on the shared cores does not count.
func minTime(reps int, f func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := time.Duration(1 << 62)
	for range reps {
		t0 := threadCPU()
		f()
		best = min(best, threadCPU()-t0)
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

func TestTuneMicro(t *testing.T) {
	if os.Getenv("KERNEL_TUNE") == "" {
		t.Skip()
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, kc := range []int{64, 128, 256, 384, 512} {
		a, b, c := randSlice(r, 6*kc), randSlice(r, 64*kc), make([]float32, 6*64)
		reps := 2000
		d := minTime(20, func() {
			for range reps {
				gemm512m6n4(kc, a, 1, 6, b, 64, c, 64, 1, 0xffff)
			}
		})
		fmt.Printf("micro 6x64 kc=%d: %.1f GFLOP/s\n", kc, float64(reps)*2*6*64*float64(kc)/d.Seconds()/1e9)
	}
	fmt.Printf("peak 1 thread: %.1f GFLOP/s\n", MeasurePeakGFLOPS(1, 200*time.Millisecond))
}

func TestTuneDriver(t *testing.T) {
	if os.Getenv("KERNEL_TUNE") == "" {
		t.Skip()
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range benchShapes {
		if s.m*s.n*s.k < 1<<22 {
			continue
		}
		a, b, c := randSlice(r, s.m*s.k), randSlice(r, s.k*s.n), make([]float32, s.m*s.n)
		d := minTime(7, func() {
			gemmWith(avx512, 1, s.transA, s.transB, s.m, s.n, s.k, 1, a, ld(s.transA, s.m, s.k), b, ld(s.transB, s.k, s.n), 0, c, s.n)
		})
		fmt.Printf("%-24s %.1f GFLOP/s\n", s.name, 2*float64(s.m*s.n*s.k)/d.Seconds()/1e9)
	}
}

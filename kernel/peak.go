package kernel

import (
	"runtime"
	"sync"
	"time"
)

// MeasurePeakGFLOPS measures the machine's float32 FMA peak, in GFLOP/s: threads goroutines (each
// locked to an OS thread) run a loop of independent fused multiply-adds on the widest vectors the
// active code path uses (one FMA counts 2 flops a lane) for about dur, split into ten windows;
// the fastest window counts, so that a burst of other load on shared cores does not. It is the
// denominator of the bench command's efficiency ratios.
func MeasurePeakGFLOPS(threads int, dur time.Duration) float64 {
	threads = max(threads, 1)
	run := active.peak
	// Calibrate a chunk of about 1 ms so that the deadline check costs nothing.
	iters := 1 << 10
	for {
		t0 := time.Now()
		run(iters)
		if time.Since(t0) > time.Millisecond || iters > 1<<30 {
			break
		}
		iters *= 2
	}
	var best float64
	for range 10 {
		best = max(best, peakWindow(run, iters, threads, dur/10))
	}
	return best
}

// peakWindow runs run(iters) on threads locked goroutines for about dur and returns the GFLOP/s.
func peakWindow(run func(int) float64, iters, threads int, dur time.Duration) float64 {
	flops := make([]float64, threads)
	var wg sync.WaitGroup
	start := time.Now()
	for t := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for time.Since(start) < dur {
				flops[t] += run(iters)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	var total float64
	for _, f := range flops {
		total += f
	}
	return total / elapsed / 1e9
}

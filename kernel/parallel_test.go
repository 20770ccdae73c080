package kernel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestParallelRunsEveryShareOnce: every t in [0, n) runs exactly once and
// Parallel returns only after all have, whether the helpers are spinning
// (calls back to back), asleep (a pause longer than spinFor), nested, or
// shared by concurrent callers (more shares than helpers: the rest run on
// new goroutines).
func TestParallelRunsEveryShareOnce(t *testing.T) {
	prev := runtime.GOMAXPROCS(4)
	defer runtime.GOMAXPROCS(prev)
	check := func(t *testing.T, n int) {
		counts := make([]atomic.Int32, n)
		Parallel(n, func(i int) {
			time.Sleep(time.Duration(i%3) * 10 * time.Microsecond)
			counts[i].Add(1)
		})
		for i := range counts {
			if c := counts[i].Load(); c != 1 {
				t.Fatalf("n=%d: share %d ran %d times after Parallel returned", n, i, c)
			}
		}
	}
	t.Run("back to back", func(t *testing.T) {
		for n := range 9 {
			for range 50 {
				check(t, n)
			}
		}
	})
	t.Run("after sleeping", func(t *testing.T) {
		for range 5 {
			time.Sleep(3 * spinFor)
			check(t, 4)
		}
	})
	t.Run("nested", func(t *testing.T) {
		var total atomic.Int32
		Parallel(3, func(int) {
			Parallel(3, func(int) {
				Parallel(2, func(int) { total.Add(1) })
			})
		})
		if got := total.Load(); got != 18 {
			t.Fatalf("nested calls ran %d innermost shares, want 18", got)
		}
	})
	t.Run("concurrent callers", func(t *testing.T) {
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				for k := range 200 {
					check(t, 2+k%4)
				}
			})
		}
		wg.Wait()
	})
}

// TestParallelHelpersBounded: however many shares are asked for, at most
// GOMAXPROCS−1 helpers are ever started.
func TestParallelHelpersBounded(t *testing.T) {
	prev := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(prev)
	var p helperPool
	hs := p.acquire(5)
	if len(hs) > 1 || p.total > 1 {
		t.Fatalf("GOMAXPROCS 2: acquired %d helpers, %d started; want at most 1", len(hs), p.total)
	}
	if again := p.acquire(1); len(again) != 0 {
		t.Fatalf("acquired a helper that was already taken")
	}
	for _, h := range hs {
		done := make(chan struct{})
		h.submit(&task{run: func() {}, done: func() { close(done) }})
		<-done
	}
	if back := p.acquire(1); len(back) != len(hs) {
		t.Fatalf("after its share the helper is not back in the pool")
	}
}

// TestRetireHelpers: retired helpers leave the pool and return; the next
// Parallel starts new ones and still runs every share.
func TestRetireHelpers(t *testing.T) {
	prev := runtime.GOMAXPROCS(3)
	defer runtime.GOMAXPROCS(prev)
	var p helperPool
	hs := p.acquire(2)
	for _, h := range hs {
		p.release(h)
	}
	if p.total != 2 || len(p.idle) != 2 {
		t.Fatalf("%d helpers, %d idle; want 2 and 2", p.total, len(p.idle))
	}
	exited := make(chan struct{})
	go func() {
		// A retired helper's loop returns: run one by hand to see it.
		h := &helper{wake: make(chan struct{}, 1), pool: &p}
		p.mu.Lock()
		p.idle, p.total = append(p.idle, h), p.total+1
		p.mu.Unlock()
		h.loop()
		close(exited)
	}()
	for {
		p.mu.Lock()
		n := len(p.idle)
		p.mu.Unlock()
		if n == 3 {
			break
		}
		runtime.Gosched()
	}
	p.retire()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("a retired helper did not return")
	}
	if p.total != 0 || len(p.idle) != 0 {
		t.Fatalf("after retiring: %d helpers, %d idle", p.total, len(p.idle))
	}
	RetireHelpers()
	var ran atomic.Int32
	Parallel(3, func(int) { ran.Add(1) })
	if ran.Load() != 3 {
		t.Fatalf("after RetireHelpers, Parallel ran %d of 3 shares", ran.Load())
	}
}

// BenchmarkParallel: the fork and join of two shares of about 20 µs of
// work each (a split product of one-sequence decoding), Parallel's helpers
// against a new goroutine a share (what the kernels did before). With both
// cores free, 20 µs is the ideal time an op.
func BenchmarkParallel(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs GOMAXPROCS ≥ 2")
	}
	x := make([]float32, 2*4096)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	y := make([]float32, 2*4096)
	// work is about 20 µs on one core (110 Axpys of 4,096 floats).
	work := func(t int) {
		for range 110 {
			Axpy(0.5, x[t*4096:(t+1)*4096], y[t*4096:(t+1)*4096])
		}
	}
	b.Run("helpers", func(b *testing.B) {
		for b.Loop() {
			Parallel(2, work)
		}
	})
	b.Run("goroutines", func(b *testing.B) {
		for b.Loop() {
			var wg sync.WaitGroup
			for t := range 2 {
				wg.Go(func() { work(t) })
			}
			wg.Wait()
		}
	})
	b.Run("one core", func(b *testing.B) {
		for b.Loop() {
			work(0)
		}
	})
}

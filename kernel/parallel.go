package kernel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// spinFor is how long a helper that has finished a share waits for the
// next one spinning before it sleeps, and how long Parallel's caller spins
// for the helpers' shares before it sleeps.
const spinFor = 100 * time.Microsecond

// Parallel runs fn(0), …, fn(n−1) at once and returns when every call has
// returned: fn(0) on the caller's goroutine, the others on the package's
// helper goroutines where one is idle (at most GOMAXPROCS−1 helpers exist),
// else on new goroutines. The calls must write disjoint data; which
// goroutine ran a share changes no result.
//
// Why helpers rather than a goroutine a share: a one-sequence decode step
// of a 135M model is 121 products of 50–200 µs each split over the cores,
// and a new goroutine reaches an idle core only after the scheduler wakes a
// thread for it, which left only 1.49–1.68 of two cores busy. A
// helper that has just finished a share waits for the next spinning for
// spinFor (yielding to any other runnable goroutine every few dozen polls),
// then sleeps on a channel, as llama.cpp's threads do; the caller waits for
// the helpers' shares the same way. Measured on SmolLM2-135M's shapes at
// batch 1 (BenchmarkDecode1SmolLM2Shapes): see the package doc.
func Parallel(n int, fn func(t int)) {
	if n <= 1 {
		if n == 1 {
			fn(0)
		}
		return
	}
	hs := helpers.acquire(n - 1)
	var left atomic.Int64
	var wg sync.WaitGroup
	left.Store(int64(n - 1))
	wg.Add(n - 1)
	for t := 1; t < n; t++ {
		run := func() { fn(t) }
		done := func() {
			left.Add(-1)
			wg.Done()
		}
		if i := t - 1; i < len(hs) {
			hs[i].submit(&task{run, done})
		} else {
			go func() {
				run()
				done()
			}()
		}
	}
	fn(0)
	for sw := (spin{}); left.Load() != 0 && sw.more(); {
	}
	wg.Wait()
}

// spin is a bounded busy wait: more says whether to poll again, yielding
// to other runnable goroutines every 64 polls and giving up spinFor after
// the first yield.
type spin struct {
	polls    int
	deadline time.Time
}

func (s *spin) more() bool {
	s.polls++
	if s.polls%64 != 0 {
		return true
	}
	now := time.Now()
	if s.deadline.IsZero() {
		s.deadline = now.Add(spinFor)
	} else if now.After(s.deadline) {
		return false
	}
	runtime.Gosched()
	return true
}

// helperPool holds the idle helpers; a helper puts itself back after each
// share, before the share counts as done, so the caller's next Parallel
// finds it.
type helperPool struct {
	mu    sync.Mutex
	idle  []*helper
	total int
}

// helpers is the process's pool: like the packing buffers' sync.Pool, it
// holds no state a result depends on.
var helpers helperPool

// acquire takes up to k idle helpers, starting new ones while fewer than
// GOMAXPROCS−1 exist.
func (p *helperPool) acquire(k int) []*helper {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.idle) < k && p.total < runtime.GOMAXPROCS(0)-1 {
		h := &helper{wake: make(chan struct{}, 1), pool: p}
		p.total++
		p.idle = append(p.idle, h)
		go h.loop()
	}
	k = min(k, len(p.idle))
	hs := make([]*helper, k)
	copy(hs, p.idle[len(p.idle)-k:])
	p.idle = p.idle[:len(p.idle)-k]
	return hs
}

// RetireHelpers ends the idle helpers; Parallel starts new ones when it
// next needs them. A goroutine keeps the profiler labels of the goroutine
// that started it, so a caller that labels the phases of a CPU profile
// (bench's --cpuprofile) retires the helpers as a phase begins: the shares
// of that phase then run on helpers carrying its label.
func RetireHelpers() { helpers.retire() }

func (p *helperPool) retire() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.total -= len(idle)
	p.mu.Unlock()
	for _, h := range idle {
		h.submit(&task{}) // no run: the helper returns
	}
}

func (p *helperPool) release(h *helper) {
	p.mu.Lock()
	p.idle = append(p.idle, h)
	p.mu.Unlock()
}

// task is one share: run, then (after the helper is back in the pool)
// done; a task without run retires the helper.
type task struct{ run, done func() }

// helper runs one share at a time, handed to it by submit while it is
// acquired.
type helper struct {
	task     atomic.Pointer[task]
	sleeping atomic.Bool
	wake     chan struct{}
	pool     *helperPool
}

// submit hands t to an acquired helper and wakes it if it sleeps.
func (h *helper) submit(t *task) {
	h.task.Store(t)
	if h.sleeping.CompareAndSwap(true, false) {
		h.wake <- struct{}{}
	}
}

// loop waits for a share, runs it, returns to the pool, marks the share
// done and waits again, until a task without run retires it.
func (h *helper) loop() {
	for {
		t := h.next()
		if t.run == nil {
			return
		}
		t.run()
		h.pool.release(h)
		t.done()
	}
}

// next returns the submitted task, spinning for spinFor before sleeping.
// Sleeping is announced before the last look at the task slot, so a
// submit either sees the flag and sends a wake-up, or its task is found.
func (h *helper) next() *task {
	for {
		for sw := (spin{}); sw.more(); {
			if t := h.task.Swap(nil); t != nil {
				return t
			}
		}
		h.sleeping.Store(true)
		if t := h.task.Swap(nil); t != nil {
			if !h.sleeping.CompareAndSwap(true, false) {
				<-h.wake // submit saw the flag and sent a wake-up: take it
			}
			return t
		}
		<-h.wake
	}
}

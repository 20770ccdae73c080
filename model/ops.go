package model

import (
	"math"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/compactrl/compactrl/kernel"
)

// parallel runs fn over [0, n) split into chunks of at least grain items on
// up to GOMAXPROCS goroutines. Every index is handled by exactly one call,
// so per-index work is race-free and independent of the split.
func parallel(n, grain int, fn func(lo, hi int)) {
	parallelOn(runtime.GOMAXPROCS(0), n, grain, fn)
}

// parallelOn is parallel on at most workers goroutines (1: the caller's).
func parallelOn(workers, n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	chunks := min(workers, (n+grain-1)/max(grain, 1))
	if chunks <= 1 {
		fn(0, n)
		return
	}
	kernel.Parallel(chunks, func(c int) { fn(n*c/chunks, n*(c+1)/chunks) })
}

// balanced runs independent tasks 0 … n−1 on up to GOMAXPROCS worker
// goroutines that pull the costliest remaining task first (attention costs
// grow with the square of a sequence's length). Each worker calls worker
// once, which loops over next; tasks must write disjoint outputs, so the
// result does not depend on which worker ran what.
func balanced(n int, cost func(int) int, worker func(next func() (int, bool))) {
	balancedOn(runtime.GOMAXPROCS(0), n, cost, worker)
}

// balancedOn is balanced on at most workers goroutines (1: the caller's).
func balancedOn(workers, n int, cost func(int) int, worker func(next func() (int, bool))) {
	if n <= 0 {
		return
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cost(b) - cost(a) })
	var ctr atomic.Int64
	next := func() (int, bool) {
		i := int(ctr.Add(1) - 1)
		if i >= n {
			return 0, false
		}
		return order[i], true
	}
	workers = min(workers, n)
	if workers <= 1 {
		worker(next)
		return
	}
	kernel.Parallel(workers, func(int) { worker(next) })
}

// linear computes y[N, out] = x[N, in] · Wᵀ (W is [out, in]). Each row
// of y is computed as the Decoder computes it (kernel.GemmRows, whose rows
// do not depend on N; kernel.GemmBF16 under BF16), so that scoring a
// sequence gives the log-probabilities its sampling reported, to the bit.
func (m *Model) linear(y, x []float32, w *Param, n int) {
	out, in := w.Shape[0], w.Shape[1]
	m.rows(n, out, in, x, w.Data, 0, y)
}

// rows computes y[N, out] = x[N, in] · Wᵀ + beta·y with the products of
// the model's precision, each row independent of N.
func (m *Model) rows(n, out, in int, x, w []float32, beta float32, y []float32) {
	if m.BF16 {
		kernel.GemmBF16(false, true, n, out, in, 1, x, in, w, in, beta, y, out)
		return
	}
	kernel.GemmRows(false, true, n, out, in, 1, x, in, w, in, beta, y, out)
}

// gemm is kernel.Gemm, or kernel.GemmBF16 under BF16: the backward pass's
// products.
func (m *Model) gemm(transA, transB bool, rows, cols, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m.BF16 {
		kernel.GemmBF16(transA, transB, rows, cols, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	kernel.Gemm(transA, transB, rows, cols, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// linearBack accumulates dW += dyᵀ · x and computes dx = dy · W
// (dx += dy · W when accumulate is set).
func (m *Model) linearBack(dx, dy, x []float32, w *Param, n int, accumulate bool) {
	out, in := w.Shape[0], w.Shape[1]
	m.gemm(true, false, out, in, n, 1, dy, out, x, in, 1, w.Grad, in)
	if dx == nil {
		return
	}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	m.gemm(false, false, n, in, out, 1, dy, out, w.Data, in, beta, dx, in)
}

// rmsnorm computes, per row, y = x · r · w with r = 1/sqrt(mean(x²) + eps),
// and stores r in rinv.
func rmsnorm(y, rinv, x, w []float32, n, d int, eps float64) {
	rmsnormOn(runtime.GOMAXPROCS(0), y, rinv, x, w, n, d, eps)
}

// rmsnormOn is rmsnorm on at most workers goroutines.
func rmsnormOn(workers int, y, rinv, x, w []float32, n, d int, eps float64) {
	parallelOn(workers, n, 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xr := x[i*d : i*d+d]
			r := float32(1 / math.Sqrt(float64(kernel.Dot(xr, xr))/float64(d)+eps))
			rinv[i] = r
			yr := y[i*d : i*d+d]
			for j, v := range xr {
				yr[j] = v * r * w[j]
			}
		}
	})
}

// normApply recomputes y = x·r·w from a forward's saved x and r.
func normApply(y, x, rinv, w []float32, n, d int) {
	parallel(n, 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xr, yr, r := x[i*d:i*d+d], y[i*d:i*d+d], rinv[i]
			for j, v := range xr {
				yr[j] = v * r * w[j]
			}
		}
	})
}

// normChunk is the row block over which rmsnormBack sums partial weight
// gradients; fixed so that the sum order never depends on the thread count.
const normChunk = 64

// rmsnormBack back-propagates y = x·r·w: with g = w ⊙ dy,
// dx = r·g − x·r³·(g·x)/d (added to dx), and dw += Σ_rows dy ⊙ x·r.
// scratch must hold ceil(n/normChunk)·d floats.
func rmsnormBack(dx, dy, x, rinv []float32, w *Param, n, d int, scratch []float32) {
	nc := (n + normChunk - 1) / normChunk
	part := scratch[:nc*d]
	clear(part)
	parallel(nc, 1, func(clo, chi int) {
		for c := clo; c < chi; c++ {
			pw := part[c*d : c*d+d]
			for i := c * normChunk; i < min(n, (c+1)*normChunk); i++ {
				xr, dyr, dxr := x[i*d:i*d+d], dy[i*d:i*d+d], dx[i*d:i*d+d]
				r := rinv[i]
				var gx float32
				for j, v := range xr {
					gx += w.Data[j] * dyr[j] * v
					pw[j] += dyr[j] * v * r
				}
				k := r * r * r * gx / float32(d)
				for j, v := range xr {
					dxr[j] += r*w.Data[j]*dyr[j] - k*v
				}
			}
		}
	})
	for c := 0; c < nc; c++ {
		kernel.Axpy(1, part[c*d:c*d+d], w.Grad)
	}
}

// rope rotates each head of row vectors in place (HF rotate_half):
// for i < h = HeadDim/2, (a, b) = (x_i, x_{i+h}) ↦ (a·cos − b·sin, b·cos + a·sin)
// with the angle of position pos[row]. inverse applies the transpose
// rotation (the backward pass).
func (m *Model) rope(x []float32, pos []int32, heads int, inverse bool) {
	m.ropeOn(runtime.GOMAXPROCS(0), x, pos, heads, inverse)
}

// ropeOn is rope on at most workers goroutines.
func (m *Model) ropeOn(workers int, x []float32, pos []int32, heads int, inverse bool) {
	hd := m.Cfg.HeadDim()
	half := hd / 2
	width := heads * hd
	parallelOn(workers, len(pos), 32, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			p := int(pos[r]) * half
			c, s := m.cos[p:p+half], m.sin[p:p+half]
			row := x[r*width : r*width+width]
			for h := 0; h < heads; h++ {
				a := row[h*hd : h*hd+half]
				b := row[h*hd+half : h*hd+hd]
				if inverse {
					for i := range a {
						ai, bi := a[i], b[i]
						a[i] = ai*c[i] + bi*s[i]
						b[i] = bi*c[i] - ai*s[i]
					}
					continue
				}
				for i := range a {
					ai, bi := a[i], b[i]
					a[i] = ai*c[i] - bi*s[i]
					b[i] = bi*c[i] + ai*s[i]
				}
			}
		}
	})
}

// swiglu computes a = silu(g) ⊙ u, silu(g) = g·σ(g), keeping σ(g) in sg.
func swiglu(a, sg, g, u []float32) {
	swigluOn(runtime.GOMAXPROCS(0), a, sg, g, u)
}

// swigluOn is swiglu on at most workers goroutines.
func swigluOn(workers int, a, sg, g, u []float32) {
	parallelOn(workers, len(a), 4096, func(lo, hi int) {
		s := sg[lo:hi]
		for i, x := range g[lo:hi] {
			s[i] = -x
		}
		kernel.ExpShift(s, s, 0)
		for i := range s {
			s[i] = 1 / (1 + s[i])
			a[lo+i] = g[lo+i] * s[i] * u[lo+i]
		}
	})
}

// swigluApply recomputes a = g·σ(g)·u from a forward's saved σ(g).
func swigluApply(a, sg, g, u []float32) {
	parallel(len(a), 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a[i] = g[i] * sg[i] * u[i]
		}
	})
}

// swigluBack turns da into dg = da·u·σ(g)(1 + g(1−σ(g))) and du = da·silu(g),
// given sg = σ(g).
func swigluBack(dg, du, da, sg, g, u []float32) {
	parallel(len(da), 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			s := sg[i]
			dg[i] = da[i] * u[i] * s * (1 + g[i]*(1-s))
			du[i] = da[i] * g[i] * s
		}
	})
}

// logSumExp returns lse = log Σ_i e^z[i] in float32, and sum = Σ_i e[i]
// with e[i] = e^(z[i] − max z) (e is scratch of len(z)). A log-probability
// is z[t] − lse, computed in float32: the Scorer's (logSoftmax) and the
// Decoder's (sampleToken) are then the same number.
func logSumExp(z, e []float32) (lse, sum float32) {
	mx := kernel.Max(z)
	sum = kernel.ExpShift(e, z, mx)
	return mx + float32(math.Log(float64(sum))), sum
}

// logSoftmax writes log softmax(z) into out (which may be z) and returns
// the entropy −Σ p log p. e is scratch of len(z).
func logSoftmax(out, z, e []float32) float64 {
	lse, sum := logSumExp(z, e)
	var plp float32
	for i, v := range z {
		lp := v - lse
		out[i] = lp
		plp += e[i] * lp
	}
	return -float64(plp / sum)
}

func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

package kernel

import (
	"math"
	"runtime"
	"unsafe"
)

// generic is the pure-Go code path, used where no SIMD path applies: 1×goNR tiles (see rowGo).
var generic = &impl{name: "go", mr: 1, nr: goNR, micro: microGo, directB: true, directBUnit: goNR, dotT: dotTGo, useDotT: useDotTFew, packAT: packATGo, expShift: expShiftGo, sigmoid: sigmoidGo, max: maxGo, dot: dotGo, axpy: axpyGo, scale: scaleGo, peak: peakGo}

// goNR is the width of the portable tile: 8 accumulators, one multiplier of A and one product in
// flight fit the 16 XMM registers of amd64 (the narrowest target) with room to spare.
const goNR = 8

// microGo is the pure-Go micro-kernel: C[i, 0:nr] += alpha·Σ_p A(i,p)·b[p·bs+j] for i < mr, one
// row at a time (rowGo). A tile narrower than goNR runs whole on a scratch copy of its part of C,
// copied back after: its strip of B is a packed, zero-padded one (B is read in place only when n
// is a multiple of goNR), and every element gets the operations of a whole tile.
func microGo(mr, nr, kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32, zc bool) {
	for i := range mr {
		ai, ci := a[i*ars:], c[i*ldc:]
		if zc {
			clear(ci[:nr])
		}
		if nr == goNR {
			rowGo(kc, ai, aps, b, bs, ci, alpha)
			continue
		}
		var t [goNR]float32
		copy(t[:nr], ci[:nr])
		rowGo(kc, ai, aps, b, bs, t[:], alpha)
		copy(ci[:nr], t[:nr])
	}
}

// rowGo computes c[j] += alpha·acc_j for j < 8, acc_j = Σ_p a[p·as]·b[p·bs+j], each acc_j summed
// from +0 in the order p = 0 … kc−1 (one float32 multiply and one add per step), the same for
// every element whatever tile it is in.
//
// Each step is written acc_j −= (−a)·b_j: x − y is x + (−y) exactly in IEEE arithmetic (signed
// zeros included) and −a·b is −(a·b), so the value is acc_j + a·b_j, bit for bit; but a
// subtraction cannot swap its operands, so the register allocator keeps every acc_j in one
// register instead of moving the sums around the loop. The loop is a single block (its test at the
// bottom, no bounds checks inside, hence the unsafe loads, bounded by the checks before it), so
// that the sums feed φ-functions of their own block: Go's scheduler then keeps the source order
// (multiply, subtract, multiply, …) instead of computing all eight products before the first add,
// which would need 16 live registers and spill. On amd64 the loop is 32 instructions a step (10
// loads) with no stack access (go build -gcflags=-S); where Go fuses x·y+z (arm64, ppc64, s390x,
// riscv64, and amd64 with GOAMD64=v3 for additions only) every element is fused alike, since every
// tile and edge runs this one loop.
func rowGo(kc int, a []float32, as int, b []float32, bs int, c []float32, alpha float32) {
	if kc <= 0 {
		return
	}
	if as < 0 || bs < 0 {
		panic("kernel: negative stride")
	}
	// Every offset read below is p·as ≤ (kc−1)·as into a and p·bs+j ≤ (kc−1)·bs+7 into b.
	_ = a[(kc-1)*as]
	_ = b[(kc-1)*bs+goNR-1]
	c = c[:len(c):len(c)][:goNR] // c[:goNR] alone would only need the capacity
	pa, pb := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b))
	astep, bstep := uintptr(as)*4, uintptr(bs)*4
	var ao, bo uintptr
	var c0, c1, c2, c3, c4, c5, c6, c7 float32
	for p := kc; ; {
		na := -*(*float32)(unsafe.Add(pa, ao))
		bp := (*[goNR]float32)(unsafe.Add(pb, bo))
		c0 -= na * bp[0]
		c1 -= na * bp[1]
		c2 -= na * bp[2]
		c3 -= na * bp[3]
		c4 -= na * bp[4]
		c5 -= na * bp[5]
		c6 -= na * bp[6]
		c7 -= na * bp[7]
		p--
		if p == 0 {
			break
		}
		ao += astep
		bo += bstep
	}
	c[0] += alpha * c0
	c[1] += alpha * c1
	c[2] += alpha * c2
	c[3] += alpha * c3
	c[4] += alpha * c4
	c[5] += alpha * c5
	c[6] += alpha * c6
	c[7] += alpha * c7
}

// dotTGo is the go path's tile of A·Bᵀ for few rows of A (see impl.dotT), with no packing:
// c[i·ldc+j] += alpha·Σ_p a[i·lda+p]·b[j·ldb+p] for i < mr, j < nb ≤ 4, each element summed as
// rowGo sums it (one chain from +0 per block of blockK values of p, C updated after each
// block), so that Gemm's few-row products equal GemmRows's bit for bit on this path.
func dotTGo(mr, nb, k int, a []float32, lda int, b []float32, ldb int, alpha float32, c []float32, ldc int) {
	for pc := 0; pc < k; pc += blockK {
		kc := min(blockK, k-pc)
		for i := range mr {
			dotRowGo(kc, a[i*lda+pc:], b[pc:], ldb, nb, c[i*ldc:], alpha)
		}
	}
}

// dotRowGo computes c[j] += alpha·acc_j for j < nb ≤ 4, acc_j = Σ_p a[p]·b[j·ldb+p] summed as in
// rowGo (same loop form, same operations per element). A tile narrower than 4 computes its last
// column again in the missing ones and drops them, so every element runs the same loop.
func dotRowGo(kc int, a, b []float32, ldb, nb int, c []float32, alpha float32) {
	if kc <= 0 || nb <= 0 {
		return
	}
	if nb > 4 || ldb < 0 {
		panic("kernel: dotRowGo: bad tile")
	}
	// Every offset read below is p ≤ kc−1 into a and j·ldb+p ≤ (nb−1)·ldb+kc−1 into b.
	_ = a[kc-1]
	_ = b[(nb-1)*ldb+kc-1]
	_ = c[nb-1]
	pa := unsafe.Pointer(unsafe.SliceData(a))
	pb0 := unsafe.Pointer(unsafe.SliceData(b))
	row := func(j int) unsafe.Pointer { return unsafe.Add(pb0, min(j, nb-1)*ldb*4) }
	pb1, pb2, pb3 := row(1), row(2), row(3)
	var c0, c1, c2, c3 float32
	var o uintptr
	for p := kc; ; {
		na := -*(*float32)(unsafe.Add(pa, o))
		c0 -= na * *(*float32)(unsafe.Add(pb0, o))
		c1 -= na * *(*float32)(unsafe.Add(pb1, o))
		c2 -= na * *(*float32)(unsafe.Add(pb2, o))
		c3 -= na * *(*float32)(unsafe.Add(pb3, o))
		p--
		if p == 0 {
			break
		}
		o += 4
	}
	c[0] += alpha * c0
	if nb > 1 {
		c[1] += alpha * c1
	}
	if nb > 2 {
		c[2] += alpha * c2
	}
	if nb > 3 {
		c[3] += alpha * c3
	}
}

func dotGo(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpyGo(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

func scaleGo(alpha float32, x []float32) {
	for i := range x {
		x[i] *= alpha
	}
}

// peakGo runs iters rounds of 9 independent scalar multiply-adds (3 multipliers by 3, as rowGo
// writes them: a single-block loop, subtracting negated products) and returns the flops done. Its
// operands never change, but the compiler has no loop-invariant code motion, so each round
// multiplies and adds 9 times; 9 chains cover the latency of two add pipes.
func peakGo(iters int) float64 {
	if iters <= 0 {
		return 0
	}
	var s0, s1, s2, s3, s4, s5, s6, s7, s8 float32
	x0, x1, x2 := float32(iters&1), float32(iters&2), float32(iters&4)
	y0, y1, y2 := float32(0.5), float32(0.25), float32(0.125)
	for i := iters; ; {
		s0 -= x0 * y0
		s1 -= x0 * y1
		s2 -= x0 * y2
		s3 -= x1 * y0
		s4 -= x1 * y1
		s5 -= x1 * y2
		s6 -= x2 * y0
		s7 -= x2 * y1
		s8 -= x2 * y2
		i--
		if i == 0 {
			break
		}
	}
	runtime.KeepAlive(s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7 + s8)
	return float64(iters) * 9 * 2
}

// expf is e^x in float32: x = n·ln2 + r, |r| ≤ ln2/2 (Cody–Waite split of ln2), e^r by its
// degree-6 Taylor polynomial, times 2^n. x < −87 (−Inf included) gives 0, +Inf past the float32
// range.
func expf(x float32) float32 {
	if x < -87 {
		return 0
	}
	if x > 89 {
		return float32(math.Inf(1))
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	n := float32(math.RoundToEven(float64(x * log2e)))
	r := x - n*ln2hi - n*ln2lo
	p := 1 + r*(1+r*(0.5+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	if n > 127 {
		// 2^n itself overflows though e^x may not: scale by 2^127, then by 2.
		return p * math.Float32frombits(254<<23) * float32(math.Exp2(float64(n-127)))
	}
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// expShiftPadded runs f, a kernel over whole w-lane vectors (w ≤ 16), on the whole vectors of x
// and on the tail padded to a vector, so an element's value never depends on its place in x; the
// tail's values are summed here (the padding is left out whatever shift is).
func expShiftPadded(w int, f func(dst, x []float32, shift float32) float32, dst, x []float32, shift float32) float32 {
	dst = dst[:len(x)]
	n := len(x) / w * w
	sum := f(dst[:n], x[:n], shift)
	if n < len(x) {
		var buf [16]float32
		t := buf[:w]
		copy(t, x[n:])
		f(t, t, shift)
		for i := range len(x) - n {
			dst[n+i] = t[i]
			sum += t[i]
		}
	}
	return sum
}

// sigmoidPadded is expShiftPadded for a sigmoid kernel f (no sum).
func sigmoidPadded(w int, f func(dst, x []float32), dst, x []float32) {
	dst = dst[:len(x)]
	n := len(x) / w * w
	f(dst[:n], x[:n])
	if n < len(x) {
		var buf [16]float32
		t := buf[:w]
		copy(t, x[n:])
		f(t, t)
		copy(dst[n:], t[:len(x)-n])
	}
}

func expShiftGo(dst, x []float32, shift float32) float32 {
	dst = dst[:len(x)]
	var sum float32
	for i, v := range x {
		e := expf(v - shift)
		dst[i] = e
		sum += e
	}
	return sum
}

func sigmoidGo(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = 1 / (1 + expf(-v))
	}
}

func maxGo(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

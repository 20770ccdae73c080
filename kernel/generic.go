package kernel

import (
	"math"
	"runtime"
)

// generic is the pure-Go code path, used where no SIMD path applies.
var generic = &impl{name: "go", mr: 4, nr: 4, micro: microGo, directB: true, directBUnit: 1, dotT: dotTVia(dotGo), useDotT: useDotTFew, packAT: packATGo, expShift: expShiftGo, sigmoid: sigmoidGo, max: maxGo, dot: dotGo, axpy: axpyGo, scale: scaleGo, peak: peakGo}

// microGo is the pure-Go micro-kernel: C[0:mr, 0:nr] += alpha·Σ_p a[i·ars+p·aps]·b[p·bs+j].
func microGo(mr, nr, kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32) {
	if mr == 4 && nr == 4 {
		micro4x4(kc, a, ars, aps, b, bs, c, ldc, alpha)
		return
	}
	var acc [4][4]float32
	for p := range kc {
		bp := b[p*bs : p*bs+nr]
		for i := range mr {
			av := a[i*ars+p*aps]
			for j, bv := range bp {
				acc[i][j] += av * bv
			}
		}
	}
	for i := range mr {
		row := c[i*ldc : i*ldc+nr]
		for j := range row {
			row[j] += alpha * acc[i][j]
		}
	}
}

func micro4x4(kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32) {
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	var c20, c21, c22, c23, c30, c31, c32, c33 float32
	for p := range kc {
		bp := b[p*bs : p*bs+4 : p*bs+4]
		b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
		o := p * aps
		a0 := a[o]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		a1 := a[o+ars]
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		a2 := a[o+2*ars]
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		a3 := a[o+3*ars]
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	r := c[0:4:4]
	r[0] += alpha * c00
	r[1] += alpha * c01
	r[2] += alpha * c02
	r[3] += alpha * c03
	r = c[ldc : ldc+4 : ldc+4]
	r[0] += alpha * c10
	r[1] += alpha * c11
	r[2] += alpha * c12
	r[3] += alpha * c13
	r = c[2*ldc : 2*ldc+4 : 2*ldc+4]
	r[0] += alpha * c20
	r[1] += alpha * c21
	r[2] += alpha * c22
	r[3] += alpha * c23
	r = c[3*ldc : 3*ldc+4 : 3*ldc+4]
	r[0] += alpha * c30
	r[1] += alpha * c31
	r[2] += alpha * c32
	r[3] += alpha * c33
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

// peakGo runs iters rounds of 8 independent scalar multiply-adds and returns the flops done.
func peakGo(iters int) float64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	x, y := float32(iters&1), float32(0.5)
	for range iters {
		s0 += x * y
		s1 += x * y
		s2 += x * y
		s3 += x * y
		s4 += x * y
		s5 += x * y
		s6 += x * y
		s7 += x * y
	}
	runtime.KeepAlive(s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7)
	return float64(iters) * 8 * 2
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

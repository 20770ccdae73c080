package kernel

//go:generate go run ./neongen -out kernel_arm64.s

// neon is the arm64 code path: AdvSIMD (NEON, present on every ARMv8-A CPU) kernels in Go
// assembly (kernel_arm64.s, written by neongen). The micro-kernel is a 6×16 tile of 24
// four-lane accumulators, one FMLA per k and element, then C = C + alpha·acc fused; edges run
// the whole tile on scratch copies (see microNEON), so an element of C is the same function of
// its row, column and k wherever it falls: the batch-invariance contract of the amd64 paths.
var neon = &impl{name: "neon", mr: neonMR, nr: neonNR, micro: microNEON, directB: true, directBUnit: neonNR,
	dotT: dotTVia(dotNEON), useDotT: useDotTFew, packAT: packATGo, expShift: expShiftNEON, sigmoid: sigmoidNEON,
	max: maxGo, dot: dotNEON, axpy: axpyNEON, scale: scaleNEON, peak: peakNEON}

const neonMR, neonNR = 6, 16

// available lists the code paths of this CPU: NEON is part of ARMv8-A, so always.
func available() []*impl { return []*impl{neon, generic} }

// Assembly in kernel_arm64.s.

func neonTile1(kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32)
func neonTile2(kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32)
func neonTile3(kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32)
func neonTile4(kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32)
func neonTile5(kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32)
func neonTile6(kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32)

// neonDot returns Σ x[i]·y[i] for len(x) a multiple of 16 (len(y) ≥ len(x)).
func neonDot(x, y []float32) float32

// neonAxpy: y[i] += alpha·x[i] for len(x) a multiple of 4.
func neonAxpy(alpha float32, x, y []float32)

// neonScale: x[i] *= alpha for len(x) a multiple of 4.
func neonScale(alpha float32, x []float32)

// neonExpShift: dst[i] = e^(x[i]−shift) for len(x) a multiple of 4; returns their sum.
func neonExpShift(dst, x []float32, shift float32) float32

// neonSigmoid: dst[i] = 1/(1 + e^(−x[i])) for len(x) a multiple of 4.
func neonSigmoid(dst, x []float32)

// neonPeak runs iters rounds of 24 independent four-lane FMLAs.
func neonPeak(iters int)

var neonTiles = [neonMR]func(kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32){
	neonTile1, neonTile2, neonTile3, neonTile4, neonTile5, neonTile6,
}

// microNEON runs the mr×16 tile: B is a zero-padded packed strip, or op(B) in place when the
// tile is whole (directBUnit = 16). A tile narrower than 16 columns runs on a scratch copy of its
// part of C, copied back after, so every element gets the operations of a whole tile.
func microNEON(mr, nr, kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32, zc bool) {
	if zc {
		for i := range mr {
			clear(c[i*ldc : i*ldc+nr])
		}
	}
	if nr == neonNR {
		neonTiles[mr-1](kc, a, ars, aps, b, bs, c, ldc, alpha)
		return
	}
	var t [neonMR * neonNR]float32
	for i := range mr {
		copy(t[i*neonNR:i*neonNR+nr], c[i*ldc:i*ldc+nr])
	}
	neonTiles[mr-1](kc, a, ars, aps, b, bs, t[:], neonNR, alpha)
	for i := range mr {
		copy(c[i*ldc:i*ldc+nr], t[i*neonNR:i*neonNR+nr])
	}
}

func dotNEON(x, y []float32) float32 {
	y = y[:len(x)]
	n := len(x) &^ 15
	return neonDot(x[:n], y[:n]) + dotGo(x[n:], y[n:])
}

func axpyNEON(alpha float32, x, y []float32) {
	y = y[:len(x)]
	n := len(x) &^ 3
	neonAxpy(alpha, x[:n], y[:n])
	if n < len(x) {
		var xt, yt [4]float32
		copy(xt[:], x[n:])
		copy(yt[:], y[n:])
		neonAxpy(alpha, xt[:], yt[:])
		copy(y[n:], yt[:])
	}
}

func scaleNEON(alpha float32, x []float32) {
	n := len(x) &^ 3
	neonScale(alpha, x[:n])
	if n < len(x) {
		var t [4]float32
		copy(t[:], x[n:])
		neonScale(alpha, t[:])
		copy(x[n:], t[:])
	}
}

func expShiftNEON(dst, x []float32, shift float32) float32 {
	return expShiftPadded(4, neonExpShift, dst, x, shift)
}

func sigmoidNEON(dst, x []float32) { sigmoidPadded(4, neonSigmoid, dst, x) }

// peakNEON runs iters rounds of 24 independent FMLAs and returns the flops done.
func peakNEON(iters int) float64 {
	neonPeak(iters)
	return float64(iters) * 24 * 4 * 2
}

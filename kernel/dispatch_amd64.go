package kernel

import "golang.org/x/sys/cpu"

//go:generate sh -c "cd asm && go run . -out ../kernel_amd64.s -stubs ../stubs_amd64.go -pkg kernel"

// Tile shapes of the generated micro-kernels (asm/gen.go).
const (
	mr512, nr512 = 6, 64
	mr256, nr256 = 6, 16
)

var avx512 = &impl{name: "avx512", mr: mr512, nr: nr512, micro: micro512, microPacked: gemmPacked512m6n4U2, directB: true, directBUnit: 1, dotT: dotTAVX512, useDotT: useDotT512, packT: packT16, packTW: 16, packAT: packAT512, expShift: expShift512, sigmoid: sigmoid512, max: max512, dot: dot512, axpy: axpy512, scale: scale512, peak: peakAVX512}

var avx2 = &impl{name: "avx2", mr: mr256, nr: nr256, micro: micro256, directB: true, directBUnit: 8, dotT: dotTVia(dotAVX2), useDotT: useDotTFew, packT: packT8, packTW: 8, packN: packN256, packAT: packATAVX2, expShift: expShiftAVX2, sigmoid: sigmoidAVX2, max: maxAVX2, dot: dotAVX2, axpy: axpyAVX2, scale: scaleAVX2, peak: peakAVX2}

// available lists the code paths this CPU and OS support, fastest first.
func available() []*impl {
	var out []*impl
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasBMI2 {
		out = append(out, avx512)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		out = append(out, avx2)
	}
	return append(out, generic)
}

type tileFunc func(kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32, mask uint32, zc bool)

var tiles512 = [mr512][nr512 / 16]tileFunc{
	{gemm512m1n1, gemm512m1n2, gemm512m1n3, gemm512m1n4},
	{gemm512m2n1, gemm512m2n2, gemm512m2n3, gemm512m2n4},
	{gemm512m3n1, gemm512m3n2, gemm512m3n3, gemm512m3n4},
	{gemm512m4n1, gemm512m4n2, gemm512m4n3, gemm512m4n4},
	{gemm512m5n1, gemm512m5n2, gemm512m5n3, gemm512m5n4},
	{gemm512m6n1, gemm512m6n2, gemm512m6n3, gemm512m6n4},
}

var tiles256 = [mr256][nr256 / 8]tileFunc{
	{gemm256m1n1, gemm256m1n2},
	{gemm256m2n1, gemm256m2n2},
	{gemm256m3n1, gemm256m3n2},
	{gemm256m4n1, gemm256m4n2},
	{gemm256m5n1, gemm256m5n2},
	{gemm256m6n1, gemm256m6n2},
}

// micro512 runs the AVX-512 tile of nr columns: whole zmm vectors, the last under a mask, so it
// reads and writes only the nr columns of B and C.
func micro512(mr, nr, kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32, zc bool) {
	nv := (nr + 15) / 16
	rem := nr - 16*(nv-1)
	tiles512[mr-1][nv-1](kc, a, ars, aps, b, bs, c, ldc, alpha, uint32(1)<<rem-1, zc)
}

// micro256 runs the AVX2 tile on whole ymm vectors: B is a zero-padded packed strip, or op(B) in
// place when n is a multiple of 8; a tile whose width is not a whole number of vectors runs on a
// scratch copy of its part of C, copied back after, so that every element of C gets the same
// fused multiply-add as in a whole tile (batch-invariant rows whatever the column edges).
func micro256(mr, nr, kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32, zc bool) {
	nv := (nr + 7) / 8
	if nr%8 == 0 {
		tiles256[mr-1][nv-1](kc, a, ars, aps, b, bs, c, ldc, alpha, 0, zc)
		return
	}
	var t [mr256 * nr256]float32
	if !zc {
		for i := range mr {
			copy(t[i*nr256:i*nr256+nr], c[i*ldc:i*ldc+nr])
		}
	}
	tiles256[mr-1][nv-1](kc, a, ars, aps, b, bs, t[:], nr256, alpha, 0, zc)
	for i := range mr {
		copy(c[i*ldc:i*ldc+nr], t[i*nr256:i*nr256+nr])
	}
}

var dotTiles512 = [4][4]func(k int, a []float32, lda int, b []float32, ldb int, alpha float32, c []float32, ldc int){
	{dotT512m1n1, dotT512m1n2, dotT512m1n3, dotT512m1n4},
	{dotT512m2n1, dotT512m2n2, dotT512m2n3, dotT512m2n4},
	{dotT512m3n1, dotT512m3n2, dotT512m3n3, dotT512m3n4},
	{dotT512m4n1, dotT512m4n2, dotT512m4n3, dotT512m4n4},
}

func dotTAVX512(mr, nb, k int, a []float32, lda int, b []float32, ldb int, alpha float32, c []float32, ldc int) {
	dotTiles512[mr-1][nb-1](k, a, lda, b, ldb, alpha, c, ldc)
}

func expShiftAVX2(dst, x []float32, shift float32) float32 {
	return expShiftPadded(8, expShift256, dst, x, shift)
}

func sigmoidAVX2(dst, x []float32) { sigmoidPadded(8, sigmoid256, dst, x) }

// packATAVX2 packs w ≤ 8 columns of kc rows of transposed A (the AVX2 tile has 6 rows).
func packATAVX2(kc int, a []float32, lda, w int, dst []float32) {
	if kc == 0 {
		return
	}
	_ = a[(kc-1)*lda+w-1]
	_ = dst[kc*w-1]
	packAT256(kc, a, lda, w, min(kc, (8+w-1)/w-1), dst)
}

func maxAVX2(x []float32) float32 {
	n := len(x) &^ 7
	return max(max256(x[:n]), maxGo(x[n:]))
}

func dotAVX2(x, y []float32) float32 {
	n := len(x) &^ 7
	return dot256(x[:n], y[:n]) + dotGo(x[n:], y[n:])
}

func axpyAVX2(alpha float32, x, y []float32) {
	n := len(x) &^ 7
	axpy256(alpha, x[:n], y[:n])
	axpyGo(alpha, x[n:], y[n:])
}

func scaleAVX2(alpha float32, x []float32) {
	n := len(x) &^ 7
	scale256(alpha, x[:n])
	scaleGo(alpha, x[n:])
}

// peakAVX512 runs iters rounds of 24 independent zmm FMAs and returns the flops done.
func peakAVX512(iters int) float64 {
	fmaPeak512(iters)
	return float64(iters) * 24 * 16 * 2
}

// peakAVX2 runs iters rounds of 12 independent ymm FMAs and returns the flops done.
func peakAVX2(iters int) float64 {
	fmaPeak256(iters)
	return float64(iters) * 12 * 8 * 2
}

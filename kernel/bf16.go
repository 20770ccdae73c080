package kernel

import (
	"math"
	"runtime"
	"sync"
)

// Tile and block of the bfloat16 products: 6 rows by 64 columns, 256 pairs
// of k (512 values) a block.
const (
	bf16MR, bf16NR = 6, 64
	bf16KC         = 256
)

// bf16Workspace holds a product's packing buffers (packed A and packABF16's
// scratch) or one worker goroutine's (a packed strip block and
// packBBF16's scratch), reused through bf16Workspaces as Gemm's are. Every
// element is written before it is read.
type bf16Workspace struct{ pa, tmp, buf []uint32 }

var bf16Workspaces = sync.Pool{New: func() any { return new(bf16Workspace) }}

func growU32(buf []uint32, n int) []uint32 {
	if cap(buf) < n {
		return make([]uint32, n)
	}
	return buf[:n]
}

// BF16 rounds x to bfloat16, returned as its 16 bits: the upper half of
// x's bits rounded to nearest, ties to even; a NaN stays a (quiet) NaN.
func BF16(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// bf16Value is the value VDPBF16PS multiplies for the bfloat16 h: h's
// bits as the upper half of a float32, a subnormal read as zero (DAZ).
func bf16Value(h uint16) float64 {
	if h&0x7f80 == 0 {
		return 0
	}
	return float64(math.Float32frombits(uint32(h) << 16))
}

// bf16Add is one accumulation step of VDPBF16PS: s + p rounded once to
// float32 (nearest, ties to even), a sum below 2⁻¹²⁶ in magnitude before
// rounding flushed to +0. The float64 sum is exact wherever the rounding
// to float32 can see the difference (p has at most 16 significant bits).
func bf16Add(s float32, p float64) float32 {
	x := float64(s) + p
	if math.Abs(x) < 0x1p-126 {
		return 0
	}
	return float32(x)
}

// bf16TileGo is the portable micro-kernel with VDPBF16PS's arithmetic: for
// row i < 6 and column j < 64 of the tile, over the kp pairs q,
//
//	s ← bf16Add(s, a₂q₊₁·b₂q₊₁),  s ← bf16Add(s, a₂q·b₂q),  s₀ = 0
//
// (the odd element of the pair first), a the bfloat16 pair a[6q+i] (low
// half: even k), b the pair b[64q+j], each product exact (bf16Value); then
// acc[64i+j] = s. The order is the Intel SDM's pseudo-code for VDPBF16PS;
// the treatment of results near 2⁻¹²⁶ (products kept exact, sums flushed
// to +0 before rounding) is what AMD Zen 4 computes, measured bit for bit
// (TestGemmBF16), and may differ on other CPUs only there.
func bf16TileGo(kp int, a, b []uint32, acc []float32) {
	for i := range bf16MR {
		for j := range bf16NR {
			var s float32
			for q := range kp {
				pa, pb := a[bf16MR*q+i], b[bf16NR*q+j]
				s = bf16Add(s, bf16Value(uint16(pa>>16))*bf16Value(uint16(pb>>16)))
				s = bf16Add(s, bf16Value(uint16(pa))*bf16Value(uint16(pb)))
			}
			acc[bf16NR*i+j] = s
		}
	}
}

// GemmBF16 computes C = alpha·op(A)·op(B) + beta·C as Gemm does, with every
// element of op(A) and op(B) rounded to bfloat16 (BF16) and the products
// summed in float32 as VDPBF16PS sums them: for each block of 512 values of
// k, in order, the block's sum s (bf16TileGo, k padded with a zero to even)
// is added as C ← C + float32(alpha·s), after C ← beta·C (beta = 0: C is
// cleared, whatever it held). Every element is a fixed function of its row
// of op(A), its column of op(B), k, alpha, beta and its old value: the same
// bits on every path, thread count and shape. It runs on VDPBF16PS where
// the CPU has AVX512_BF16 (twice the float32 FMA's products per
// instruction), else on the portable emulation, which is slow.
func GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmBF16(active, runtime.GOMAXPROCS(0), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// BF16Native reports whether GemmBF16 runs on the CPU's bfloat16
// instructions on this machine's code path.
func BF16Native() bool { return bf16Native(active) }

func gemmBF16(p *impl, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	stripB := func(buf []uint32, j0, w, q0, qn int) []uint32 {
		packBBF16(p, buf[:bf16KC*bf16NR], buf[bf16KC*bf16NR:], transB, k, b, ldb, q0, qn, j0, w)
		return buf
	}
	runBF16(p, threads, transA, m, n, k, alpha, a, lda, stripB, beta, c, ldc)
}

// runBF16 runs a bfloat16 product whose op(B) strips come from stripB:
// pairs q0 … q0+qn−1 of columns j0 … j0+w−1 as packBBF16 lays them out
// (packed into buf, or a part of a PackedB).
func runBF16(p *impl, threads int, transA bool, m, n, k int, alpha float32, a []float32, lda int, stripB func(buf []uint32, j0, w, q0, qn int) []uint32, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	scaleC(beta, c, ldc, 0, m, 0, n)
	if k == 0 {
		return
	}
	kp := (k + 1) / 2
	mp := (m + bf16MR - 1) / bf16MR * bf16MR
	ws := bf16Workspaces.Get().(*bf16Workspace)
	defer bf16Workspaces.Put(ws)
	ws.pa = growU32(ws.pa, mp*kp)
	pa := ws.pa
	ws.tmp = growU32(ws.tmp, max(m, min(kp, bf16KC)))
	packABF16(p, pa, ws.tmp, transA, m, k, a, lda)
	strips := (n + bf16NR - 1) / bf16NR
	nt := min(threadsFor(threads, m, n, k), strips)
	run := func(s0, s1 int) {
		wsB := bf16Workspaces.Get().(*bf16Workspace)
		defer bf16Workspaces.Put(wsB)
		wsB.buf = growU32(wsB.buf, bf16KC*bf16NR+bf16KC) // a packed strip block, and packBBF16's scratch
		buf := wsB.buf
		var acc [bf16MR * bf16NR]float32
		for s := s0; s < s1; s++ {
			j0 := s * bf16NR
			w := min(bf16NR, n-j0)
			for q0 := 0; q0 < kp; q0 += bf16KC {
				qn := min(bf16KC, kp-q0)
				pb := stripB(buf, j0, w, q0, qn)
				for r := 0; r < mp; r += bf16MR {
					h := min(bf16MR, m-r)
					bf16TileAddOn(p, qn, pa[q0*mp+r*qn:], pb, c[r*ldc+j0:], ldc, alpha, h, w, acc[:])
				}
			}
		}
	}
	if nt <= 1 {
		run(0, strips)
		return
	}
	var wg sync.WaitGroup
	for t := range nt {
		s0, s1 := strips*t/nt, strips*(t+1)/nt
		wg.Go(func() { run(s0, s1) })
	}
	wg.Wait()
}

// PackBBF16 packs op(B) (as PackB) as bfloat16 pairs, for GemmPacked and
// GemmPackedSerial to compute GemmBF16's products with it: their rows equal
// GemmBF16's with this B, bit for bit. A decoder packs its weights once.
func PackBBF16(transB bool, n, k int, b []float32, ldb int) *PackedB {
	checkPackB("PackBBF16", transB, n, k, b, ldb)
	kp := (k + 1) / 2
	strips := (n + bf16NR - 1) / bf16NR
	pb := &PackedB{p: active, n: n, k: k, bf16: make([]uint32, strips*kp*bf16NR)}
	tmp := make([]uint32, bf16KC)
	for s := range strips {
		j0 := s * bf16NR
		for q0 := 0; q0 < kp; q0 += bf16KC {
			qn := min(bf16KC, kp-q0)
			off := (s*kp + q0) * bf16NR
			packBBF16(active, pb.bf16[off:off+qn*bf16NR], tmp, transB, k, b, ldb, q0, qn, j0, min(bf16NR, n-j0))
		}
	}
	return pb
}

// gemmPackedBF16 is GemmPacked with a B packed by PackBBF16.
func gemmPackedBF16(threads, m int, alpha float32, a []float32, lda int, b *PackedB, beta float32, c []float32, ldc int) {
	checkMatrix("a", a, m, b.k, lda)
	checkMatrix("c", c, m, b.n, ldc)
	kp := (b.k + 1) / 2
	stripB := func(_ []uint32, j0, _, q0, qn int) []uint32 {
		off := (j0/bf16NR*kp + q0) * bf16NR
		return b.bf16[off : off+qn*bf16NR]
	}
	runBF16(b.p, threads, false, m, b.n, b.k, alpha, a, lda, stripB, beta, c, ldc)
}

// bf16AddTile adds the first rows rows and w columns of the 6×64 tile of
// sums acc to C at c (row stride ldc): C ← C + float32(alpha·s).
func bf16AddTile(c []float32, ldc int, alpha float32, rows, w int, acc []float32) {
	for i := range rows {
		row := c[i*ldc : i*ldc+w]
		t := acc[bf16NR*i : bf16NR*i+w]
		for j := range row {
			row[j] += float32(alpha * t[j])
		}
	}
}

// pairs2Go is pairs2 in Go: dst[j] = BF16(lo[j]) | BF16(hi[j])<<16.
func pairs2Go(dst []uint32, lo, hi []float32) {
	hi = hi[:len(lo)]
	for j := range lo {
		dst[j] = uint32(BF16(lo[j])) | uint32(BF16(hi[j]))<<16
	}
}

// pairsAdjGo is pairsAdj in Go: dst[q] = BF16(x[2q]) | BF16(x[2q+1])<<16,
// the second 0 past the end of x.
func pairsAdjGo(dst []uint32, x []float32) {
	for q := range dst {
		v := uint32(BF16(x[2*q]))
		if 2*q+1 < len(x) {
			v |= uint32(BF16(x[2*q+1])) << 16
		}
		dst[q] = v
	}
}

// packABF16 writes op(A) (m×k) as bfloat16 pairs in blocks of bf16KC pairs:
// block q0 starts at q0·mp (mp = m rounded up to 6), then strips of 6 rows,
// pair q of row r+i of a block of qn pairs at q0·mp + r·qn + 6(q−q0) + i,
// the low half element 2q. Rows past m and the element past an odd k are 0.
// The rounding runs on path p's vectors along rows of the stored A, then
// the pairs are scattered into strips; tmp holds max(m, min(⌈k/2⌉, 256)).
func packABF16(p *impl, dst, tmp []uint32, trans bool, m, k int, a []float32, lda int) {
	kp := (k + 1) / 2
	mp := len(dst) / kp
	for q0 := 0; q0 < kp; q0 += bf16KC {
		qn := min(bf16KC, kp-q0)
		base := dst[q0*mp : q0*mp+qn*mp]
		if m < mp { // the last strip's rows past m
			r := mp - bf16MR
			for q := range qn {
				clear(base[r*qn+bf16MR*q+m-r : r*qn+bf16MR*q+bf16MR])
			}
		}
		if trans { // op(A)'s column kk is row kk of the stored A: pairs of two rows at once
			for q := range qn {
				kk := 2 * (q0 + q)
				lo := a[kk*lda : kk*lda+m]
				if kk+1 < k {
					pairs2(p, tmp[:m], lo, a[(kk+1)*lda:(kk+1)*lda+m])
				} else {
					for i, x := range lo {
						tmp[i] = uint32(BF16(x))
					}
				}
				for i := range m {
					r := i / bf16MR * bf16MR
					base[r*qn+bf16MR*q+i-r] = tmp[i]
				}
			}
			continue
		}
		for i := range m { // op(A)'s row i: its pairs adjacent
			pairsAdj(p, tmp[:qn], a[i*lda+2*q0:i*lda+min(k, 2*(q0+qn))])
			r := i / bf16MR * bf16MR
			strip := base[r*qn:]
			for q, v := range tmp[:qn] {
				strip[bf16MR*q+i-r] = v
			}
		}
	}
}

// packBBF16 writes pairs q0 … q0+qn−1 of columns j0 … j0+w−1 of op(B)
// (k×n) as bfloat16 pairs: pair q of column j at dst[64(q−q0) + j−j0], the
// low half element 2q. Columns past w and the element past an odd k are 0.
// tmp holds at least qn pairs.
func packBBF16(p *impl, dst, tmp []uint32, trans bool, k int, b []float32, ldb int, q0, qn, j0, w int) {
	kEnd := min(k, 2*(q0+qn))
	if trans { // op(B)'s column j is row j of the stored B: its pairs adjacent
		for j := range w {
			col := b[(j0+j)*ldb:]
			pairsAdj(p, tmp[:qn], col[2*q0:kEnd])
			for q, v := range tmp[:qn] {
				dst[bf16NR*q+j] = v
			}
		}
		if w < bf16NR {
			for q := range qn {
				clear(dst[bf16NR*q+w : bf16NR*q+bf16NR])
			}
		}
		return
	}
	for q := range qn {
		kk := 2 * (q0 + q)
		row := dst[bf16NR*q : bf16NR*q+bf16NR]
		lo := b[kk*ldb+j0 : kk*ldb+j0+w]
		if kk+1 < k {
			pairs2(p, row, lo, b[(kk+1)*ldb+j0:(kk+1)*ldb+j0+w])
		} else {
			for j, x := range lo {
				row[j] = uint32(BF16(x))
			}
		}
		clear(row[w:])
	}
}

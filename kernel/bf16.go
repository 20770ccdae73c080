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
	// bf16MC rows of packed A (with bf16KC pairs: 120 KiB) stay in a core's
	// cache while the strips of B pass over them.
	bf16MC = 120
)

// bf16Workspace holds a product's packed A (pa), or one worker goroutine's
// buffers: a block of packed A (pa), packABlockBF16's scratch (tmp), packed
// strips of B and packBBF16's scratch (buf). They are reused through
// bf16Workspaces as Gemm's are; every element is written before it is read.
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
//
// Two loop orders, chosen by shape; both give every element of C the same
// operations (one tile sum per block of bf16KC pairs, blocks in order), so
// the result does not depend on the order or on the thread count.
//   - m ≥ n (training's products: many token rows): the workers split the
//     rows of C. Each packs, per block of k, all of op(B) once (strips of
//     64 columns; op(B) has at most as many elements as op(A) here) and then
//     op(A) bf16MC rows at a time into a buffer that stays in the core's
//     cache while every strip of B passes over it.
//   - m < n (the decoder's few rows; the language-model head over a large
//     vocabulary): op(A) is packed once (split by rows over the workers),
//     and the workers split the 64-column strips of C, packing each strip
//     of B themselves.
//
// The first order keeps the conversion of A out of a pass of its own: on a
// 4096×688 A, read from memory, that pass took a fifth of the product's
// time (BenchmarkGemmBF16/nano-dX), where the float32 kernel reads A in
// place.
func runBF16(p *impl, threads int, transA bool, m, n, k int, alpha float32, a []float32, lda int, stripB func(buf []uint32, j0, w, q0, qn int) []uint32, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		scaleC(beta, c, ldc, 0, m, 0, n)
		return
	}
	kp := (k + 1) / 2
	mp := (m + bf16MR - 1) / bf16MR * bf16MR
	strips := (n + bf16NR - 1) / bf16NR
	rowStrips := mp / bf16MR
	if m >= n {
		np := max(1, min(threadsFor(threads, m, n, k), rowStrips))
		work := func(i0, i1 int) {
			scaleC(beta, c, ldc, i0, i1, 0, n)
			w := bf16Workspaces.Get().(*bf16Workspace)
			defer bf16Workspaces.Put(w)
			w.buf = growU32(w.buf, strips*bf16KC*bf16NR+bf16KC) // every strip's block of B, and packBBF16's scratch
			w.pa = growU32(w.pa, bf16MC*bf16KC)                 // a block of A's rows
			w.tmp = growU32(w.tmp, max(bf16MC, bf16MR*bf16KC))
			pbs := make([][]uint32, strips)
			var acc [bf16MR * bf16NR]float32
			for q0 := 0; q0 < kp; q0 += bf16KC {
				qn := min(bf16KC, kp-q0)
				for s := range strips {
					pbs[s] = stripB(w.buf[s*bf16KC*bf16NR:], s*bf16NR, min(bf16NR, n-s*bf16NR), q0, qn)
				}
				for r0 := i0; r0 < i1; r0 += bf16MC {
					r1 := min(i1, r0+bf16MC)
					packABlockBF16(p, w.pa, w.tmp, transA, k, a, lda, q0, qn, r0, r1)
					for s, pb := range pbs {
						j0 := s * bf16NR
						for r := r0; r < r1; r += bf16MR {
							bf16TileAddOn(p, qn, w.pa[(r-r0)*qn:], pb, c[r*ldc+j0:], ldc, alpha, min(bf16MR, r1-r), min(bf16NR, n-j0), acc[:])
						}
					}
				}
			}
		}
		forSplit(np, rowStrips, bf16MR, m, work)
		return
	}
	ws := bf16Workspaces.Get().(*bf16Workspace)
	defer bf16Workspaces.Put(ws)
	ws.pa = growU32(ws.pa, mp*kp)
	pa := ws.pa
	nt := min(threadsFor(threads, m, n, k), strips)
	// C scaled and A packed first, both split by 6-row strips over the
	// workers; each row's pairs are the same whoever packs them.
	prepare := func(i0, i1 int) {
		scaleC(beta, c, ldc, i0, i1, 0, n)
		w := bf16Workspaces.Get().(*bf16Workspace)
		w.tmp = growU32(w.tmp, max(i1-i0, bf16MR*min(kp, bf16KC)))
		for q0 := 0; q0 < kp; q0 += bf16KC {
			qn := min(bf16KC, kp-q0)
			packABlockBF16(p, pa[q0*mp+i0*qn:], w.tmp, transA, k, a, lda, q0, qn, i0, i1)
		}
		bf16Workspaces.Put(w)
	}
	forSplit(min(nt, rowStrips), rowStrips, bf16MR, m, prepare)
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
	forSplit(nt, strips, 1, strips, run)
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

// packABlockBF16 writes pairs q0 … q0+qn−1 of rows r0 … r1−1 of op(A)
// (m×k; r0 a multiple of 6) as bfloat16 pairs in strips of six rows: pair
// q of row r0+6s+i at dst[6·qn·s + 6(q−q0) + i], the low half element 2q;
// rows of the last strip past r1, and the element past an odd k, are 0.
// The rounding runs on path p's vectors along rows of the stored A, then
// the pairs are written into strips six rows at a time; tmp holds
// max(r1−r0, 6·qn).
func packABlockBF16(p *impl, dst, tmp []uint32, trans bool, k int, a []float32, lda, q0, qn, r0, r1 int) {
	if h := (r1 - r0) % bf16MR; h != 0 { // the last strip's rows past r1
		r := (r1 - r0) / bf16MR * bf16MR
		for q := range qn {
			clear(dst[r*qn+bf16MR*q+h : r*qn+bf16MR*q+bf16MR])
		}
	}
	if trans { // op(A)'s column kk is row kk of the stored A: pairs of two rows at once
		t := tmp[:r1-r0]
		for q := range qn {
			kk := 2 * (q0 + q)
			lo := a[kk*lda+r0 : kk*lda+r1]
			if kk+1 < k {
				pairs2(p, t, lo, a[(kk+1)*lda+r0:(kk+1)*lda+r1])
			} else {
				for i, x := range lo {
					t[i] = uint32(BF16(x))
				}
			}
			for r := 0; r < len(t); r += bf16MR { // a strip's six rows are adjacent
				src := t[r:min(r+bf16MR, len(t))]
				d := dst[r*qn+bf16MR*q:]
				if len(src) == bf16MR {
					d = d[:bf16MR:bf16MR]
					d[0], d[1], d[2], d[3], d[4], d[5] = src[0], src[1], src[2], src[3], src[4], src[5]
				} else {
					copy(d, src)
				}
			}
		}
		return
	}
	for r := r0; r < r1; r += bf16MR { // op(A)'s rows r … r+5: each row's pairs adjacent
		h := min(bf16MR, r1-r)
		for i := range h {
			pairsAdj(p, tmp[i*qn:(i+1)*qn], a[(r+i)*lda+2*q0:(r+i)*lda+min(k, 2*(q0+qn))])
		}
		strip := dst[(r-r0)*qn : (r-r0)*qn+bf16MR*qn]
		if h < bf16MR {
			for i := range h {
				for q, v := range tmp[i*qn : (i+1)*qn] {
					strip[bf16MR*q+i] = v
				}
			}
			continue
		}
		t0, t1, t2 := tmp[:qn], tmp[qn:2*qn], tmp[2*qn:3*qn]
		t3, t4, t5 := tmp[3*qn:4*qn], tmp[4*qn:5*qn], tmp[5*qn:6*qn]
		for q := range qn {
			d := strip[bf16MR*q : bf16MR*q+bf16MR : bf16MR*q+bf16MR]
			d[0], d[1], d[2], d[3], d[4], d[5] = t0[q], t1[q], t2[q], t3[q], t4[q], t5[q]
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

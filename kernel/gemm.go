package kernel

import (
	"fmt"
	"runtime"
	"sync"
)

// Gemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices, op(X) = X or Xᵀ.
// op(A) is m×k, op(B) is k×n, C is m×n; lda/ldb/ldc are row strides. beta == 0 means C is
// overwritten (NaNs in C ignored). A is stored m×k (k×m if transA), B is stored k×n (n×k if
// transB). Large products run on runtime.GOMAXPROCS(0) goroutines, each owning a disjoint block
// of C, so the result does not depend on the thread count. Safe for concurrent use. Inconsistent
// dimensions, strides or slice lengths panic (a programmer error).
//
// A row of C may differ in its last bits with m: A·Bᵀ with few rows takes the dot-product kernel,
// which sums in another order (see GemmRows).
func Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmWith(active, runtime.GOMAXPROCS(0), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// GemmSerial is Gemm on the calling goroutine only: for callers that already run many products
// in parallel (e.g. one per attention head), where Gemm's own goroutines would only add overhead.
func GemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmWith(active, 1, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// GemmRows is Gemm with batch-invariant rows: every element of C is computed by the same float32
// operations, in the same order, whatever m and n are, so it depends only on its row of op(A),
// its column of op(B), k, alpha, beta and its old value, never on the other rows (or columns). It
// always runs the blocked micro-kernel (see the package doc); Gemm's dot-product kernel for A·Bᵀ
// with few rows sums in another order. Where Gemm takes the micro-kernel the two agree bit for
// bit; where it would not (transB and few rows), GemmRows packs B at a cost of n·k copies per
// call, so a caller multiplying many few-row matrices by one B should pack it once (PackB,
// GemmPacked).
func GemmRows(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	newGemm(active, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc).rowsInvariant().exec(threadsFor(runtime.GOMAXPROCS(0), m, n, k))
}

// GemmRowsSerial is GemmRows on the calling goroutine only (as GemmSerial is to Gemm).
func GemmRowsSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	newGemm(active, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc).rowsInvariant().exec(1)
}

// PackedB is the right operand op(B) (k×n) of products C = alpha·A·op(B) + beta·C, copied once
// into the layout the micro-kernel reads: for each block of blockK rows, strips of nr columns,
// zero-padded. Products with it (GemmPacked) skip the packing Gemm does per call, which makes the
// micro-kernel at least as fast as the dot-product kernel for few rows of A: the batch-invariant
// choice for a fixed weight matrix multiplied by batches of any size (batched decode). A PackedB
// is read-only once built and may be shared by goroutines.
type PackedB struct {
	p    *impl
	n, k int
	np   int       // n rounded up to a multiple of p.nr
	data []float32 // block at row pc (a multiple of blockK) starts at pc·np; its strip of columns j…j+nr−1 at pc·np + j·kc
	bf16 []uint32  // PackBBF16's: strip s of 64 columns at s·kp·64 (kp = ⌈k/2⌉), its pair q at 64q; data unused
}

// PackB packs op(B), k×n (B stored k×n with row stride ldb, or n×k if transB), for GemmPacked.
// For a linear layer y = x·Wᵀ with W stored [out, in]: PackB(true, out, in, W, in). Inconsistent
// arguments panic.
func PackB(transB bool, n, k int, b []float32, ldb int) *PackedB {
	return packBWith(active, transB, n, k, b, ldb)
}

// packBWith packs op(B) for code path p.
func packBWith(p *impl, transB bool, n, k int, b []float32, ldb int) *PackedB {
	checkPackB("PackB", transB, n, k, b, ldb)
	np := (n + p.nr - 1) / p.nr * p.nr
	pb := &PackedB{p: p, n: n, k: k, np: np, data: make([]float32, k*np)}
	for pc := 0; pc < k; pc += blockK {
		kc := min(blockK, k-pc)
		packB(p, pb.data[pc*np:pc*np+kc*np], b, ldb, transB, pc, kc, 0, n)
	}
	return pb
}

// checkPackB panics unless b holds op(B), k×n (fn names the caller).
func checkPackB(fn string, transB bool, n, k int, b []float32, ldb int) {
	if n < 0 || k < 0 {
		panic(fmt.Sprintf("kernel.%s: negative dimension n=%d k=%d", fn, n, k))
	}
	if transB {
		checkMatrix("b", b, n, k, ldb)
	} else {
		checkMatrix("b", b, k, n, ldb)
	}
}

// N is the number of columns of op(B) (and of C).
func (pb *PackedB) N() int { return pb.n }

// K is the number of rows of op(B): the depth of the products.
func (pb *PackedB) K() int { return pb.k }

// GemmPacked computes C = alpha·A·op(B) + beta·C with op(B) packed by PackB: A is m×k, row-major
// with row stride lda, C is m×n (n, k those of b). Its rows are batch-invariant as GemmRows's and
// equal, bit for bit, those of GemmRows with the B that was packed (GemmBF16's, for a B packed by
// PackBBF16). Large products run on
// runtime.GOMAXPROCS(0) goroutines as Gemm's do. Safe for concurrent use.
func GemmPacked(m int, alpha float32, a []float32, lda int, b *PackedB, beta float32, c []float32, ldc int) {
	gemmPacked(runtime.GOMAXPROCS(0), m, alpha, a, lda, b, beta, c, ldc)
}

// GemmPackedSerial is GemmPacked on the calling goroutine only (as GemmSerial is to Gemm): for
// callers that split a batch's rows over their own goroutines (the decoder's sequence groups).
// Its rows equal GemmPacked's bit for bit.
func GemmPackedSerial(m int, alpha float32, a []float32, lda int, b *PackedB, beta float32, c []float32, ldc int) {
	gemmPacked(1, m, alpha, a, lda, b, beta, c, ldc)
}

// gemmPacked runs GemmPacked with at most threads goroutines.
func gemmPacked(threads, m int, alpha float32, a []float32, lda int, b *PackedB, beta float32, c []float32, ldc int) {
	if b.bf16 != nil {
		gemmPackedBF16(threads, m, alpha, a, lda, b, beta, c, ldc)
		return
	}
	g := newGemm(b.p, false, false, m, b.n, b.k, alpha, a, lda, nil, max(b.n, 1), beta, c, ldc)
	g.packed = b
	g.exec(threadsFor(threads, m, b.n, b.k))
}

// threadsFor is the number of goroutines, at most threads, for an m×n×k product: one per
// parallelFlops of work, counted as 2·max(m, streamRows)·n·k. Below streamRows rows a product
// is bound by reading B (n·k floats; a decoder's weights come from memory) rather than by its
// multiply-adds, and each further core brings its own share of the memory bandwidth.
func threadsFor(threads, m, n, k int) int {
	flops := 2 * float64(max(m, streamRows)) * float64(n) * float64(k)
	if threads > 1 && flops >= parallelFlops {
		return min(threads, int(flops/parallelFlops))
	}
	return 1
}

// checkMatrix panics unless x holds a rows×cols row-major matrix with row stride ld.
func checkMatrix(name string, x []float32, rows, cols, ld int) {
	if ld < max(cols, 1) {
		panic(fmt.Sprintf("kernel.Gemm: ld%s = %d < %d columns", name, ld, cols))
	}
	if rows == 0 || cols == 0 {
		return
	}
	if need := (rows-1)*ld + cols; len(x) < need {
		panic(fmt.Sprintf("kernel.Gemm: len(%s) = %d < %d needed for %d×%d with ld%s = %d", name, len(x), need, rows, cols, name, ld))
	}
}

// checkGemm validates the arguments of Gemm.
func checkGemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("kernel.Gemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	if transA {
		checkMatrix("a", a, k, m, lda)
	} else {
		checkMatrix("a", a, m, k, lda)
	}
	if transB {
		checkMatrix("b", b, n, k, ldb)
	} else {
		checkMatrix("b", b, k, n, ldb)
	}
	checkMatrix("c", c, m, n, ldc)
}

// Cache blocking: a kc×nc panel of op(B) is packed per step and reused over all rows of C; an
// mc×kc block of op(A) stays in L1/L2 while the nr-wide strips of the panel pass through.
const (
	blockK = 256
	blockM = 48 // rounded down to a multiple of mr
	blockN = 2048
	// parallelFlops is the product size (2·m·n·k, here about 6 µs of one core) below which Gemm
	// stays on the calling goroutine; each further goroutine needs as much work again. Starting
	// and joining a goroutine costs about a microsecond, so a batched decode step's products
	// (32×688×256: 11 Mflop) split across cores.
	parallelFlops = 1 << 20
	// streamRows is the row count below which threadsFor counts a product's work by the B it
	// reads: a batch-1 decode step's 576×576 product (SmolLM2-135M) splits across cores.
	streamRows = 8
)

// microKernel computes C[0:mr, 0:nr] += alpha·Σ_p A(i,p)·b[p·bs+j] where A(i,p) = a[i·ars + p·aps]
// reads op(A) in place (ars = lda, aps = 1, or transposed ars = 1, aps = lda) and b is a kc×nr
// block with row stride bs (a packed, zero-padded strip, or op(B) itself). With zc, C's tile is
// taken as zero and not read (the first block of k when beta = 0): every element gets the value
// it would get after C was cleared, bit for bit.
type microKernel func(mr, nr, kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32, zc bool)

// impl is one code path: the tile shape and micro-kernel used by the blocked driver.
type impl struct {
	name   string
	mr, nr int
	micro  microKernel
	// directB reports that micro may read op(B) in place with its own row stride (B not
	// transposed). micro reads whole units of directBUnit columns from a unit-aligned start, so
	// a column edge reads up to the next multiple of directBUnit: in place only where those
	// columns are still inside b (their values land in lanes of the tile's scratch copy of C
	// that are thrown away: lanes are independent, so C's bits are those of a packed B).
	directB     bool
	directBUnit int
	dot         func(x, y []float32) float32
	axpy        func(alpha float32, x, y []float32)
	scale       func(alpha float32, x []float32)
	// dotT, when set, computes c[i·ldc+j] += alpha·(row i of a · row j of b) for i < mr ≤ 4,
	// j < nb ≤ 4: the tile kernel of A·Bᵀ for few rows of A, which needs no
	// packing of B.
	dotT func(mr, nb, k int, a []float32, lda int, b []float32, ldb int, alpha float32, c []float32, ldc int)
	// useDotT reports whether dotT beats packing B for m rows and depth k.
	useDotT  func(m, k int) bool
	expShift func(dst, x []float32, shift float32) float32
	sigmoid  func(dst, x []float32)
	max      func(x []float32) float32
	// packAT packs w ≤ 16 columns of kc rows of A: dst[p·w + i] = a[p·lda + i].
	packAT func(kc int, a []float32, lda, w int, dst []float32)
	// packT, when set, packs packTW columns of op(B) = Bᵀ: dst[p·ds + j] = b[j·ldb + p],
	// j < packTW, p < kc.
	packT  func(kc int, b []float32, ldb int, dst []float32, ds int)
	packTW int
	// packN, when set, packs a strip of nr = 16 columns of op(B) = B, w ≤ 16 of them read and
	// the rest zero: dst[p·16 + j] = b[p·ldb + j].
	packN func(kc int, b []float32, ldb, w int, dst []float32)
	// microPacked, when set, is micro for a whole mr×nr tile on packed A (mr floats a k) and
	// packed B (nr floats a k) with kc even: the same sums, bit for bit, with the k loop
	// unrolled and fixed strides.
	microPacked func(kc int, a, b, c []float32, ldc int, alpha float32, zc bool)
	// peak runs iters rounds of independent FMAs and returns the flops done.
	peak func(iters int) float64
}

// workspace holds the packing buffers of one worker goroutine.
type workspace struct {
	a, b []float32 // packed op(A) block (transposed A) or rows (dot path); packed op(B) panel
}

var workspaces = sync.Pool{New: func() any { return new(workspace) }}

func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

// gemmWith runs Gemm on code path p with at most threads goroutines, fewer for small products.
func gemmWith(p *impl, threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmN(p, threadsFor(threads, m, n, k), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gemmN runs Gemm on code path p with nt goroutines (fewer if C has fewer tiles).
func gemmN(p *impl, nt int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	newGemm(p, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc).exec(nt)
}

// gemmArgs is one product and how to run it.
type gemmArgs struct {
	p              *impl
	transA, transB bool
	m, n, k        int
	alpha          float32
	a              []float32
	lda            int
	b              []float32
	ldb            int
	beta           float32
	c              []float32
	ldc            int
	rows           bool     // batch-invariant rows: never the dot-product kernel
	packed         *PackedB // op(B) already packed (b unused)
}

func newGemm(p *impl, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) *gemmArgs {
	return &gemmArgs{p: p, transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc}
}

// rowsInvariant makes g run the micro-kernel whatever m is (GemmRows).
func (g *gemmArgs) rowsInvariant() *gemmArgs {
	g.rows = true
	return g
}

// exec validates the product and runs it with nt goroutines (fewer if C has fewer tiles).
func (g *gemmArgs) exec(nt int) {
	p, m, n := g.p, g.m, g.n
	if g.packed == nil {
		checkGemm(g.transA, g.transB, m, n, g.k, g.a, g.lda, g.b, g.ldb, g.c, g.ldc)
	} else {
		if m < 0 {
			panic(fmt.Sprintf("kernel.GemmPacked: negative dimension m=%d", m))
		}
		checkMatrix("a", g.a, m, g.k, g.lda)
		checkMatrix("c", g.c, m, n, g.ldc)
	}
	if m == 0 || n == 0 {
		return
	}
	if !g.rows && g.packed == nil && p.dotT != nil && g.transB && g.k > 0 && p.useDotT(m, g.k) && g.alpha != 0 {
		g.dotT(nt, m, n)
		return
	}
	tilesM, tilesN := (m+p.mr-1)/p.mr, (n+p.nr-1)/p.nr
	nt = max(1, min(nt, max(tilesM, tilesN)))
	if nt == 1 {
		g.run(0, m, 0, n)
		return
	}
	// Each worker owns whole tiles of C. Splitting n costs nothing extra (each worker packs its
	// own columns of B); splitting m makes every worker pack all of B, so it is taken only when
	// it balances the work better.
	imbalance := func(tiles int) float64 { return float64((tiles+nt-1)/nt*nt) / float64(tiles) }
	splitN := tilesN >= nt && imbalance(tilesN) <= imbalance(tilesM) || tilesM < nt
	tiles, unit, size := tilesM, p.mr, m
	if splitN {
		tiles, unit, size = tilesN, p.nr, n
	}
	forSplit(nt, tiles, unit, size, func(lo, hi int) {
		if splitN {
			g.run(0, m, lo, hi)
		} else {
			g.run(lo, hi, 0, n)
		}
	})
}

// forSplit cuts [0, size), tiles units of unit elements (the last one may
// be short), into nt ranges of whole units and runs fn on each non-empty one
// at once (Parallel); with nt ≤ 1 it runs fn(0, size) on the caller's
// goroutine.
func forSplit(nt, tiles, unit, size int, fn func(lo, hi int)) {
	if nt <= 1 {
		fn(0, size)
		return
	}
	Parallel(nt, func(t int) {
		lo, hi := min(size, tiles*t/nt*unit), min(size, tiles*(t+1)/nt*unit)
		if lo < hi {
			fn(lo, hi)
		}
	})
}

// run computes rows m0..m1 and columns n0..n1 of C.
func (g *gemmArgs) run(m0, m1, n0, n1 int) {
	noProduct := g.k == 0 || g.alpha == 0
	if noProduct || g.beta != 0 {
		scaleC(g.beta, g.c, g.ldc, m0, m1, n0, n1)
	}
	if noProduct {
		return
	}
	// With beta = 0 the tiles of the first block of k write C instead of adding to it.
	zc := g.beta == 0
	p := g.p
	mr, nr := p.mr, p.nr
	ws := workspaces.Get().(*workspace)
	defer workspaces.Put(ws)
	// B is used in place when few row strips of A reuse it: packing would cost as much as it saves.
	direct := g.packed == nil && p.directB && !g.transB && m1-m0 <= 2*mr && g.directFits(n0, n1)
	// The micro-kernels read A through strides: A itself when not transposed (row stride lda),
	// packed kc×mr strips (row stride 1, column stride mr) when it is.
	mcMax := max(mr, blockM/mr*mr)
	for jc := n0; jc < n1; jc += blockN {
		nc := min(blockN, n1-jc)
		ncPad := (nc + nr - 1) / nr * nr
		for pc := 0; pc < g.k; pc += blockK {
			kc := min(blockK, g.k-pc)
			var bp []float32
			bs := nr
			switch {
			case g.packed != nil:
				// jc is a multiple of nr: workers split C at whole tiles.
				bp = g.packed.data[pc*g.packed.np+jc*kc:]
			case direct:
				bp, bs = g.b[pc*g.ldb+jc:], g.ldb
			default:
				ws.b = grow(ws.b, kc*ncPad)
				bp = ws.b
				packB(p, bp, g.b, g.ldb, g.transB, pc, kc, jc, nc)
			}
			for ic := m0; ic < m1; ic += mcMax {
				mc := min(mcMax, m1-ic)
				// Transposed A is packed: in place its strips of mr values sit one row of A
				// (lda floats, a page or more) apart at every k, which thrashes the TLB.
				var ap []float32
				if g.transA {
					ws.a = grow(ws.a, mc*kc)
					ap = ws.a
					for s := 0; s < mc; s += mr {
						w := min(mr, mc-s)
						p.packAT(kc, g.a[pc*g.lda+ic+s:], g.lda, w, ap[s*kc:s*kc+w*kc])
					}
				}
				for jr := 0; jr < nc; jr += nr {
					nrr := min(nr, nc-jr)
					var bj []float32
					if direct {
						bj = bp[jr:]
					} else {
						bj = bp[jr*kc:]
					}
					for ir := 0; ir < mc; ir += mr {
						mrr := min(mr, mc-ir)
						c := g.c[(ic+ir)*g.ldc+jc+jr:]
						if g.transA && p.microPacked != nil && mrr == mr && nrr == nr && !direct && kc%2 == 0 {
							p.microPacked(kc, ap[ir*kc:ir*kc+mr*kc], bj[:nr*kc], c, g.ldc, g.alpha, zc && pc == 0)
						} else if g.transA {
							p.micro(mrr, nrr, kc, ap[ir*kc:], 1, mrr, bj, bs, c, g.ldc, g.alpha, zc && pc == 0)
						} else {
							p.micro(mrr, nrr, kc, g.a[(ic+ir)*g.lda+pc:], g.lda, 1, bj, bs, c, g.ldc, g.alpha, zc && pc == 0)
						}
					}
				}
			}
		}
	}
}

// InPlaceColumns is a multiple of every path's directBUnit: a B not transposed whose slice has room
// up to the next multiple of InPlaceColumns past the last column of its last row is read in place
// at any column edge (the decoder rounds its key cache to it).
const InPlaceColumns = 16

// directFits reports whether columns n0 … n1−1 of B can be read in place: n0 starts a unit of
// p.directBUnit columns, and the last row's read, rounded up to a whole unit, stays inside b
// (the decoder's transposed key cache has room past its last key; a matrix whose last row ends
// its slice is read in place only when n is a multiple of the unit).
func (g *gemmArgs) directFits(n0, n1 int) bool {
	u := g.p.directBUnit
	if n0%u != 0 {
		return false
	}
	end := (n1 + u - 1) / u * u
	return (g.k-1)*g.ldb+end <= len(g.b)
}

// packATGo copies w ≤ 16 columns of kc rows: dst[p·w + i] = a[p·lda + i].
func packATGo(kc int, a []float32, lda, w int, dst []float32) {
	for p := range kc {
		copy(dst[p*w:p*w+w], a[p*lda:p*lda+w])
	}
}

// scaleC sets C[m0:m1, n0:n1] ← beta·C (to 0 when beta == 0, whatever C held).
func scaleC(beta float32, c []float32, ldc, m0, m1, n0, n1 int) {
	if beta == 1 {
		return
	}
	for i := m0; i < m1; i++ {
		row := c[i*ldc+n0 : i*ldc+n1]
		if beta == 0 {
			clear(row)
		} else {
			Scale(beta, row)
		}
	}
}

// packB copies op(B)[pc:pc+kc, jc:jc+nc] into dst as strips of p.nr columns: strip s holds
// element (q, s·nr+j) at dst[s·kc + q·nr + j]; columns past nc are zero. p.packT, if set, packs
// p.packTW transposed columns at a time, p.packN a whole strip of B.
func packB(p *impl, dst, b []float32, ldb int, trans bool, pc, kc, jc, nc int) {
	nr := p.nr
	for s := 0; s < nc; s += nr {
		w := min(nr, nc-s)
		d := dst[s*kc : s*kc+nr*kc]
		if trans {
			// op(B)[q, j] = B[j, q]: row j of B holds column j of the strip. Blocks of 8 values
			// of q keep the 8 destination rows in L1 while all w source rows are read.
			j0 := 0
			if p.packT != nil {
				for ; j0+p.packTW <= w; j0 += p.packTW {
					p.packT(kc, b[(jc+s+j0)*ldb+pc:], ldb, d[j0:], nr)
				}
			}
			for q0 := 0; q0 < kc; q0 += 8 {
				qe := min(q0+8, kc)
				for j := j0; j < w; j++ {
					off := (jc+s+j)*ldb + pc
					for q, v := range b[off+q0 : off+qe] {
						d[(q0+q)*nr+j] = v
					}
				}
			}
			if w < nr {
				for q := range kc {
					clear(d[q*nr+w : q*nr+nr])
				}
			}
			continue
		}
		if p.packN != nil && kc > 0 {
			// The last row may end before w values past its start only if ldb < w, which a
			// matrix of nc ≥ w columns cannot have.
			p.packN(kc, b[pc*ldb+jc+s:(pc+kc-1)*ldb+jc+s+w], ldb, w, d)
			continue
		}
		for q := range kc {
			row := (pc + q) * ldb
			copy(d[q*nr:q*nr+w], b[row+jc+s:row+jc+s+w])
			clear(d[q*nr+w : q*nr+nr])
		}
	}
}

// useDotT512 reports whether A·Bᵀ with m rows and depth k is faster as dot products of rows than
// through packed B: packing B costs n·k and only pays off over enough rows, the dot kernel's
// final reductions cost about as much as 64 of its multiply-adds (measured on AVX-512).
func useDotT512(m, k int) bool {
	return m <= 8 || m <= 40 && k >= 128 || m <= 64 && k >= 512
}

// useDotTFew is the rule of dotTVia: one dot product per element, for a few rows only.
func useDotTFew(m, k int) bool { return m <= 4 }

// dotTVia returns a dotT tile made of single dot products (for the paths without a dot tile
// kernel): c[i·ldc+j] += alpha·dot(row i of a, row j of b).
func dotTVia(dot func(x, y []float32) float32) func(mr, nb, k int, a []float32, lda int, b []float32, ldb int, alpha float32, c []float32, ldc int) {
	return func(mr, nb, k int, a []float32, lda int, b []float32, ldb int, alpha float32, c []float32, ldc int) {
		for i := range mr {
			ai := a[i*lda : i*lda+k]
			row := c[i*ldc : i*ldc+nb]
			for j := range row {
				row[j] += alpha * dot(ai, b[j*ldb:j*ldb+k])
			}
		}
	}
}

// dotT computes C = alpha·op(A)·Bᵀ + beta·C with the dot-product tile kernel on nt goroutines,
// each owning a range of columns of C. op(A) is first copied to contiguous rows if transposed.
func (g *gemmArgs) dotT(nt, m, n int) {
	a, lda := g.a, g.lda
	if g.transA {
		ws := workspaces.Get().(*workspace)
		defer workspaces.Put(ws)
		ws.a = grow(ws.a, m*g.k)
		for p := range g.k {
			for i, v := range g.a[p*g.lda : p*g.lda+m] {
				ws.a[i*g.k+p] = v
			}
		}
		a, lda = ws.a, g.k
	}
	cols := func(n0, n1 int) {
		scaleC(g.beta, g.c, g.ldc, 0, m, n0, n1)
		for j := n0; j < n1; j += 4 {
			nb := min(4, n1-j)
			for i0 := 0; i0 < m; i0 += 4 {
				g.p.dotT(min(4, m-i0), nb, g.k, a[i0*lda:], lda, g.b[j*g.ldb:], g.ldb, g.alpha, g.c[i0*g.ldc+j:], g.ldc)
			}
		}
	}
	forSplit(min(nt, (n+3)/4), (n+3)/4, 4, n, cols)
}

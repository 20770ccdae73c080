// Command asm generates the amd64 assembly of package kernel with avo:
//
//	cd kernel/asm && go run . -out ../kernel_amd64.s -stubs ../stubs_amd64.go -pkg kernel
//
// (go generate in package kernel runs exactly this). The output is committed, so building
// package kernel needs neither this module nor avo.
package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Tile limits of the micro-kernels; they must match kernel's mr512/nr512 and mr256/nr256.
const (
	mr512, nv512 = 6, 4 // rows × zmm vectors (16 floats): 6×64 tile, 24 accumulators
	mr256, nv256 = 6, 2 // rows × ymm vectors (8 floats): 6×16 tile, 12 accumulators
)

// prefetchC makes the GEMM tiles prefetch their tile of C before the k loop.
const prefetchC = true

const gemmSig = "func(kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32, mask uint32, zc bool)"

func main() {
	for mr := 1; mr <= mr512; mr++ {
		for nv := 1; nv <= nv512; nv++ {
			gemmTile(true, mr, nv)
		}
	}
	for mr := 1; mr <= mr256; mr++ {
		for nv := 1; nv <= nv256; nv++ {
			gemmTile(false, mr, nv)
		}
	}
	for mr := 1; mr <= 4; mr++ {
		for nb := 1; nb <= 4; nb++ {
			dotTile(mr, nb)
		}
	}
	packT16()
	packAT()
	expShift()
	sigmoid()
	maxVec()
	packT8()
	packAT256()
	packN256()
	expShift256()
	sigmoid256()
	max256()
	gemmTilePacked(2)
	dot(true)
	dot(false)
	axpy(true)
	axpy(false)
	scale(true)
	scale(false)
	peak(true)
	peak(false)
	bf16Pairs2()
	bf16PairsAdj()
	Generate()
}

func vec(wide bool) VecVirtual {
	if wide {
		return ZMM()
	}
	return YMM()
}

// paramAddr is the frame address of the named scalar parameter.
func paramAddr(name string) Mem {
	b, err := Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

// zero clears v (VPXORD for zmm: VXORPS on zmm would need AVX512DQ).
func zero(wide bool, v VecVirtual) {
	if wide {
		VPXORD(v, v, v)
	} else {
		VXORPS(v, v, v)
	}
}

func suffix(wide bool) string {
	if wide {
		return "512"
	}
	return "256"
}

// gemmTile emits gemm{512,256}m<mr>n<nv>: C[0:mr, 0:nv·w] += alpha·Σ_p A(i,p)·b[p·bs+j] (w = 16
// or 8 floats) where A(i,p) = a[i·ars + p·aps]: op(A) read in place, either layout (row-major A:
// ars = lda, aps = 1; transposed: ars = 1, aps = lda), and b a kc×(nv·w) block with row stride
// bs floats. The 512-bit kernel loads the last vector of each B and C row under the 16-bit mask,
// so it never touches columns past the tile; the 256-bit kernel uses whole vectors.
func gemmTile(wide bool, mr, nv int) {
	TEXT(fmt.Sprintf("gemm%sm%dn%d", suffix(wide), mr, nv), NOSPLIT, gemmSig)
	Doc(fmt.Sprintf("C[0:%d, 0:%d vectors] += alpha · A · B block.", mr, nv))
	vbytes := 32
	if wide {
		vbytes = 64
	}
	kc := Load(Param("kc"), GP64())
	ap := Load(Param("a").Base(), GP64())
	ars := Load(Param("ars"), GP64())
	SHLQ(Imm(2), ars)
	aps := Load(Param("aps"), GP64())
	SHLQ(Imm(2), aps)
	// Rows 0–2 are addressed from ap, rows 3–5 from ap3 = ap + 3·ars.
	var ap3 Register
	if mr > 3 {
		ap3 = GP64()
		LEAQ(Mem{Base: ap, Index: ars, Scale: 2}, ap3)
		ADDQ(ars, ap3)
	}
	arow := func(i int) Mem {
		base := ap
		if i >= 3 {
			base, i = ap3, i-3
		}
		if i == 0 {
			return Mem{Base: base}
		}
		return Mem{Base: base, Index: ars, Scale: uint8(i)}
	}
	bp := Load(Param("b").Base(), GP64())
	bs := Load(Param("bs"), GP64())
	SHLQ(Imm(2), bs)
	if wide {
		mask := Load(Param("mask"), GP32())
		KMOVW(mask, K1)
	}
	acc := make([][]VecVirtual, mr)
	for i := range acc {
		acc[i] = make([]VecVirtual, nv)
		for j := range acc[i] {
			acc[i][j] = vec(wide)
			zero(wide, acc[i][j])
		}
	}
	bv := make([]VecVirtual, nv)
	for j := range bv {
		bv[j] = vec(wide)
	}
	bc := vec(wide)
	loop := fmt.Sprintf("loop_%s_%d_%d", suffix(wide), mr, nv)
	done := fmt.Sprintf("done_%s_%d_%d", suffix(wide), mr, nv)
	cp := Load(Param("c").Base(), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(Imm(2), ldc)
	if prefetchC {
		// The tile of C is read only after the loop: fetch it meanwhile.
		pc := GP64()
		MOVQ(cp, pc)
		for i := range mr {
			for j := 0; j < nv*vbytes; j += 64 {
				PREFETCHT0(Mem{Base: pc, Disp: j})
			}
			if i < mr-1 {
				ADDQ(ldc, pc)
			}
		}
	}
	TESTQ(kc, kc)
	JZ(LabelRef(done))
	Label(loop)
	for j := range bv {
		m := Mem{Base: bp, Disp: vbytes * j}
		if wide && j == nv-1 {
			VMOVUPS_Z(m, K1, bv[j])
		} else {
			VMOVUPS(m, bv[j])
		}
	}
	for i := range mr {
		VBROADCASTSS(arow(i), bc)
		for j := range nv {
			VFMADD231PS(bv[j], bc, acc[i][j])
		}
	}
	ADDQ(aps, ap)
	if mr > 3 {
		ADDQ(aps, ap3)
	}
	ADDQ(bs, bp)
	DECQ(kc)
	JNZ(LabelRef(loop))
	Label(done)
	VBROADCASTSS(paramAddr("alpha"), bc)
	t := bv[0]
	// zc: C is taken as zero, not read (beta = 0 and the first block of k): the sum is
	// alpha·acc + 0 in one FMA, as it is after C was cleared.
	zc := GP32()
	MOVBLZX(paramAddr("zc"), zc)
	zeroStore := fmt.Sprintf("zc_%s_%d_%d", suffix(wide), mr, nv)
	ret := fmt.Sprintf("ret_%s_%d_%d", suffix(wide), mr, nv)
	TESTL(zc, zc)
	JNZ(LabelRef(zeroStore))
	storeTile(wide, wide, acc, bc, t, cp, ldc, false)
	JMP(LabelRef(ret))
	Label(zeroStore)
	storeTile(wide, wide, acc, bc, t, cp, ldc, true)
	Label(ret)
	VZEROUPPER()
	RET()
}

// storeTile emits C = C + alpha·acc for the tile's rows (C taken as zero, not read, with zeroC):
// one FMA an element into t, the row of C at cp (advanced by ldc a row). With masked, each row's
// last vector is loaded and stored under K1.
func storeTile(wide, masked bool, acc [][]VecVirtual, alpha, t VecVirtual, cp, ldc Register, zeroC bool) {
	vbytes := 32
	if wide {
		vbytes = 64
	}
	for i := range acc {
		nv := len(acc[i])
		for j := range nv {
			m := Mem{Base: cp, Disp: vbytes * j}
			if zeroC {
				zero(wide, t)
			}
			if masked && j == nv-1 {
				if !zeroC {
					VMOVUPS_Z(m, K1, t)
				}
				VFMADD231PS(acc[i][j], alpha, t)
				VMOVUPS(t, K1, m)
			} else {
				if !zeroC {
					VMOVUPS(m, t)
				}
				VFMADD231PS(acc[i][j], alpha, t)
				VMOVUPS(t, m)
			}
		}
		if i < len(acc)-1 {
			ADDQ(ldc, cp)
		}
	}
}

// hsum leaves the sum of the lanes of v (zmm or ymm) in the low lane of the returned xmm.
// On zmm it may use X16–X31 and so needs AVX512VL.
func hsum(wide bool, v VecVirtual) VecVirtual { return hreduce(wide, v, VADDPS, VADDSS) }

// hmax leaves the maximum of the lanes of v (zmm or ymm) in the low lane of the returned xmm.
func hmax(wide bool, v VecVirtual) VecVirtual { return hreduce(wide, v, VMAXPS, VMAXSS) }

// hreduce folds the lanes of v (zmm or ymm) by halves with the packed operation ps, the last
// pair with its scalar form ss, into the low lane of the returned xmm.
func hreduce(wide bool, v VecVirtual, ps, ss func(...Op)) VecVirtual {
	var y VecVirtual
	if wide {
		y = YMM()
		VEXTRACTF64X4(Imm(1), v, y)
		ps(v.AsY(), y, y)
	} else {
		y = v
	}
	x := XMM()
	if wide {
		// EVEX form: y may be one of Y16–Y31, which VEX cannot encode.
		VEXTRACTF32X4(Imm(1), y, x)
	} else {
		VEXTRACTF128(Imm(1), y, x)
	}
	ps(y.AsX(), x, x)
	t := XMM()
	VMOVHLPS(x, x, t)
	ps(t, x, x)
	VMOVSHDUP(x, t)
	ss(t, x, x)
	return x
}

// reduce16 returns the vector whose lane i is the sum of the lanes of v[i]: the 16×16 transpose
// of transpose16 with an add after each stage, so that every stage halves the vectors.
func reduce16(v []VecVirtual) VecVirtual {
	w := make([]VecVirtual, 8)
	for i := range w {
		lo, hi := ZMM(), ZMM()
		VUNPCKLPS(v[2*i+1], v[2*i], lo)
		VUNPCKHPS(v[2*i+1], v[2*i], hi)
		w[i] = ZMM()
		VADDPS(hi, lo, w[i])
	}
	// x[j], lane L: the sums of lane L of v[4j…4j+3].
	x := make([]VecVirtual, 4)
	for j := range x {
		lo, hi := ZMM(), ZMM()
		VSHUFPS(Imm(0x44), w[2*j+1], w[2*j], lo)
		VSHUFPS(Imm(0xEE), w[2*j+1], w[2*j], hi)
		x[j] = ZMM()
		VADDPS(hi, lo, x[j])
	}
	y := make([]VecVirtual, 2)
	for j := range y {
		lo, hi := ZMM(), ZMM()
		VSHUFF32X4(Imm(0x44), x[2*j+1], x[2*j], lo)
		VSHUFF32X4(Imm(0xEE), x[2*j+1], x[2*j], hi)
		y[j] = ZMM()
		VADDPS(hi, lo, y[j])
	}
	lo, hi, r := ZMM(), ZMM(), ZMM()
	VSHUFF32X4(Imm(0x88), y[1], y[0], lo)
	VSHUFF32X4(Imm(0xDD), y[1], y[0], hi)
	VADDPS(hi, lo, r)
	return r
}

// dotTile emits dotT512m<mr>n<nb>: c[i·ldc+j] += alpha·Σ_p a[i·lda+p]·b[j·ldb+p] for i < mr,
// j < nb, p < k: a tile of C += alpha·A·Bᵀ as dot products of rows (both contiguous along k). The k tail is
// loaded under a mask, so no row is read past its k values.
func dotTile(mr, nb int) {
	TEXT(fmt.Sprintf("dotT512m%dn%d", mr, nb), NOSPLIT, "func(k int, a []float32, lda int, b []float32, ldb int, alpha float32, c []float32, ldc int)")
	Doc(fmt.Sprintf("c[i·ldc+j] += alpha · (row i of a · row j of b), for i < %d, j < %d.", mr, nb))
	k := GP64()
	Load(Param("k"), k)
	lda := Load(Param("lda"), GP64())
	SHLQ(Imm(2), lda)
	ldb := Load(Param("ldb"), GP64())
	SHLQ(Imm(2), ldb)
	ap := make([]GPVirtual, mr)
	ap[0] = GP64()
	Load(Param("a").Base(), ap[0])
	for i := 1; i < mr; i++ {
		ap[i] = GP64()
		LEAQ(Mem{Base: ap[i-1], Index: lda, Scale: 1}, ap[i])
	}
	bp := make([]GPVirtual, nb)
	bp[0] = GP64()
	Load(Param("b").Base(), bp[0])
	for j := 1; j < nb; j++ {
		bp[j] = GP64()
		LEAQ(Mem{Base: bp[j-1], Index: ldb, Scale: 1}, bp[j])
	}
	// The rows now sit in registers; lda and ldb become the byte offset p·4 common to all rows.
	off := GP64()
	XORQ(off, off)
	acc := make([][]VecVirtual, mr)
	for i := range acc {
		acc[i] = make([]VecVirtual, nb)
		for j := range acc[i] {
			acc[i][j] = ZMM()
			zero(true, acc[i][j])
		}
	}
	av := make([]VecVirtual, mr)
	for i := range av {
		av[i] = ZMM()
	}
	bv := ZMM()
	name := fmt.Sprintf("%d_%d", mr, nb)
	body := func(masked bool) {
		for i := range mr {
			m := Mem{Base: ap[i], Index: off, Scale: 1}
			if masked {
				VMOVUPS_Z(m, K1, av[i])
			} else {
				VMOVUPS(m, av[i])
			}
		}
		for j := range nb {
			m := Mem{Base: bp[j], Index: off, Scale: 1}
			if masked {
				VMOVUPS_Z(m, K1, bv)
			} else {
				VMOVUPS(m, bv)
			}
			for i := range mr {
				VFMADD231PS(av[i], bv, acc[i][j])
			}
		}
	}
	full := GP64()
	MOVQ(k, full)
	SHRQ(Imm(4), full)
	JZ(LabelRef("dottail_" + name))
	Label("dotloop_" + name)
	body(false)
	ADDQ(Imm(64), off)
	DECQ(full)
	JNZ(LabelRef("dotloop_" + name))
	Label("dottail_" + name)
	ANDQ(Imm(15), k)
	JZ(LabelRef("dotsum_" + name))
	tailMask(k)
	body(true)
	Label("dotsum_" + name)
	v := make([]VecVirtual, 16)
	z := ZMM()
	zero(true, z)
	for i := range 4 {
		for j := range 4 {
			if i < mr && j < nb {
				v[4*i+j] = acc[i][j]
			} else {
				v[4*i+j] = z
			}
		}
	}
	r := reduce16(v)
	al := ZMM()
	VBROADCASTSS(paramAddr("alpha"), al)
	VMULPS(al, r, r)
	cp := Load(Param("c").Base(), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(Imm(2), ldc)
	mask := GP32()
	MOVL(U32(1<<nb-1), mask)
	KMOVW(mask, K2)
	for i := range mr {
		x, t := XMM(), XMM()
		VEXTRACTF32X4(Imm(uint64(i)), r, x)
		VMOVUPS_Z(Mem{Base: cp}, K2, t)
		VADDPS(x, t, t)
		VMOVUPS(t, K2, Mem{Base: cp})
		if i < mr-1 {
			ADDQ(ldc, cp)
		}
	}
	VZEROUPPER()
	RET()
}

// transpose4x4 is the first two stages of transpose8 and transpose16: in-lane unpacks of row
// pairs, then 64-bit shuffles, which transpose every 4×4 block of each 128-bit lane of the rows r
// (vectors made by vec): b[4g+q], 128-bit lane L, holds rows 4g…4g+3 of column 4L+q.
func transpose4x4(r []VecVirtual, vec func() VecVirtual) []VecVirtual {
	n := len(r)
	a := make([]VecVirtual, n)
	for i := 0; i < n; i += 2 {
		a[i], a[i+1] = vec(), vec()
		VUNPCKLPS(r[i+1], r[i], a[i])
		VUNPCKHPS(r[i+1], r[i], a[i+1])
	}
	b := make([]VecVirtual, n)
	for g := 0; g < n; g += 4 {
		for h := range 2 {
			b[g+2*h], b[g+2*h+1] = vec(), vec()
			VSHUFPS(Imm(0x44), a[g+h+2], a[g+h], b[g+2*h])
			VSHUFPS(Imm(0xEE), a[g+h+2], a[g+h], b[g+2*h+1])
		}
	}
	return b
}

// transpose16 transposes the 16×16 block whose row i is r[i] and returns its rows: three stages
// of in-lane unpacks, 64-bit shuffles and two 128-bit lane shuffles.
func transpose16(r []VecVirtual) []VecVirtual {
	// b[4g+q], lane L: rows 4g…4g+3 of column 4L+q.
	b := transpose4x4(r, ZMM)
	t := make([]VecVirtual, 16)
	for q := range 4 {
		e0, e1, f0, f1 := ZMM(), ZMM(), ZMM(), ZMM()
		VSHUFF32X4(Imm(0x44), b[4+q], b[q], e0)
		VSHUFF32X4(Imm(0xEE), b[4+q], b[q], e1)
		VSHUFF32X4(Imm(0x44), b[12+q], b[8+q], f0)
		VSHUFF32X4(Imm(0xEE), b[12+q], b[8+q], f1)
		for L, src := range [][2]VecVirtual{{e0, f0}, {e0, f0}, {e1, f1}, {e1, f1}} {
			imm := uint64(0x88)
			if L%2 == 1 {
				imm = 0xDD
			}
			t[4*L+q] = ZMM()
			VSHUFF32X4(Imm(imm), src[1], src[0], t[4*L+q])
		}
	}
	return t
}

// packT16 emits packT16(kc, b, ldb, dst, ds): dst[p·ds + j] = b[j·ldb + p] for j < 16, p < kc,
// the packing of 16 columns of op(B) = Bᵀ, in 16×16 blocks transposed in registers. The kc%16
// tail is loaded under a mask and only its rows are stored.
func packT16() { packT(true) }

// packT8 is packT16 on ymm for AVX2: 8 columns, 8×8 blocks.
func packT8() { packT(false) }

// packT emits packT16 (wide, zmm, tail mask in K1) or packT8 (ymm, tail mask by VMASKMOVPS).
func packT(wide bool) {
	w, shift, name, prefix := 8, uint64(3), "packT8", "packT8"
	if wide {
		w, shift, name, prefix = 16, 4, "packT16", "pack"
	}
	TEXT(name, NOSPLIT, "func(kc int, b []float32, ldb int, dst []float32, ds int)")
	Doc(fmt.Sprintf("dst[p·ds + j] = b[j·ldb + p] for j < %d, p < kc.", w))
	kc := GP64()
	Load(Param("kc"), kc)
	bp := Load(Param("b").Base(), GP64())
	ldb := Load(Param("ldb"), GP64())
	SHLQ(Imm(2), ldb)
	dp := Load(Param("dst").Base(), GP64())
	ds := Load(Param("ds"), GP64())
	SHLQ(Imm(2), ds)
	ptr := GP64()
	done := prefix + "done"
	// block moves one w×w block; with masked, the rows are cut to the first rem values of k
	// (mask: K1 on zmm, the VMASKMOVPS mask on ymm) and only rem rows are stored.
	block := func(masked bool, mask VecVirtual, rem Register) {
		r := make([]VecVirtual, w)
		MOVQ(bp, ptr)
		for j := range r {
			r[j] = vec(wide)
			switch {
			case masked && wide:
				VMOVUPS_Z(Mem{Base: ptr}, K1, r[j])
			case masked:
				VMASKMOVPS(Mem{Base: ptr}, mask, r[j])
			default:
				VMOVUPS(Mem{Base: ptr}, r[j])
			}
			if j < w-1 {
				ADDQ(ldb, ptr)
			}
		}
		var t []VecVirtual
		if wide {
			t = transpose16(r)
		} else {
			t = transpose8(r)
		}
		MOVQ(dp, ptr)
		for p, v := range t {
			if masked && p > 0 {
				CMPQ(rem, U32(p))
				JLE(LabelRef(done))
			}
			VMOVUPS(v, Mem{Base: ptr})
			if p < w-1 {
				ADDQ(ds, ptr)
			}
		}
	}
	full := GP64()
	MOVQ(kc, full)
	SHRQ(Imm(shift), full)
	JZ(LabelRef(prefix + "tail"))
	Label(prefix + "loop")
	block(false, nil, nil)
	ADDQ(Imm(uint64(4*w)), bp)
	MOVQ(ds, ptr)
	SHLQ(Imm(shift), ptr)
	ADDQ(ptr, dp)
	DECQ(full)
	JNZ(LabelRef(prefix + "loop"))
	Label(prefix + "tail")
	ANDQ(Imm(uint64(w-1)), kc)
	JZ(LabelRef(done))
	if wide {
		tailMask(kc)
		block(true, nil, kc)
	} else {
		rem := GP64()
		MOVQ(kc, rem)
		m := YMM()
		loadMask256(kc, m)
		block(true, m, rem)
	}
	Label(done)
	VZEROUPPER()
	RET()
}

var consts = map[float32]Mem{}

// bcast broadcasts the float32 constant v into a new zmm register.
func bcast(v float32) VecVirtual {
	m, ok := consts[v]
	if !ok {
		m = ConstData(fmt.Sprintf("f32_%08x", math.Float32bits(v)), U32(math.Float32bits(v)))
		consts[v] = m
	}
	r := ZMM()
	VBROADCASTSS(m, r)
	return r
}

// expConsts are the broadcast constants of expCore.
type expConsts struct {
	thr, hi, lo, log2e, ln2hi, ln2lo VecVirtual
	coef                             []VecVirtual
}

func newExpConsts() expConsts {
	return expConsts{
		thr: bcast(-87), hi: bcast(89), lo: bcast(-88),
		log2e: bcast(1.44269504088896341), ln2hi: bcast(0.693359375), ln2lo: bcast(-2.12194440e-4),
		coef: []VecVirtual{bcast(1.0 / 720), bcast(1.0 / 120), bcast(1.0 / 24), bcast(1.0 / 6), bcast(0.5), bcast(1)},
	}
}

// expCore returns e^v lane-wise (v is clobbered), as model's scalar expf: v = n·ln2 + r
// (n = round(v·log2 e), ln2 split in two for Cody–Waite), e^r by its degree-6 Taylor polynomial,
// scaled by 2^n with VSCALEFPS (which gives +Inf past the float32 range). v < −87 (−Inf included)
// gives 0, v is clamped to ≤ 89 first (+Inf → +Inf), NaN stays NaN. Uses K2.
func expCore(c expConsts, v VecVirtual) VecVirtual {
	// K2: v ≥ −87 or NaN (not-less-than, unordered).
	VCMPPS(Imm(5), c.thr, v, K2)
	VMAXPS(v, c.lo, v)
	VMINPS(v, c.hi, v)
	t := ZMM()
	VMULPS(c.log2e, v, t)
	VRNDSCALEPS(Imm(0), t, t)
	VFNMADD231PS(t, c.ln2hi, v)
	VFNMADD231PS(t, c.ln2lo, v)
	p := ZMM()
	VMOVAPS(c.coef[0], p)
	for _, k := range c.coef[1:] {
		VFMADD213PS(k, v, p)
	}
	VFMADD213PS(c.coef[len(c.coef)-1], v, p)
	VSCALEFPS(t, p, p)
	VMOVAPS_Z(p, K2, p)
	return p
}

// elementwise emits the loop of a lane-wise kernel over x (dst and x of the same length), 16
// lanes at a time and the tail under the mask K1: f maps the loaded vector to the stored one.
func elementwise(name string, dp, xp Register, n Register, f func(v VecVirtual, masked bool) VecVirtual) {
	Label(name + "loop")
	CMPQ(n, U32(16))
	JL(LabelRef(name + "tail"))
	v := ZMM()
	VMOVUPS(Mem{Base: xp}, v)
	VMOVUPS(f(v, false), Mem{Base: dp})
	ADDQ(U32(64), xp)
	ADDQ(U32(64), dp)
	SUBQ(U32(16), n)
	JMP(LabelRef(name + "loop"))
	Label(name + "tail")
	TESTQ(n, n)
	JZ(LabelRef(name + "done"))
	tailMask(n)
	u := ZMM()
	VMOVUPS_Z(Mem{Base: xp}, K1, u)
	VMOVUPS(f(u, true), K1, Mem{Base: dp})
	Label(name + "done")
}

// expShift emits expShift512(dst, x, shift) float32: dst[i] = e^(x[i]−shift) for i < len(x)
// (expCore), returning Σ dst[i].
func expShift() {
	TEXT("expShift512", NOSPLIT, "func(dst, x []float32, shift float32) float32")
	Doc("dst[i] = e^(x[i]−shift) for i < len(x); returns Σ dst[i].")
	dp := Load(Param("dst").Base(), GP64())
	xp := Load(Param("x").Base(), GP64())
	n := GP64()
	Load(Param("x").Len(), n)
	sh := ZMM()
	VBROADCASTSS(paramAddr("shift"), sh)
	c := newExpConsts()
	sum := ZMM()
	zero(true, sum)
	elementwise("exp", dp, xp, n, func(v VecVirtual, masked bool) VecVirtual {
		VSUBPS(sh, v, v)
		p := expCore(c, v)
		if masked {
			VADDPS(p, sum, K1, sum)
		} else {
			VADDPS(p, sum, sum)
		}
		return p
	})
	Store(hsum(true, sum), ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// sigmoid emits sigmoid512(dst, x): dst[i] = 1/(1 + e^(−x[i])) (expCore; the division is exact).
func sigmoid() {
	TEXT("sigmoid512", NOSPLIT, "func(dst, x []float32)")
	Doc("dst[i] = 1/(1 + e^(−x[i])) for i < len(x).")
	dp := Load(Param("dst").Base(), GP64())
	xp := Load(Param("x").Base(), GP64())
	n := GP64()
	Load(Param("x").Len(), n)
	c := newExpConsts()
	one := c.coef[len(c.coef)-1]
	negZero := bcast(float32(math.Copysign(0, -1)))
	elementwise("sig", dp, xp, n, func(v VecVirtual, masked bool) VecVirtual {
		VPXORD(negZero, v, v)
		p := expCore(c, v)
		VADDPS(one, p, p)
		VDIVPS(p, one, p)
		return p
	})
	VZEROUPPER()
	RET()
}

// maxVec emits max512(x) float32 = max_i x[i] (−Inf for an empty x; NaN handling unspecified).
func maxVec() {
	TEXT("max512", NOSPLIT, "func(x []float32) float32")
	Doc("max_i x[i], −Inf for an empty x.")
	xp := Load(Param("x").Base(), GP64())
	n := GP64()
	Load(Param("x").Len(), n)
	acc := []VecVirtual{bcast(float32(math.Inf(-1))), ZMM()}
	VMOVAPS(acc[0], acc[1])
	Label("maxloop")
	CMPQ(n, U32(32))
	JL(LabelRef("maxone"))
	VMAXPS(Mem{Base: xp}, acc[0], acc[0])
	VMAXPS(Mem{Base: xp, Disp: 64}, acc[1], acc[1])
	ADDQ(U32(128), xp)
	SUBQ(U32(32), n)
	JMP(LabelRef("maxloop"))
	Label("maxone")
	CMPQ(n, U32(16))
	JL(LabelRef("maxtail"))
	VMAXPS(Mem{Base: xp}, acc[0], acc[0])
	ADDQ(U32(64), xp)
	SUBQ(U32(16), n)
	Label("maxtail")
	TESTQ(n, n)
	JZ(LabelRef("maxred"))
	tailMask(n)
	// Merge-masked load: lanes past the end keep −Inf.
	t := ZMM()
	VMOVAPS(acc[1], t)
	VMOVUPS(Mem{Base: xp}, K1, t)
	VMAXPS(t, acc[0], acc[0])
	Label("maxred")
	VMAXPS(acc[1], acc[0], acc[0])
	Store(hmax(true, acc[0]), ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// packAT emits packAT512(kc, a, lda, w, dst): dst[p·w + i] = a[p·lda + i] for i < w ≤ 16, p < kc —
// a strip of w columns of transposed A made contiguous, each row moved under the mask of w lanes.
func packAT() {
	TEXT("packAT512", NOSPLIT, "func(kc int, a []float32, lda, w int, dst []float32)")
	Doc("dst[p·w + i] = a[p·lda + i] for i < w ≤ 16, p < kc.")
	kc := Load(Param("kc"), GP64())
	ap := Load(Param("a").Base(), GP64())
	lda := Load(Param("lda"), GP64())
	SHLQ(Imm(2), lda)
	w := GP64()
	Load(Param("w"), w)
	dp := Load(Param("dst").Base(), GP64())
	tailMask(w)
	SHLQ(Imm(2), w)
	v := ZMM()
	TESTQ(kc, kc)
	JZ(LabelRef("packATdone"))
	Label("packATloop")
	VMOVUPS_Z(Mem{Base: ap}, K1, v)
	VMOVUPS(v, K1, Mem{Base: dp})
	ADDQ(lda, ap)
	ADDQ(w, dp)
	DECQ(kc)
	JNZ(LabelRef("packATloop"))
	Label("packATdone")
	VZEROUPPER()
	RET()
}

// tailMask sets K1 to the low n bits (0 ≤ n ≤ 16) for a masked last vector.
func tailMask(n Register) {
	mask := GP32()
	MOVL(U32(1), mask)
	SHLXL(n.(GPVirtual).As32(), mask, mask)
	DECL(mask)
	KMOVW(mask, K1)
}

// dot emits dot{512,256}(x, y []float32) float32 = Σ x[i]·y[i], four accumulators over blocks of
// four vectors. The 512-bit one does the tail under a mask; the 256-bit one stops at the last
// whole vector (the caller adds the tail).
func dot(wide bool) {
	TEXT("dot"+suffix(wide), NOSPLIT, "func(x, y []float32) float32")
	w := 8
	if wide {
		w = 16
		Doc("Σ x[i]·y[i] for i < len(x).")
	} else {
		Doc("Σ x[i]·y[i] over whole vectors of x (the caller adds the tail).")
	}
	xp := Load(Param("x").Base(), GP64())
	yp := Load(Param("y").Base(), GP64())
	n := GP64()
	Load(Param("x").Len(), n)
	acc := []VecVirtual{vec(wide), vec(wide), vec(wide), vec(wide)}
	for _, a := range acc {
		zero(wide, a)
	}
	s := suffix(wide)
	Label("dot4_" + s)
	CMPQ(n, U32(4*w))
	JL(LabelRef("dot1_" + s))
	for j, a := range acc {
		t := vec(wide)
		VMOVUPS(Mem{Base: xp, Disp: 4 * w * j}, t)
		VFMADD231PS(Mem{Base: yp, Disp: 4 * w * j}, t, a)
	}
	ADDQ(U32(16*w), xp)
	ADDQ(U32(16*w), yp)
	SUBQ(U32(4*w), n)
	JMP(LabelRef("dot4_" + s))
	Label("dot1_" + s)
	CMPQ(n, U32(w))
	JL(LabelRef("dottail_" + s))
	t := vec(wide)
	VMOVUPS(Mem{Base: xp}, t)
	VFMADD231PS(Mem{Base: yp}, t, acc[1])
	ADDQ(U32(4*w), xp)
	ADDQ(U32(4*w), yp)
	SUBQ(U32(w), n)
	JMP(LabelRef("dot1_" + s))
	Label("dottail_" + s)
	if wide {
		TESTQ(n, n)
		JZ(LabelRef("dotsum_" + s))
		tailMask(n)
		u, v := vec(wide), vec(wide)
		VMOVUPS_Z(Mem{Base: xp}, K1, u)
		VMOVUPS_Z(Mem{Base: yp}, K1, v)
		VFMADD231PS(u, v, acc[2])
	}
	Label("dotsum_" + s)
	VADDPS(acc[1], acc[0], acc[0])
	VADDPS(acc[3], acc[2], acc[2])
	VADDPS(acc[2], acc[0], acc[0])
	r := hsum(wide, acc[0])
	Store(r, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// axpy emits axpy{512,256}(alpha, x, y): y[i] += alpha·x[i] (512: all i < len(x), the tail under
// a mask; 256: whole vectors only, the caller does the tail).
func axpy(wide bool) {
	TEXT("axpy"+suffix(wide), NOSPLIT, "func(alpha float32, x, y []float32)")
	w := 8
	if wide {
		w = 16
		Doc("y[i] += alpha·x[i] for i < len(x).")
	} else {
		Doc("y[i] += alpha·x[i] over whole vectors of x (the caller does the tail).")
	}
	al := vec(wide)
	VBROADCASTSS(paramAddr("alpha"), al)
	xp := Load(Param("x").Base(), GP64())
	yp := Load(Param("y").Base(), GP64())
	n := GP64()
	Load(Param("x").Len(), n)
	s := suffix(wide)
	Label("axpy4_" + s)
	CMPQ(n, U32(4*w))
	JL(LabelRef("axpy1_" + s))
	for j := range 4 {
		t := vec(wide)
		VMOVUPS(Mem{Base: yp, Disp: 4 * w * j}, t)
		VFMADD231PS(Mem{Base: xp, Disp: 4 * w * j}, al, t)
		VMOVUPS(t, Mem{Base: yp, Disp: 4 * w * j})
	}
	ADDQ(U32(16*w), xp)
	ADDQ(U32(16*w), yp)
	SUBQ(U32(4*w), n)
	JMP(LabelRef("axpy4_" + s))
	Label("axpy1_" + s)
	CMPQ(n, U32(w))
	JL(LabelRef("axpytail_" + s))
	t := vec(wide)
	VMOVUPS(Mem{Base: yp}, t)
	VFMADD231PS(Mem{Base: xp}, al, t)
	VMOVUPS(t, Mem{Base: yp})
	ADDQ(U32(4*w), xp)
	ADDQ(U32(4*w), yp)
	SUBQ(U32(w), n)
	JMP(LabelRef("axpy1_" + s))
	Label("axpytail_" + s)
	if wide {
		TESTQ(n, n)
		JZ(LabelRef("axpydone_" + s))
		tailMask(n)
		u, v := vec(wide), vec(wide)
		VMOVUPS_Z(Mem{Base: xp}, K1, u)
		VMOVUPS_Z(Mem{Base: yp}, K1, v)
		VFMADD231PS(u, al, v)
		VMOVUPS(v, K1, Mem{Base: yp})
	}
	Label("axpydone_" + s)
	VZEROUPPER()
	RET()
}

// scale emits scale{512,256}(alpha, x): x[i] *= alpha (512: all i, the tail under a mask; 256:
// whole vectors only, the caller does the tail).
func scale(wide bool) {
	TEXT("scale"+suffix(wide), NOSPLIT, "func(alpha float32, x []float32)")
	w := 8
	if wide {
		w = 16
		Doc("x[i] *= alpha for i < len(x).")
	} else {
		Doc("x[i] *= alpha over whole vectors of x (the caller does the tail).")
	}
	al := vec(wide)
	VBROADCASTSS(paramAddr("alpha"), al)
	xp := Load(Param("x").Base(), GP64())
	n := GP64()
	Load(Param("x").Len(), n)
	s := suffix(wide)
	Label("scale_" + s)
	CMPQ(n, U32(w))
	JL(LabelRef("scaletail_" + s))
	t := vec(wide)
	VMULPS(Mem{Base: xp}, al, t)
	VMOVUPS(t, Mem{Base: xp})
	ADDQ(U32(4*w), xp)
	SUBQ(U32(w), n)
	JMP(LabelRef("scale_" + s))
	Label("scaletail_" + s)
	if wide {
		TESTQ(n, n)
		JZ(LabelRef("scaledone_" + s))
		tailMask(n)
		u := vec(wide)
		VMOVUPS_Z(Mem{Base: xp}, K1, u)
		VMULPS(u, al, u)
		VMOVUPS(u, K1, Mem{Base: xp})
	}
	Label("scaledone_" + s)
	VZEROUPPER()
	RET()
}

// peak emits fmaPeak{512,256}(iters int): iters rounds of independent FMAs on 24 zmm (12 ymm)
// accumulators, enough to fill both FMA ports whatever their latency: 768 (192) flops a round.
func peak(wide bool) {
	TEXT("fmaPeak"+suffix(wide), NOSPLIT, "func(iters int)")
	Doc("iters rounds of independent FMAs (the machine's FMA peak).")
	n := Load(Param("iters"), GP64())
	cnt := 12
	if wide {
		cnt = 24
	}
	acc := make([]VecVirtual, cnt)
	for i := range acc {
		acc[i] = vec(wide)
		zero(wide, acc[i])
	}
	x, y := vec(wide), vec(wide)
	zero(wide, x)
	zero(wide, y)
	s := suffix(wide)
	TESTQ(n, n)
	JZ(LabelRef("peakdone_" + s))
	Label("peak_" + s)
	for _, a := range acc {
		VFMADD231PS(x, y, a)
	}
	DECQ(n)
	JNZ(LabelRef("peak_" + s))
	Label("peakdone_" + s)
	VZEROUPPER()
	RET()
}

// mem256 is the 32-byte read-only vector of eight copies of the 32-bit pattern bits, for the
// AVX2 kernels: ymm operands cannot broadcast a scalar from memory as zmm ones can, and the
// 16 ymm registers leave no room to hold every constant.
var mem256 = map[uint32]Mem{}

func const256(bits uint32) Mem {
	m, ok := mem256[bits]
	if !ok {
		m = GLOBL(fmt.Sprintf("x8_%08x", bits), RODATA|NOPTR)
		for i := range 8 {
			DATA(4*i, U32(bits))
		}
		mem256[bits] = m
	}
	return m
}

func f256(v float32) Mem { return const256(math.Float32bits(v)) }

// laneMask256 is sixteen int32 lanes, eight all-ones then eight zeros: the 32 bytes at byte offset
// 4·(8−w) are the VMASKMOVPS mask of the first w lanes (0 ≤ w ≤ 8).
var laneMask256 Mem

func maskTable256() Mem {
	if laneMask256.Symbol.Name == "" {
		laneMask256 = GLOBL("lanemask256", RODATA|NOPTR)
		for i := range 16 {
			v := uint32(0)
			if i < 8 {
				v = 0xffffffff
			}
			DATA(4*i, U32(v))
		}
	}
	return laneMask256
}

// loadMask256 sets m to the VMASKMOVPS mask of the first w lanes (w a register, 0 ≤ w ≤ 8; it is
// clobbered).
func loadMask256(w Register, m VecVirtual) {
	t := maskTable256()
	base := GP64()
	LEAQ(t, base)
	NEGQ(w)
	VMOVUPS(Mem{Base: base, Index: w, Scale: 4, Disp: 32}, m)
}

// expCore256 is expCore on ymm lanes with the same operations in the same order, so each lane
// equals the zmm kernel's bit for bit: VSCALEFPS, which AVX2 lacks, becomes two multiplications
// by powers of two built in the exponent field, 2^⌊n/2⌋ (exact) and then 2^⌈n/2⌉ (the one
// rounding, as VSCALEFPS's), each within the normal range for every n the clamp allows
// (−127 … 128). lo and hi are −88 and 89 in registers: VMAXPS and VMINPS return their second
// source for a NaN, which must be v.
func expCore256(lo, hi, v VecVirtual) VecVirtual {
	m := YMM()
	VCMPPS(Imm(5), f256(-87), v, m) // v ≥ −87 or NaN
	VMAXPS(v, lo, v)
	VMINPS(v, hi, v)
	t := YMM()
	VMULPS(f256(1.44269504088896341), v, t)
	VROUNDPS(Imm(0), t, t)
	VFNMADD231PS(f256(0.693359375), t, v)
	VFNMADD231PS(f256(-2.12194440e-4), t, v)
	p := YMM()
	VMOVUPS(f256(1.0/720), p)
	for _, k := range []float32{1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1} {
		VFMADD213PS(f256(k), v, p)
	}
	VFMADD213PS(f256(1), v, p)
	n1 := YMM()
	VCVTTPS2DQ(t, t)
	VPSRAD(Imm(1), t, n1)
	VPSUBD(n1, t, t)
	VPADDD(const256(127), n1, n1)
	VPSLLD(Imm(23), n1, n1)
	VPADDD(const256(127), t, t)
	VPSLLD(Imm(23), t, t)
	VMULPS(n1, p, p)
	VMULPS(t, p, p)
	VANDPS(m, p, p)
	return p
}

// elementwise256 emits the loop of a lane-wise kernel over the whole ymm vectors of x (dst as
// long): the caller runs the tail on a padded vector.
func elementwise256(name string, dp, xp, n Register, f func(v VecVirtual) VecVirtual) {
	SHRQ(Imm(3), n)
	JZ(LabelRef(name + "done"))
	Label(name + "loop")
	v := YMM()
	VMOVUPS(Mem{Base: xp}, v)
	VMOVUPS(f(v), Mem{Base: dp})
	ADDQ(U32(32), xp)
	ADDQ(U32(32), dp)
	DECQ(n)
	JNZ(LabelRef(name + "loop"))
	Label(name + "done")
}

// expShift256 emits expShift256(dst, x, shift) float32: dst[i] = e^(x[i]−shift) over the whole
// vectors of x (expCore256), returning their sum.
func expShift256() {
	TEXT("expShift256", NOSPLIT, "func(dst, x []float32, shift float32) float32")
	Doc("dst[i] = e^(x[i]−shift) over the whole vectors of x; returns their sum (the caller does the tail).")
	dp := Load(Param("dst").Base(), GP64())
	xp := Load(Param("x").Base(), GP64())
	n := GP64()
	Load(Param("x").Len(), n)
	sh := YMM()
	VBROADCASTSS(paramAddr("shift"), sh)
	lo, hi := YMM(), YMM()
	VMOVUPS(f256(-88), lo)
	VMOVUPS(f256(89), hi)
	sum := YMM()
	VXORPS(sum, sum, sum)
	elementwise256("exp256", dp, xp, n, func(v VecVirtual) VecVirtual {
		VSUBPS(sh, v, v)
		p := expCore256(lo, hi, v)
		VADDPS(p, sum, sum)
		return p
	})
	Store(hsum(false, sum), ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// sigmoid256 emits sigmoid256(dst, x): dst[i] = 1/(1 + e^(−x[i])) over the whole vectors of x.
func sigmoid256() {
	TEXT("sigmoid256", NOSPLIT, "func(dst, x []float32)")
	Doc("dst[i] = 1/(1 + e^(−x[i])) over the whole vectors of x (the caller does the tail).")
	dp := Load(Param("dst").Base(), GP64())
	xp := Load(Param("x").Base(), GP64())
	n := GP64()
	Load(Param("x").Len(), n)
	lo, hi, one := YMM(), YMM(), YMM()
	VMOVUPS(f256(-88), lo)
	VMOVUPS(f256(89), hi)
	VMOVUPS(f256(1), one)
	elementwise256("sig256", dp, xp, n, func(v VecVirtual) VecVirtual {
		VXORPS(f256(float32(math.Copysign(0, -1))), v, v)
		p := expCore256(lo, hi, v)
		VADDPS(one, p, p)
		VDIVPS(p, one, p)
		return p
	})
	VZEROUPPER()
	RET()
}

// max256 emits max256(x) float32 = max over the whole vectors of x (−Inf if none).
func max256() {
	TEXT("max256", NOSPLIT, "func(x []float32) float32")
	Doc("max over the whole vectors of x, −Inf if none (the caller does the tail).")
	xp := Load(Param("x").Base(), GP64())
	n := GP64()
	Load(Param("x").Len(), n)
	a0, a1 := YMM(), YMM()
	VMOVUPS(f256(float32(math.Inf(-1))), a0)
	VMOVAPS(a0, a1)
	Label("max256two")
	CMPQ(n, U32(16))
	JL(LabelRef("max256one"))
	VMAXPS(Mem{Base: xp}, a0, a0)
	VMAXPS(Mem{Base: xp, Disp: 32}, a1, a1)
	ADDQ(U32(64), xp)
	SUBQ(U32(16), n)
	JMP(LabelRef("max256two"))
	Label("max256one")
	CMPQ(n, U32(8))
	JL(LabelRef("max256red"))
	VMAXPS(Mem{Base: xp}, a0, a0)
	Label("max256red")
	VMAXPS(a1, a0, a0)
	Store(hmax(false, a0), ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// packAT256 emits packAT256(kc, a, lda, w, tail, dst): dst[p·w + i] = a[p·lda + i] for i < w ≤ 8,
// p < kc. Rows are loaded under the mask of w lanes; the first kc − tail rows are stored whole
// (each spills 8 − w lanes, which the rows after it overwrite), the last tail rows under the mask.
// The caller sets tail to min(kc, ⌈8/w⌉ − 1), so that nothing is written past dst[kc·w].
func packAT256() {
	TEXT("packAT256", NOSPLIT, "func(kc int, a []float32, lda, w, tail int, dst []float32)")
	Doc("dst[p·w + i] = a[p·lda + i] for i < w ≤ 8, p < kc; the last tail rows stored under a mask.")
	kc := Load(Param("kc"), GP64())
	ap := Load(Param("a").Base(), GP64())
	lda := Load(Param("lda"), GP64())
	SHLQ(Imm(2), lda)
	w := GP64()
	Load(Param("w"), w)
	tail := Load(Param("tail"), GP64())
	dp := Load(Param("dst").Base(), GP64())
	m := YMM()
	ws := GP64()
	MOVQ(w, ws)
	SHLQ(Imm(2), ws)
	loadMask256(w, m)
	v := YMM()
	SUBQ(tail, kc)
	JZ(LabelRef("packAT256tail"))
	Label("packAT256loop")
	VMASKMOVPS(Mem{Base: ap}, m, v)
	VMOVUPS(v, Mem{Base: dp})
	ADDQ(lda, ap)
	ADDQ(ws, dp)
	DECQ(kc)
	JNZ(LabelRef("packAT256loop"))
	Label("packAT256tail")
	TESTQ(tail, tail)
	JZ(LabelRef("packAT256done"))
	Label("packAT256masked")
	VMASKMOVPS(Mem{Base: ap}, m, v)
	VMASKMOVPS(v, m, Mem{Base: dp})
	ADDQ(lda, ap)
	ADDQ(ws, dp)
	DECQ(tail)
	JNZ(LabelRef("packAT256masked"))
	Label("packAT256done")
	VZEROUPPER()
	RET()
}

// packN256 emits packN256(kc, b, ldb, w, dst): dst[p·16 + j] = b[p·ldb + j] for j < w ≤ 16 and
// 0 for w ≤ j < 16, p < kc: a packed 16-column strip of op(B) = B (the AVX2 tile's width),
// each row moved as two vectors loaded under the masks of its first w lanes.
func packN256() {
	TEXT("packN256", NOSPLIT, "func(kc int, b []float32, ldb, w int, dst []float32)")
	Doc("dst[p·16 + j] = b[p·ldb + j] for j < w ≤ 16 (0 for w ≤ j < 16), p < kc.")
	kc := Load(Param("kc"), GP64())
	bp := Load(Param("b").Base(), GP64())
	ldb := Load(Param("ldb"), GP64())
	SHLQ(Imm(2), ldb)
	w := GP64()
	Load(Param("w"), w)
	dp := Load(Param("dst").Base(), GP64())
	w0, w1 := GP64(), GP64()
	MOVQ(U32(8), w0)
	CMPQ(w, w0)
	CMOVQLT(w, w0)
	MOVQ(w, w1)
	SUBQ(w0, w1)
	m0, m1 := YMM(), YMM()
	loadMask256(w0, m0)
	loadMask256(w1, m1)
	v0, v1 := YMM(), YMM()
	TESTQ(kc, kc)
	JZ(LabelRef("packN256done"))
	Label("packN256loop")
	VMASKMOVPS(Mem{Base: bp}, m0, v0)
	VMASKMOVPS(Mem{Base: bp, Disp: 32}, m1, v1)
	VMOVUPS(v0, Mem{Base: dp})
	VMOVUPS(v1, Mem{Base: dp, Disp: 32})
	ADDQ(ldb, bp)
	ADDQ(U32(64), dp)
	DECQ(kc)
	JNZ(LabelRef("packN256loop"))
	Label("packN256done")
	VZEROUPPER()
	RET()
}

// transpose8 transposes the 8×8 block of rows r (ymm) and returns its rows.
func transpose8(r []VecVirtual) []VecVirtual {
	// b[4g+q], 128-bit half h, lane L: rows 4g…4g+3 of column 4h+q, row 4g+L.
	b := transpose4x4(r, YMM)
	t := make([]VecVirtual, 8)
	for q := range 4 {
		t[q], t[4+q] = YMM(), YMM()
		VPERM2F128(Imm(0x20), b[4+q], b[q], t[q])
		VPERM2F128(Imm(0x31), b[4+q], b[q], t[4+q])
	}
	return t
}

// gemmTilePacked emits gemmPacked512m6n4U<u>: the 6×64 AVX-512 tile on packed operands with
// strides fixed at generation time (A: 6 floats a k, B: 64 floats a k), the k loop unrolled u
// times with every address a displacement, so the loop's only scalar work is two pointer
// increments and the count. Each element of C gets the same operations in the same order as in
// gemm512m6n4 (one FMA per k into its accumulator, then C = C + alpha·acc), so the two agree bit
// for bit. kc must be a multiple of u.
func gemmTilePacked(u int) {
	const mr, nv = 6, 4
	TEXT(fmt.Sprintf("gemmPacked512m6n4U%d", u), NOSPLIT, "func(kc int, a []float32, b []float32, c []float32, ldc int, alpha float32, zc bool)")
	Doc(fmt.Sprintf("C[0:6, 0:64] += alpha · A · B on packed operands, kc a multiple of %d.", u))
	kc := Load(Param("kc"), GP64())
	ap := Load(Param("a").Base(), GP64())
	bp := Load(Param("b").Base(), GP64())
	acc := make([][]VecVirtual, mr)
	for i := range acc {
		acc[i] = make([]VecVirtual, nv)
		for j := range acc[i] {
			acc[i][j] = ZMM()
			VPXORD(acc[i][j], acc[i][j], acc[i][j])
		}
	}
	bv := make([]VecVirtual, nv)
	for j := range bv {
		bv[j] = ZMM()
	}
	bc := ZMM()
	cp := Load(Param("c").Base(), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(Imm(2), ldc)
	pc := GP64()
	MOVQ(cp, pc)
	for i := range mr {
		for j := 0; j < nv*64; j += 64 {
			PREFETCHT0(Mem{Base: pc, Disp: j})
		}
		if i < mr-1 {
			ADDQ(ldc, pc)
		}
	}
	loop := fmt.Sprintf("ploop_%d", u)
	done := fmt.Sprintf("pdone_%d", u)
	SHRQ(Imm(uint64(map[int]int{1: 0, 2: 1, 4: 2, 8: 3}[u])), kc)
	JZ(LabelRef(done))
	Label(loop)
	for q := range u {
		for j := range bv {
			VMOVUPS(Mem{Base: bp, Disp: 4 * (64*q + 16*j)}, bv[j])
		}
		for i := range mr {
			VBROADCASTSS(Mem{Base: ap, Disp: 4 * (6*q + i)}, bc)
			for j := range nv {
				VFMADD231PS(bv[j], bc, acc[i][j])
			}
		}
	}
	ADDQ(U32(4*6*u), ap)
	ADDQ(U32(4*64*u), bp)
	DECQ(kc)
	JNZ(LabelRef(loop))
	Label(done)
	VBROADCASTSS(paramAddr("alpha"), bc)
	t := bv[0]
	zc := GP32()
	MOVBLZX(paramAddr("zc"), zc)
	zeroStore := fmt.Sprintf("pzc_%d", u)
	ret := fmt.Sprintf("pret_%d", u)
	TESTL(zc, zc)
	JNZ(LabelRef(zeroStore))
	storeTile(true, false, acc, bc, t, cp, ldc, false)
	JMP(LabelRef(ret))
	Label(zeroStore)
	storeTile(true, false, acc, bc, t, cp, ldc, true)
	Label(ret)
	VZEROUPPER()
	RET()
}

// u32consts are the 4-byte integer constants VPBROADCASTD reads.
var u32consts = map[uint32]Mem{}

// bcastU32 broadcasts the 32-bit constant bits to a zmm.
func bcastU32(bits uint32) VecVirtual {
	m, ok := u32consts[bits]
	if !ok {
		m = ConstData(fmt.Sprintf("u32_%08x", bits), U32(bits))
		u32consts[bits] = m
	}
	r := ZMM()
	VPBROADCASTD(m, r)
	return r
}

// bf16Consts are the constants of rneBF16.
type bf16Consts struct{ one, bias, abs, inf, qbit VecVirtual }

func newBF16Consts() bf16Consts {
	return bf16Consts{one: bcastU32(1), bias: bcastU32(0x7fff), abs: bcastU32(0x7fffffff), inf: bcastU32(0x7f800000), qbit: bcastU32(0x00400000)}
}

// rneBF16 returns, in each 32-bit lane of v (float32 bits u), the bits
// whose upper half is kernel.BF16(u): u + 0x7fff + ((u >> 16) & 1) (round
// to nearest, ties to even), or u | 0x00400000 for a NaN (kept quiet).
func rneBF16(c bf16Consts, v VecVirtual) VecVirtual {
	t := ZMM()
	VPSRLD(U8(16), v, t)
	VPANDD(c.one, t, t)
	r := ZMM()
	VPADDD(c.bias, v, r)
	VPADDD(t, r, r)
	a := ZMM()
	VPANDD(c.abs, v, a)
	VPCMPUD(U8(6), c.inf, a, K2) // |u| > +Inf: NaN
	VPORD(c.qbit, v, K2, r)
	return r
}

// bf16Pairs2 emits bf16Pairs2(dst []uint32, lo, hi []float32): dst[j] =
// BF16(lo[j]) | BF16(hi[j])<<16 for the whole vectors of 16 in lo (the
// caller does the tail); hi and dst at least as long as lo.
func bf16Pairs2() {
	TEXT("bf16Pairs2", NOSPLIT, "func(dst []uint32, lo, hi []float32)")
	Doc("dst[j] = BF16(lo[j]) | BF16(hi[j])<<16 over the whole vectors of 16 in lo (the caller does the tail).")
	dp := Load(Param("dst").Base(), GP64())
	lp := Load(Param("lo").Base(), GP64())
	hp := Load(Param("hi").Base(), GP64())
	n := Load(Param("lo").Len(), GP64())
	c := newBF16Consts()
	himask := bcastU32(0xffff0000)
	Label("pairs2")
	CMPQ(n, U32(16))
	JL(LabelRef("pairs2done"))
	a, b := ZMM(), ZMM()
	VMOVDQU32(Mem{Base: lp}, a)
	VMOVDQU32(Mem{Base: hp}, b)
	ra, rb := rneBF16(c, a), rneBF16(c, b)
	VPSRLD(U8(16), ra, ra)
	VPANDD(himask, rb, rb)
	VPORD(rb, ra, ra)
	VMOVDQU32(ra, Mem{Base: dp})
	ADDQ(U32(64), lp)
	ADDQ(U32(64), hp)
	ADDQ(U32(64), dp)
	SUBQ(U32(16), n)
	JMP(LabelRef("pairs2"))
	Label("pairs2done")
	VZEROUPPER()
	RET()
}

// bf16PairsAdj emits bf16PairsAdj(dst []uint32, x []float32): dst[q] =
// BF16(x[2q]) | BF16(x[2q+1])<<16 for the whole blocks of 8 pairs in dst
// (the caller does the tail); x at least twice as long as dst. Each qword
// of rounded lanes [r₀, r₁] becomes r₀>>16 | (r₁>>16)<<16: shift both
// dwords right by 16, OR the qword with itself shifted right by 16, keep
// its low dword (VPMOVQD).
func bf16PairsAdj() {
	TEXT("bf16PairsAdj", NOSPLIT, "func(dst []uint32, x []float32)")
	Doc("dst[q] = BF16(x[2q]) | BF16(x[2q+1])<<16 over the whole blocks of 8 pairs in dst (the caller does the tail).")
	dp := Load(Param("dst").Base(), GP64())
	xp := Load(Param("x").Base(), GP64())
	n := Load(Param("dst").Len(), GP64())
	c := newBF16Consts()
	Label("pairsadj")
	CMPQ(n, U32(8))
	JL(LabelRef("pairsadjdone"))
	v := ZMM()
	VMOVDQU32(Mem{Base: xp}, v)
	r := rneBF16(c, v)
	VPSRLD(U8(16), r, r)
	t := ZMM()
	VPSRLQ(U8(16), r, t)
	VPORQ(t, r, r)
	VPMOVQD(r, Mem{Base: dp})
	ADDQ(U32(64), xp)
	ADDQ(U32(32), dp)
	SUBQ(U32(8), n)
	JMP(LabelRef("pairsadj"))
	Label("pairsadjdone")
	VZEROUPPER()
	RET()
}

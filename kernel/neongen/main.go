// Command neongen writes kernel_arm64.s: the NEON (AdvSIMD) kernels of package kernel for arm64.
// Go's arm64 assembler lacks most vector floating-point instructions (FADD, FMUL, FDIV, FRINTN,
// …), so those are emitted as WORD with their A64 encodings (Arm ARM, "Advanced SIMD three
// same" / "two-register miscellaneous" / "shift by immediate" classes); the comment on each
// line gives the instruction. Run by go generate in package kernel.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

var out strings.Builder

func p(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }

// word emits a raw instruction with its disassembly as a comment.
func word(enc uint32, asm string) { p("\tWORD $0x%08x // %s", enc, asm) }

func three(base uint32, op string, d, n, m int) {
	word(base|uint32(m)<<16|uint32(n)<<5|uint32(d), fmt.Sprintf("%s V%d.4S, V%d.4S, V%d.4S", op, d, n, m))
}
func two(base uint32, op string, d, n int) {
	word(base|uint32(n)<<5|uint32(d), fmt.Sprintf("%s V%d.4S, V%d.4S", op, d, n))
}
func fadd(d, n, m int)  { three(0x4E20D400, "FADD", d, n, m) }
func fsub(d, n, m int)  { three(0x4EA0D400, "FSUB", d, n, m) }
func fmul(d, n, m int)  { three(0x6E20DC00, "FMUL", d, n, m) }
func fdiv(d, n, m int)  { three(0x6E20FC00, "FDIV", d, n, m) }
func fmax(d, n, m int)  { three(0x4E20F400, "FMAX", d, n, m) }
func fmin(d, n, m int)  { three(0x4EA0F400, "FMIN", d, n, m) }
func fcmgt(d, n, m int) { three(0x6EA0E400, "FCMGT", d, n, m) } // d = n > m
func faddp(d, n, m int) { three(0x6E20D400, "FADDP", d, n, m) }
func addi(d, n, m int)  { three(0x4EA08400, "ADD", d, n, m) }
func subi(d, n, m int)  { three(0x6EA08400, "SUB", d, n, m) }
func frintn(d, n int)   { two(0x4E218800, "FRINTN", d, n) }
func fcvtzs(d, n int)   { two(0x4EA1B800, "FCVTZS", d, n) }
func fneg(d, n int)     { two(0x6EA0F800, "FNEG", d, n) }
func shl(d, n, sh int) {
	word(0x4F005400|uint32(32+sh)<<16|uint32(n)<<5|uint32(d), fmt.Sprintf("SHL V%d.4S, V%d.4S, #%d", d, n, sh))
}
func sshr(d, n, sh int) {
	word(0x4F000400|uint32(64-sh)<<16|uint32(n)<<5|uint32(d), fmt.Sprintf("SSHR V%d.4S, V%d.4S, #%d", d, n, sh))
}

// dup broadcasts the 32-bit constant bits into Vv.
func dup(v int, bits uint32) {
	p("\tMOVW $0x%08x, R9", bits)
	p("\tVDUP R9, V%d.S4", v)
}

const (
	mr = 6  // rows of a tile
	nv = 4  // vectors of 4 columns: nr = 16
	nr = 16 // columns of a tile
)

// tile writes neonTile<m>: C[0:m, 0:16] += alpha·Σ_p A(i,p)·B[p, 0:16], A(i,p) = a[i·ars + p·aps],
// B rows bs floats apart. Accumulator (i, v) is V(4i+v); B's row in V24–V27; A broadcast in
// V28/V29; alpha in V30. Every element gets one FMLA per p into its own lane, then
// C = C + alpha·acc fused: the same operations whatever m, the tile's place, or the batch.
func tile(m int) {
	p("")
	p("// func neonTile%d(kc int, a []float32, ars, aps int, b []float32, bs int, c []float32, ldc int, alpha float32)", m)
	p("TEXT ·neonTile%d(SB), NOSPLIT, $0-116", m)
	p("\tMOVD kc+0(FP), R8")
	p("\tMOVD a_base+8(FP), R0")
	p("\tMOVD ars+32(FP), R10")
	p("\tLSL $2, R10")
	p("\tMOVD aps+40(FP), R11")
	p("\tLSL $2, R11")
	p("\tMOVD b_base+48(FP), R12")
	p("\tMOVD bs+72(FP), R13")
	p("\tLSL $2, R13")
	for i := 1; i < m; i++ {
		p("\tADD R10, R%d, R%d", i-1, i)
	}
	for i := range m * nv {
		p("\tVEOR V%d.B16, V%d.B16, V%d.B16", i, i, i)
	}
	p("\tCBZ R8, store%d", m)
	p("loop%d:", m)
	p("\tVLD1.P (R12)(R13), [V24.S4, V25.S4, V26.S4, V27.S4]")
	for i := range m {
		av := 28 + i%2
		p("\tVLD1R.P (R%d)(R11), [V%d.S4]", i, av)
		for v := range nv {
			p("\tVFMLA V%d.S4, V%d.S4, V%d.S4", 24+v, av, i*nv+v)
		}
	}
	p("\tSUBS $1, R8, R8")
	p("\tBNE loop%d", m)
	p("store%d:", m)
	p("\tFMOVS alpha+112(FP), F30")
	p("\tVDUP V30.S[0], V30.S4")
	p("\tMOVD c_base+80(FP), R14")
	p("\tMOVD ldc+104(FP), R15")
	p("\tLSL $2, R15")
	for i := range m {
		p("\tVLD1 (R14), [V24.S4, V25.S4, V26.S4, V27.S4]")
		for v := range nv {
			p("\tVFMLA V30.S4, V%d.S4, V%d.S4", i*nv+v, 24+v)
		}
		p("\tVST1 [V24.S4, V25.S4, V26.S4, V27.S4], (R14)")
		if i < m-1 {
			p("\tADD R15, R14, R14")
		}
	}
	p("\tRET")
}

// vecLoop opens a loop over R2 = n/4 vectors (n a multiple of 4, from x_len+off).
func dotFn() {
	p("")
	p("// func neonDot(x, y []float32) float32: Σ x[i]·y[i] for len(x) a multiple of 16.")
	p("TEXT ·neonDot(SB), NOSPLIT, $0-52")
	p("\tMOVD x_base+0(FP), R0")
	p("\tMOVD x_len+8(FP), R2")
	p("\tMOVD y_base+24(FP), R1")
	p("\tLSR $4, R2")
	for i := range 4 {
		p("\tVEOR V%d.B16, V%d.B16, V%d.B16", i, i, i)
	}
	p("\tCBZ R2, dotdone")
	p("dotloop:")
	p("\tVLD1.P 64(R0), [V4.S4, V5.S4, V6.S4, V7.S4]")
	p("\tVLD1.P 64(R1), [V16.S4, V17.S4, V18.S4, V19.S4]")
	for i := range 4 {
		p("\tVFMLA V%d.S4, V%d.S4, V%d.S4", 16+i, 4+i, i)
	}
	p("\tSUBS $1, R2, R2")
	p("\tBNE dotloop")
	p("dotdone:")
	fadd(0, 0, 1)
	fadd(2, 2, 3)
	fadd(0, 0, 2)
	faddp(0, 0, 0)
	faddp(0, 0, 0)
	p("\tFMOVS F0, ret+48(FP)")
	p("\tRET")
}

func axpyFn() {
	p("")
	p("// func neonAxpy(alpha float32, x, y []float32): y[i] += alpha·x[i] for len(x) a multiple of 4.")
	p("TEXT ·neonAxpy(SB), NOSPLIT, $0-56")
	p("\tFMOVS alpha+0(FP), F30")
	p("\tVDUP V30.S[0], V30.S4")
	p("\tMOVD x_base+8(FP), R0")
	p("\tMOVD x_len+16(FP), R2")
	p("\tMOVD y_base+32(FP), R1")
	p("\tLSR $2, R2")
	p("\tCBZ R2, axpydone")
	p("axpyloop:")
	p("\tVLD1.P 16(R0), [V0.S4]")
	p("\tVLD1 (R1), [V1.S4]")
	p("\tVFMLA V30.S4, V0.S4, V1.S4")
	p("\tVST1.P [V1.S4], 16(R1)")
	p("\tSUBS $1, R2, R2")
	p("\tBNE axpyloop")
	p("axpydone:")
	p("\tRET")
}

func scaleFn() {
	p("")
	p("// func neonScale(alpha float32, x []float32): x[i] *= alpha for len(x) a multiple of 4.")
	p("TEXT ·neonScale(SB), NOSPLIT, $0-32")
	p("\tFMOVS alpha+0(FP), F30")
	p("\tVDUP V30.S[0], V30.S4")
	p("\tMOVD x_base+8(FP), R0")
	p("\tMOVD x_len+16(FP), R2")
	p("\tLSR $2, R2")
	p("\tCBZ R2, scaledone")
	p("scaleloop:")
	p("\tVLD1 (R0), [V0.S4]")
	fmul(0, 0, 30)
	p("\tVST1.P [V0.S4], 16(R0)")
	p("\tSUBS $1, R2, R2")
	p("\tBNE scaleloop")
	p("scaledone:")
	p("\tRET")
}

// expConsts loads the constants of expVec.
func expConsts() {
	dup(16, 0xc2ae0000) // −87
	dup(17, 0xc2b00000) // −88
	dup(18, 0x42b20000) // 89
	dup(19, 0x3fb8aa3b) // log2 e
	dup(20, 0x3f318000) // ln2 hi = 0.693359375
	dup(21, 0xb95e8083) // ln2 lo = −2.12194440e−4
	dup(22, 0x3ab60b61) // 1/720
	dup(23, 0x3c088889) // 1/120
	dup(24, 0x3d2aaaab) // 1/24
	dup(25, 0x3e2aaaab) // 1/6
	dup(26, 0x3f000000) // 0.5
	dup(27, 127)        // exponent bias (integer)
	dup(2, 0x3f800000)  // 1
	p("\tVEOR V3.B16, V3.B16, V3.B16")
}

// expVec sets V8 = e^V4 lane by lane as package kernel's expf does: x = n·ln2 + r (Cody–Waite),
// e^r by its degree-6 Taylor polynomial, times 2^n applied as 2^(n>>1)·2^(n−n>>1) so that both
// factors stay normal; arguments below −87 give 0 (−Inf included), NaN stays NaN. Clobbers V5–V12.
func expVec() {
	fcmgt(5, 16, 4) // mask: −87 > x
	fmax(4, 4, 17)
	fmin(4, 4, 18)
	fmul(6, 4, 19)
	frintn(6, 6)
	p("\tVMOV V4.B16, V7.B16")
	p("\tVFMLS V20.S4, V6.S4, V7.S4") // r −= n·ln2hi
	p("\tVFMLS V21.S4, V6.S4, V7.S4") // r −= n·ln2lo
	p("\tVMOV V22.B16, V8.B16")
	for _, c := range []int{23, 24, 25, 26, 2, 2} {
		p("\tVMOV V%d.B16, V9.B16", c)
		p("\tVFMLA V8.S4, V7.S4, V9.S4")
		p("\tVMOV V9.B16, V8.B16")
	}
	fcvtzs(10, 6)
	sshr(11, 10, 1)
	subi(12, 10, 11)
	addi(11, 11, 27)
	addi(12, 12, 27)
	shl(11, 11, 23)
	shl(12, 12, 23)
	fmul(8, 8, 11)
	fmul(8, 8, 12)
	p("\tVBIT V5.B16, V3.B16, V8.B16") // 0 where x < −87
}

func expShiftFn() {
	p("")
	p("// func neonExpShift(dst, x []float32, shift float32) float32: dst[i] = e^(x[i]−shift), returns the sum; len(x) a multiple of 4.")
	p("TEXT ·neonExpShift(SB), NOSPLIT, $0-60")
	p("\tMOVD dst_base+0(FP), R1")
	p("\tMOVD x_base+24(FP), R0")
	p("\tMOVD x_len+32(FP), R2")
	p("\tFMOVS shift+48(FP), F0")
	p("\tVDUP V0.S[0], V0.S4")
	p("\tVEOR V1.B16, V1.B16, V1.B16")
	expConsts()
	p("\tLSR $2, R2")
	p("\tCBZ R2, expdone")
	p("exploop:")
	p("\tVLD1.P 16(R0), [V4.S4]")
	fsub(4, 4, 0)
	expVec()
	p("\tVST1.P [V8.S4], 16(R1)")
	fadd(1, 1, 8)
	p("\tSUBS $1, R2, R2")
	p("\tBNE exploop")
	p("expdone:")
	faddp(1, 1, 1)
	faddp(1, 1, 1)
	p("\tFMOVS F1, ret+56(FP)")
	p("\tRET")
}

func sigmoidFn() {
	p("")
	p("// func neonSigmoid(dst, x []float32): dst[i] = 1/(1 + e^(−x[i])); len(x) a multiple of 4.")
	p("TEXT ·neonSigmoid(SB), NOSPLIT, $0-48")
	p("\tMOVD dst_base+0(FP), R1")
	p("\tMOVD x_base+24(FP), R0")
	p("\tMOVD x_len+32(FP), R2")
	expConsts()
	p("\tLSR $2, R2")
	p("\tCBZ R2, sigdone")
	p("sigloop:")
	p("\tVLD1.P 16(R0), [V4.S4]")
	fneg(4, 4)
	expVec()
	fadd(8, 8, 2)
	fdiv(8, 2, 8)
	p("\tVST1.P [V8.S4], 16(R1)")
	p("\tSUBS $1, R2, R2")
	p("\tBNE sigloop")
	p("sigdone:")
	p("\tRET")
}

func peakFn() {
	p("")
	p("// func neonPeak(iters int): iters rounds of 24 independent FMLAs (the FMA peak).")
	p("TEXT ·neonPeak(SB), NOSPLIT, $0-8")
	p("\tMOVD iters+0(FP), R0")
	for i := range 24 {
		p("\tVEOR V%d.B16, V%d.B16, V%d.B16", i, i, i)
	}
	p("\tCBZ R0, peakdone")
	p("peakloop:")
	for i := range 24 {
		p("\tVFMLA V30.S4, V31.S4, V%d.S4", i)
	}
	p("\tSUBS $1, R0, R0")
	p("\tBNE peakloop")
	p("peakdone:")
	p("\tRET")
}

func main() {
	dst := flag.String("out", "kernel_arm64.s", "output file")
	flag.Parse()
	p("// Code generated by command: go run ./neongen -out kernel_arm64.s. DO NOT EDIT.")
	p("")
	p("#include \"textflag.h\"")
	for m := 1; m <= mr; m++ {
		tile(m)
	}
	dotFn()
	axpyFn()
	scaleFn()
	expShiftFn()
	sigmoidFn()
	peakFn()
	if err := os.WriteFile(*dst, []byte(out.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

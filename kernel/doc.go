// Package kernel holds the numeric kernels of the built-in engine: single-precision matrix
// multiplication (Gemm, C = alpha·op(A)·op(B) + beta·C, row-major, as gonum's blas32.Gemm) and
// the vector kernels of the model's hot path (Dot, Axpy, Scale, ExpShift for softmax rows,
// Sigmoid for SwiGLU, Max).
//
// # How a product runs
//
// Gemm scales C by beta, then adds alpha·op(A)·op(B) block by block. For each kc×nc panel of op(B)
// (kc = 256, nc = 2048) the panel is packed into contiguous nr-wide strips, zero-padded (Bᵀ is
// transposed in registers, 16×16 on AVX-512 and 8×8 on AVX2; B's rows are moved under lane masks
// on AVX2); op(A) is read in place through a row and a column stride, so either layout costs
// nothing (transposed A is first copied to mr-wide strips, in assembly on both amd64 paths). With
// beta = 0 the tiles of the first kc block take C as zero instead of reading it (one FMA onto a
// zeroed register, the value the cleared C would give, bit for bit), so C is never cleared first. A register-blocked micro-kernel accumulates one mr×nr
// tile of C over kc (AVX-512: 6×64, 24 zmm accumulators, B rows loaded once per k and A broadcast;
// AVX2+FMA: 6×16 on ymm; portable Go: 1×8 in scalar registers, see Measured performance) and adds
// alpha times it to C; column edges use masked loads and stores, row edges have kernels for every
// mr. With few rows (m ≤ 12) and B not transposed, B is read in
// place instead of packed (a column edge reads the rest of its 8- or 16-column unit, so only where
// that stays inside B's slice: the decoder's key cache leaves the room). A·Bᵀ with few rows (m ≤ 8, or m ≤ 40 once k ≥ 128) skips packing
// altogether: a dot-product kernel computes 4×4 tiles of C as 16 dot products along k and reduces
// them in registers (AVX2 and portable Go: m ≤ 4; portable Go's tiles sum every element as its
// micro-kernel does).
//
// Products of at least 2²⁰ flops (about 6 µs of one core; a product of fewer than 8 rows counts
// as 8, since reading B from memory then bounds it and a second core brings its own bandwidth)
// run on up to runtime.GOMAXPROCS(0) shares, each owning whole tiles of C (columns, or rows when
// that balances better): no reduction is split, so the result does not depend on the thread
// count. GemmSerial stays on the caller's goroutine, for callers that already run products in
// parallel. Packing buffers come from a sync.Pool.
//
// The shares run through Parallel: the first on the caller's goroutine, the others on helper
// goroutines (at most GOMAXPROCS−1) that, having finished a share, wait for the next one spinning
// for 100 µs (yielding to any other runnable goroutine every 64 polls) before they sleep; the
// caller waits for them the same way. Package model's parallel passes (attention, norms, SwiGLU,
// the decoder's groups of sequences) use it too. A new goroutine a share, as before, reached the
// idle core only once the scheduler had woken a thread for it: two shares of 20 µs took 40.0 µs,
// the time of one core doing both, against 24.1 µs on the helpers (BenchmarkParallel, AMD EPYC
// Zen 4, 2 threads). One-sequence decoding of SmolLM2-135M's shapes, 121 split products a token,
// went from 1.49–1.68 to 1.97 busy cores and 3–11% faster in three interleaved pairs
// (BenchmarkDecode1SmolLM2Shapes), to 0.94× llama.cpp (docs/results.md §10). Unlike llama.cpp's
// barriers, which spin without bound and stall when a thread is descheduled on a busy machine,
// a wait here spins at most 100 µs and then sleeps.
//
// # Batch-invariant products
//
// The dot-product kernel and the micro-kernel sum an element of C in different orders (16-lane
// partial sums reduced by a tree, against one FMA chain per element and kc block; not on the
// portable path, whose two sum alike), and Gemm picks between them by m: a row of A·Bᵀ can change
// in its last bits with the number of rows multiplied alongside it. The decoder of package model
// must not let that happen (a sequence's log-probabilities would depend on which others share its
// batch), so the package also has products whose every element of C is a fixed function of its row
// of op(A), its column of op(B), k, alpha, beta and its old value, whatever m and n: GemmRows and
// GemmRowsSerial always take the micro-kernel (packing B for A·Bᵀ with few rows, where Gemm would
// not), and GemmPacked multiplies by an op(B) packed once by PackB, the decoder's weights. The
// micro-kernel gives an element the same operations in every tile: one FMA per k into its own
// accumulator, then C = C + alpha·acc fused (portable Go: a multiply and an add each, fused only
// where Go fuses them), kc blocks in order; a column edge is masked (AVX-512) or run on a scratch
// copy of C (AVX2, portable Go), never a different sum. Gemm, GemmRows and GemmPacked agree bit for
// bit wherever Gemm takes the micro-kernel. With B packed beforehand, few-row products are faster
// than Gemm's (BenchmarkGemmRows against BenchmarkGemm, avx512, 1 thread, measured together: x·Wᵀ
// with W 1024×256 at m = 1, 4, 32: 44, 163, 180 GFLOP/cpu-s, against 28, 105, 125).
//
// The AVX2 path has the AVX-512 path's vector kernels on ymm: ExpShift and Sigmoid compute every
// lane by the same operations as on zmm (VSCALEFPS, which AVX2 lacks, becomes two multiplications
// by powers of two built in the exponent field, 2^⌊n/2⌋ exactly and then 2^⌈n/2⌉ with the one
// rounding), so a lane's value is the same bit for bit on both paths (TestAVX2ExpEqualsAVX512);
// tails run on a padded vector, as on NEON. Before they existed, the AVX2 path ran the portable
// loops, which took a quarter of the demo's CPU time there (profile of `demo --cpuprofile`).
//
// The code path is chosen once at start-up from the CPU (golang.org/x/sys/cpu, which checks that
// the OS saves the vector state): on amd64 "avx512" (AVX-512 F and VL), else "avx2" (AVX2 and
// FMA), else "go"; on arm64 "neon" (AdvSIMD, part of every ARMv8-A CPU: Apple Silicon,
// Graviton, Ampere); elsewhere "go" (portable Go). Path names it; EnvPath forces one. The amd64
// assembly is generated with avo by the program in asm/ (go generate; its own module), the arm64
// assembly by neongen/ (Go's arm64 assembler lacks most vector floating-point instructions, which
// neongen emits as WORD with their A64 encodings); both are committed, so a plain go build needs
// neither avo nor cgo.
//
// # bfloat16 products
//
// GemmBF16 is Gemm with every element of op(A) and op(B) rounded to bfloat16 (BF16: nearest, ties
// to even) and the products summed in float32, as a bf16 training path with float32 master
// weights needs (torch's bf16 autocast rounds a matmul's inputs the same way). On a CPU with
// AVX512_BF16 (AMD Zen 4, Intel Cooper Lake and Sapphire Rapids on) its micro-kernel is a 6×64
// tile of VDPBF16PS, which multiplies two bfloat16 pairs per float32 lane: twice the products of
// an FMA per instruction. Neither Go's assembler nor avo has the instruction, so kernel/bf16gen
// writes kernel_bf16_amd64.s with VDPBF16PS as EVEX bytes (tested against GNU as on 1,024 register
// triples). op(A) and op(B) are packed as bfloat16 pairs (the pair of k = 2q and 2q+1 in one
// 32-bit lane, 256 pairs a block), rounded 16 lanes at a time in AVX-512 (bf16Pairs2 for two rows,
// bf16PairsAdj for adjacent elements, generated by kernel/asm) and then written into strips six
// rows at a time; with m ≥ n each worker converts its rows of A 120 at a time into a block that
// stays in cache while every strip of B passes over it (runBF16's doc), else A is converted once,
// split over the workers. The tile adds alpha·sum into C in place, edge columns under masks. PackBBF16 packs a weight once
// for GemmPacked (the decoder). The result is defined element by element (GemmBF16's doc): the
// order is the Intel SDM's pseudo-code (within a pair the odd element first), and near 2⁻¹²⁶ the
// portable kernel does what Zen 4 measurably does (products exact, each sum rounded once, a sum
// below 2⁻¹²⁶ flushed to +0, subnormal inputs read as 0), so on AMD every path gives the same
// bits. Paths without AVX512_BF16 run that portable kernel (slowly). On AMD EPYC (Zen 4), one
// core, beside a training run: the tile alone 224 GFLOP/s against the float32 6×64 FMA tile's 110
// in the same run (2.0×). Quiet, 2 threads: whole products 1.3–1.7× Gemm's at the nano and
// SmolLM2-135M training shapes (BenchmarkGemmBF16), the rest going to converting the operands.
//
// # arm64 (NEON)
//
// The neon path has a 6×16 micro-kernel (24 four-lane accumulators in V0–V23, a row of the packed
// B strip in V24–V27, A broadcast by LD1R), one FMLA per k and element, then C = C + alpha·acc
// fused; row edges have a kernel for every mr, column edges run the whole tile on a scratch copy
// of C, so the batch-invariance contract above holds on arm64 too. Dot, Axpy, Scale, ExpShift and
// Sigmoid run on four-lane vectors; a tail shorter than a vector runs on a padded vector, so an
// element's value never depends on its place in the slice (TestVectorPositionInvariant: the model
// splits these calls at boundaries that move with the batch). Max and the dot-product tiles use
// the portable code.
//
// Its correctness is tested on amd64 machines by running the arm64 test binaries under user-mode
// emulation, as .ci/run does:
//
//	GOARCH=arm64 go test -c -o /tmp/kernel.test ./kernel
//	COMPACTRL_EXEC_WRAPPER=qemu-aarch64-static qemu-aarch64-static /tmp/kernel.test -test.short
//
// (and the same for ./model, run from its directory). Its speed is unmeasured here: emulation says
// nothing about it. On an arm64 machine, `compactrl bench model` prints the kernel path, the
// measured FMA peak and GEMM against it (the neon peak loop runs 24 independent FMLAs: 16 flops
// each a cycle per FMA pipe), and `go test -run X -bench 'Gemm$|Peak|MicroKernel' ./kernel`
// prints the table below for neon beside go (COMPACTRL_KERNEL=go forces the portable path
// everywhere else).
//
// # Measured performance
//
// Latest (Intel Xeon, Sapphire Rapids class, 2 vCPUs, `compactrl bench model --threads 2 --paths
// all`, quiet machine): GEMM on the model's training shapes at 48–67% of the measured FMA peak on
// avx512, 73–84% on avx2, 74–84% on go; the AVX-512 6×64 tile on cached operands at 76–81% of the
// one-thread peak (83–85% unrolled on packed operands, gemmPacked512m6n4U2), the AVX2 6×16 tile at
// 91–100%. The tables below are earlier measurements on the machines they name.
//
// Intel Xeon (Sapphire Rapids class, AVX-512), 2 vCPUs, Go 1.26, float32, BenchmarkGemm and
// BenchmarkPeak. Other jobs shared the two cores throughout, so the figures are GFLOP per CPU-second
// of the benchmark process (its user+system time, which other load does not inflate), medians of
// 3 runs (1 for avx2 and go). The FMA peak (MeasurePeakGFLOPS, best window) was 231–239 GFLOP/s
// on 1 thread and 450–476 on 2 when the other core was free.
//
//	shape m×n×k (op)              avx512  %peak  avx2   go    gonum  avx512/gonum
//	64³                            124     54     80    5.6   10.3    12×
//	256³                           143     62     93    5.9    9.5    15×
//	1024³                          155     67    102    6.0    9.4    16×
//	4096×256×256                   153     66    102    6.1    9.4    16×
//	4096×256×256 (x·Wᵀ)            149     65    106    6.1   14.3    10×
//	2048×688×256 (x·Wᵀ)            145     63    108    6.0   14.9    10×
//	688×256×2048 (dW = dyᵀ·x)      132     57     89    6.2    9.3    14×
//	2048×256×688 (dx = dy·W)       153     66    109    6.3    9.9    15×
//	64×512×64 (Q·Kᵀ, one head)     133     58     53    5.7   17.1     8×
//	64×64×512 (P·V, one head)      134     58     92    5.9   10.0    13×
//	32×1024×256                     83     36     53    5.5   10.3     8×
//	32×1024×256 (x·Wᵀ, decode)     102     44     33    5.7   16.2     6×
//	64×1024×256 (x·Wᵀ)             112     48     53    6.1   15.8     7×
//	4×1024×256 (x·Wᵀ)              120     52     24    6.7   13.2     9×
//	1×1024×256                      56     24     31    2.0    6.6     8×
//	1×1024×256 (x·Wᵀ)               50     22     24    6.5   10.4     5×
//
// (1 thread; %peak against 231 GFLOP/s; go is the portable path's former 4×4 kernel.) The three
// amd64 paths again side by side in one run (2026-12-03, AMD EPYC, Zen 5 class, AVX-512, 2 vCPUs;
// BenchmarkGemm, threads=1, GFLOP/cpu-s, medians of 3 runs, each path forced by the benchmark;
// four other agents were compiling and testing on the same two vCPUs, load average 3.6–4.3).
// "before → after" compares the portable path's former kernels (4×4 tile, dot products of four
// chains) with the new ones in runs of two test binaries interleaved three times (load average
// 4.6–5.0), medians:
//
//	shape m×n×k (op)              avx512  avx2   go    go before → after
//	64³                            145     80    9.0     5.5 →  8.9   1.6×
//	256³                           176     98    9.5     6.1 →  9.8   1.6×
//	1024³                          173    101    9.9     6.1 →  9.7   1.6×
//	4096×256×256                   177    101    9.8     6.1 → 10.0   1.6×
//	4096×256×256 (x·Wᵀ)            182     99    9.7     6.0 → 10.1   1.7×
//	2048×688×256 (x·Wᵀ)            169     94    9.7     6.1 →  9.9   1.6×
//	688×256×2048 (dW = dyᵀ·x)      174     85    9.4     5.9 →  8.9   1.5×
//	2048×256×688 (dx = dy·W)       199     94    9.8     6.1 →  9.8   1.6×
//	64×512×64 (Q·Kᵀ, one head)     171     49    8.7     5.5 →  8.6   1.6×
//	64×64×512 (P·V, one head)      171     84    9.7     5.6 →  9.5   1.7×
//	32×1024×256                    127     64    9.2     5.6 →  9.1   1.6×
//	32×1024×256 (x·Wᵀ, decode)     164     33    8.3     5.5 →  8.3   1.5×
//	64×1024×256 (x·Wᵀ)             174     51    9.1     5.7 →  8.8   1.5×
//	4×1024×256 (x·Wᵀ)              139     29    7.9     6.0 →  7.6   1.3×
//	1×1024×256                      28     12    6.5     2.2 →  5.8   2.6×
//	1×1024×256 (x·Wᵀ)               39     25    7.6     6.1 →  7.1   1.2×
//	arm64 (neon): correctness only, tested under qemu-aarch64-static; speed unmeasured here
//
// The portable path is 1.5–1.7× faster on the model's training, attention and batched-decode shapes
// (1.2–1.3× for x·Wᵀ with 1 and 4 rows, 2.6× for the other matrix-vector product), not the 3× once
// asked for, and 3× is out of reach of scalar code on this CPU: BenchmarkScalarPeak (GOMAXPROCS=1,
// medians of 3) measures 13.5 GFLOP/cpu-s for nine independent float32 chains acc = acc + a·b (two
// multiplies and two adds a cycle; Go does not fuse them on amd64 below GOAMD64=v3) and 5.2 for the
// same with math.FMA in float64 (a run-time CPU check on every call at the default GOAMD64=v1; 12.7
// with GOAMD64=v3, still no faster than multiply and add), while 3× the former 5.5–6.1 is 16–18.
// Portable Go has no SIMD. The 1×8 kernel alone, on cached operands (BenchmarkMicroKernel), runs at
// 9.5–10 GFLOP/cpu-s (70–75% of that ceiling; the 4×4 kernel 5.8–6.0), bound by its instruction
// count (32 instructions, 10 of them loads, for 16 flops); the products keep 8.3–10, the rest going
// to packing B and to a call per row and strip. The former tile lost to the compiler, not to the
// machine: Go's scheduler places first every value that has a use in its own block, so a loop body
// computed all its products before the first add, which needs a register per product on top of the
// accumulators, and amd64 has 15 for floats; every tile tried before (4×4 and 3×4 on row slices,
// 2×4, 2×6 and 1×8 with B from memory, 4×2 on packed A, 2×4 in float64 with math.FMA: 3.3–6.4
// GFLOP/cpu-s) spilled. rowGo's loop is one block (test at the bottom, loads through unsafe
// pointers bounded by checks before it), where the sums feed φ-functions of the same block and the
// scheduler keeps the source order, and it subtracts the negated product, the same float32 value
// bit for bit but an operation that cannot be commuted, so each sum stays in its register (go build
// -gcflags=-S: no stack access in the loop). Its values equal the 4×4 kernel's bit for bit (the
// same operations per element in the same order). Gemm's A·Bᵀ with m ≤ 4 runs dotTGo (a row of A
// against four rows of B in place, rowGo's loop form, 6 loads for 8 flops) instead of four-chain
// dot products, bound by two loads per multiply-add; it sums as the micro-kernel does, so on this
// path Gemm equals GemmRows bit for bit for every shape. The m = 1 product without a transpose
// gained most: it ran the 4×4 kernel's generic edge loop. MeasurePeakGFLOPS on the go path now runs
// peakGo's nine chains; the former loop's eight identical chains were merged into one by the
// compiler, and it reported 28 GFLOP/s.
//
// In both tables the m = 1 rows are matrix-vector products: they stream the 1 MiB of B once and are
// bound by the cache bandwidth, not by the FMAs. At 2 threads the avx512 path kept, per core,
// 139–156 GFLOP/cpu-s on the large shapes, 122–134 on the attention ones and 84–108 on the decode
// shapes with m ≥ 4 (gonum 9–16); the throughput is twice that when both cores are free: 252–303
// GFLOP/s were observed for 1024³, 4096×256×256 and 2048×688×256 in a quieter moment (the anchor of
// docs/design.md §6: gonum 15–22, a 4×32 AVX-512 kernel 76–83). The 6×64 micro-kernel alone, on cached
// operands (BenchmarkMicroKernel), runs at 181–186 GFLOP/cpu-s (78–81% of peak); the rest goes to
// packing B and to moving C between the caches. With operands streaming from memory as in a
// training step (BenchmarkGemmCold, the "bench" model's 4104-token products) it keeps 118–132
// GFLOP/cpu-s on 1 thread and 116–135 per core on 2. ExpShift takes 0.18 ns and Sigmoid 0.67 ns an
// element on AVX-512 (the portable Go loops 6.6 and 13 ns).
package kernel

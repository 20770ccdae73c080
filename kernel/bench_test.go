package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/compactrl/compactrl/internal/cputime"
)

// benchShapes are square sizes plus the model's shapes: a training projection (m = batch·seq)
// and batched decode (m = batch).
var benchShapes = []struct {
	name           string
	transA, transB bool
	m, n, k        int
}{
	{"64³", false, false, 64, 64, 64},
	{"256³", false, false, 256, 256, 256},
	{"1024³", false, false, 1024, 1024, 1024},
	{"train_4096x256x256", false, false, 4096, 256, 256},
	{"train_4096x256x256_tB", false, true, 4096, 256, 256},
	// The "bench" model (d=256, FFN 688, 2048 tokens): forward x·Wᵀ, dW = dyᵀ·x, dx = dy·W.
	{"fwd_2048x688x256_tB", false, true, 2048, 688, 256},
	{"dW_688x256x2048_tA", true, false, 688, 256, 2048},
	{"dx_2048x256x688", false, false, 2048, 256, 688},
	// Attention of one head (hd = 64) for a block of 64 query rows: S = Q·Kᵀ, O = P·V.
	{"attn_QK_64x512x64_tB", false, true, 64, 512, 64},
	{"attn_PV_64x64x512", false, false, 64, 64, 512},
	{"decode_32x1024x256", false, false, 32, 1024, 256},
	{"decode_32x1024x256_tB", false, true, 32, 1024, 256},
	{"decode_64x1024x256_tB", false, true, 64, 1024, 256},
	{"decode_1x1024x256", false, false, 1, 1024, 256},
	{"decode_1x1024x256_tB", false, true, 1, 1024, 256},
	{"decode_4x1024x256_tB", false, true, 4, 1024, 256},
	// The shapes of `compactrl bench model` (d=256, FFN 688, vocab 1024, batch 8 × seq 512, 32
	// sequences decoding): its GEMM table's rows, so that a regression there shows here.
	{"model_xWgT_4096x688x256_tB", false, true, 4096, 688, 256},
	{"model_xWdT_4096x256x688_tB", false, true, 4096, 256, 688},
	{"model_head_4096x1024x256_tB", false, true, 4096, 1024, 256},
	{"model_dWg_688x256x4096_tA", true, false, 688, 256, 4096},
	{"model_decode_32x688x256_tB", false, true, 32, 688, 256},
	// The demo's policy (d=64, FFN 176) on a training micro-batch of 4096 tokens: weight gradient
	// dW = dyᵀ·x and dx = dy·W of the FFN's down projection.
	{"vault_dW_176x64x4096_tA", true, false, 176, 64, 4096},
	{"vault_dx_4096x64x176", false, false, 4096, 64, 176},
	// Its projections (x·Wᵀ: attention 64→64, FFN up 64→176 and down 176→64) and the per-head
	// attention products (hd = 32) of a block of 64 query rows over 512 keys: S = Q·Kᵀ, O = P·V
	// (and dQ = dS·K), dK = dSᵀ·Q (and dV = Pᵀ·dO).
	{"vault_xWqT_4096x64x64_tB", false, true, 4096, 64, 64},
	{"vault_xWgT_4096x176x64_tB", false, true, 4096, 176, 64},
	{"vault_xWdT_4096x64x176_tB", false, true, 4096, 64, 176},
	{"vault_attn_QK_64x512x32_tB", false, true, 64, 512, 32},
	{"vault_attn_PV_64x32x512", false, false, 64, 32, 512},
	{"vault_attn_dK_512x32x64_tA", true, false, 512, 32, 64},
}

func benchGemm(b *testing.B, f func(tA, tB bool, m, n, k int, a, bm, c []float32)) {
	for _, s := range benchShapes {
		b.Run(s.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			a, bm, c := randSlice(r, s.m*s.k), randSlice(r, s.k*s.n), make([]float32, s.m*s.n)
			f(s.transA, s.transB, s.m, s.n, s.k, a, bm, c)
			cpu0 := cputime.Process()
			b.ResetTimer()
			for b.Loop() {
				f(s.transA, s.transB, s.m, s.n, s.k, a, bm, c)
			}
			reportFlops(b, 2*float64(s.m)*float64(s.n)*float64(s.k), cpu0)
		})
	}
}

// reportFlops reports GFLOP/s (wall clock) and GFLOP/cpu-s (per CPU-second of this process since
// cpu0: robust to other load on shared cores) for b.N operations of flops each.
func reportFlops(b *testing.B, flops float64, cpu0 time.Duration) {
	total := flops * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if cpu := cputime.Process() - cpu0; cpu > 0 {
		b.ReportMetric(total/cpu.Seconds()/1e9, "GFLOP/cpu-s")
	}
}

// ld returns the row stride of a stored rows×cols matrix, transposed if t.
func ld(t bool, rows, cols int) int {
	if t {
		return rows
	}
	return cols
}

// benchThreads runs f under sub-benchmarks threads=1 and threads=NumCPU, with GOMAXPROCS set to
// that count (Gemm and gonum both size their worker pools from it).
func benchThreads(b *testing.B, f func(b *testing.B)) {
	threads := []int{1}
	if n := runtime.NumCPU(); n > 1 {
		threads = append(threads, n)
	}
	for _, t := range threads {
		b.Run(fmt.Sprintf("threads=%d", t), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(t))
			f(b)
		})
	}
}

// BenchmarkGemm measures every code path and gonum's blas32.Gemm on the same shapes at 1 and
// all threads.
func BenchmarkGemm(b *testing.B) {
	for _, p := range impls {
		b.Run(p.name, func(b *testing.B) {
			benchThreads(b, func(b *testing.B) {
				benchGemm(b, func(tA, tB bool, m, n, k int, a, bm, c []float32) {
					gemmWith(p, runtime.GOMAXPROCS(0), tA, tB, m, n, k, 1, a, ld(tA, m, k), bm, ld(tB, k, n), 0, c, n)
				})
			})
		})
	}
	b.Run("gonum", func(b *testing.B) {
		blas32.Use(gonum.Implementation{})
		benchThreads(b, func(b *testing.B) {
			benchGemm(b, func(tA, tB bool, m, n, k int, a, bm, c []float32) {
				ta, ar, ac := blas.NoTrans, m, k
				if tA {
					ta, ar, ac = blas.Trans, k, m
				}
				tr, br, bc := blas.NoTrans, k, n
				if tB {
					tr, br, bc = blas.Trans, n, k
				}
				blas32.Gemm(ta, tr, 1,
					blas32.General{Rows: ar, Cols: ac, Stride: ac, Data: a},
					blas32.General{Rows: br, Cols: bc, Stride: bc, Data: bm},
					0, blas32.General{Rows: m, Cols: n, Stride: n, Data: c})
			})
		})
	})
}

// BenchmarkGemmRows measures the batch-invariant products on the shapes with op(A) = A: GemmRows,
// and GemmPacked with op(B) packed before the timing (as the decoder packs its weights once).
func BenchmarkGemmRows(b *testing.B) {
	for _, p := range impls {
		for _, s := range benchShapes {
			if s.transA {
				continue
			}
			r := rand.New(rand.NewPCG(1, 1))
			a, bm, c := randSlice(r, s.m*s.k), randSlice(r, s.k*s.n), make([]float32, s.m*s.n)
			ldb := ld(s.transB, s.k, s.n)
			pb := packBWith(p, s.transB, s.n, s.k, bm, ldb)
			run := func(name string, f func()) {
				b.Run(p.name+"/"+name+"/"+s.name, func(b *testing.B) {
					f()
					cpu0 := cputime.Process()
					b.ResetTimer()
					for b.Loop() {
						f()
					}
					reportFlops(b, 2*float64(s.m)*float64(s.n)*float64(s.k), cpu0)
				})
			}
			run("rows", func() {
				newGemm(p, false, s.transB, s.m, s.n, s.k, 1, a, s.k, bm, ldb, 0, c, s.n).rowsInvariant().exec(threadsFor(runtime.GOMAXPROCS(0), s.m, s.n, s.k))
			})
			run("packed", func() { gemmPacked(runtime.GOMAXPROCS(0), s.m, 1, a, s.k, pb, 0, c, s.n) })
		}
	}
}

// BenchmarkPeak reports MeasurePeakGFLOPS at 1 and all threads.
func BenchmarkPeak(b *testing.B) {
	benchThreads(b, func(b *testing.B) {
		var g float64
		for b.Loop() {
			g = MeasurePeakGFLOPS(runtime.GOMAXPROCS(0), 100*time.Millisecond)
		}
		b.ReportMetric(g, "GFLOP/s")
	})
}

// BenchmarkScalarPeak measures what portable Go code can reach on one core, in GFLOP per
// CPU-second: peakGo (9 independent float32 multiply-add chains, written as rowGo's loop is; Go
// on amd64 does not fuse them unless GOAMD64=v3) and fma64Peak (the same with math.FMA in
// float64, an FMA instruction behind a run-time CPU check on amd64 below GOAMD64=v3, fused
// natively on arm64, ppc64, s390x and riscv64).
func BenchmarkScalarPeak(b *testing.B) {
	const iters = 1 << 16
	for _, f := range []struct {
		name string
		run  func(int) float64
	}{{"muladd32", peakGo}, {"fma64", fma64Peak}} {
		b.Run(f.name, func(b *testing.B) {
			var flops float64
			cpu0 := cputime.Process()
			for b.Loop() {
				flops += f.run(iters)
			}
			if cpu := cputime.Process() - cpu0; cpu > 0 {
				b.ReportMetric(flops/cpu.Seconds()/1e9, "GFLOP/cpu-s")
			}
		})
	}
}

// fma64Peak runs iters rounds of 9 independent math.FMA chains and returns the flops done.
func fma64Peak(iters int) float64 {
	if iters <= 0 {
		return 0
	}
	var s0, s1, s2, s3, s4, s5, s6, s7, s8 float64
	x0, x1, x2 := float64(iters&1), float64(iters&2), float64(iters&4)
	y0, y1, y2 := 0.5, 0.25, 0.125
	for i := iters; ; {
		s0 = math.FMA(x0, y0, s0)
		s1 = math.FMA(x0, y1, s1)
		s2 = math.FMA(x0, y2, s2)
		s3 = math.FMA(x1, y0, s3)
		s4 = math.FMA(x1, y1, s4)
		s5 = math.FMA(x1, y2, s5)
		s6 = math.FMA(x2, y0, s6)
		s7 = math.FMA(x2, y1, s7)
		s8 = math.FMA(x2, y2, s8)
		i--
		if i == 0 {
			break
		}
	}
	runtime.KeepAlive(s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7 + s8)
	return float64(iters) * 9 * 2
}

func BenchmarkVector(b *testing.B) {
	for _, p := range impls {
		for _, n := range []int{32, 64, 256, 4096} {
			r := rand.New(rand.NewPCG(2, 2))
			x, y := randSlice(r, n), randSlice(r, n)
			b.Run(fmt.Sprintf("%s/dot/n=%d", p.name, n), func(b *testing.B) {
				var s float32
				for b.Loop() {
					s += p.dot(x, y)
				}
				_ = s
			})
			b.Run(fmt.Sprintf("%s/axpy/n=%d", p.name, n), func(b *testing.B) {
				for b.Loop() {
					p.axpy(1e-3, x, y)
				}
			})
			b.Run(fmt.Sprintf("%s/sigmoid/n=%d", p.name, n), func(b *testing.B) {
				d := make([]float32, n)
				for b.Loop() {
					p.sigmoid(d, x)
				}
			})
			b.Run(fmt.Sprintf("%s/expShift/n=%d", p.name, n), func(b *testing.B) {
				d := make([]float32, n)
				for b.Loop() {
					p.expShift(d, x, 3)
				}
			})
			b.Run(fmt.Sprintf("%s/max/n=%d", p.name, n), func(b *testing.B) {
				var s float32
				for b.Loop() {
					s += p.max(x)
				}
				_ = s
			})
		}
	}
	x, y := make([]float32, 64), make([]float32, 64)
	b.Run("public/Dot/n=64", func(b *testing.B) {
		var s float32
		for b.Loop() {
			s += Dot(x, y)
		}
		_ = s
	})
	b.Run("public/Axpy/n=64", func(b *testing.B) {
		for b.Loop() {
			Axpy(1e-3, x, y)
		}
	})
}

// BenchmarkMicroKernel runs the widest tile of each SIMD path on cached operands (one kc×mr
// slice of A, one kc×nr strip of B): the ceiling the blocked driver approaches.
func BenchmarkMicroKernel(b *testing.B) {
	for _, p := range impls {
		for _, kc := range []int{64, 128, 256} {
			b.Run(fmt.Sprintf("%s/kc=%d", p.name, kc), func(b *testing.B) {
				r := rand.New(rand.NewPCG(3, 3))
				a, bm, c := randSlice(r, p.mr*kc), randSlice(r, p.nr*kc), make([]float32, p.mr*p.nr)
				cpu0 := cputime.Process()
				for b.Loop() {
					p.micro(p.mr, p.nr, kc, a, 1, p.mr, bm, p.nr, c, p.nr, 1, false)
				}
				reportFlops(b, 2*float64(p.mr*p.nr*kc), cpu0)
			})
		}
	}
}

// BenchmarkGemmCold runs the "bench" model's training products with operands cycling through 8
// sets (over 100 MiB), so that A, B and C come from memory as in a training step, not from cache.
func BenchmarkGemmCold(b *testing.B) {
	shapes := []struct {
		name           string
		transA, transB bool
		m, n, k        int
	}{
		{"fwd_4104x688x256_tB", false, true, 4104, 688, 256},
		{"dx_4104x256x688", false, false, 4104, 256, 688},
		{"dW_688x256x4104_tA", true, false, 688, 256, 4104},
	}
	const sets = 8
	benchThreads(b, func(b *testing.B) {
		for _, s := range shapes {
			b.Run(s.name, func(b *testing.B) {
				r := rand.New(rand.NewPCG(4, 4))
				var as, bs, cs [sets][]float32
				for i := range sets {
					as[i], bs[i], cs[i] = randSlice(r, s.m*s.k), randSlice(r, s.k*s.n), make([]float32, s.m*s.n)
				}
				cpu0 := cputime.Process()
				i := 0
				for b.Loop() {
					Gemm(s.transA, s.transB, s.m, s.n, s.k, 1, as[i%sets], ld(s.transA, s.m, s.k), bs[i%sets], ld(s.transB, s.k, s.n), 0, cs[i%sets], s.n)
					i++
				}
				reportFlops(b, 2*float64(s.m)*float64(s.n)*float64(s.k), cpu0)
			})
		}
	})
}

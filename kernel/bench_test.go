package kernel

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/gonum"
)

// benchShapes are square sizes plus the model's shapes: a training projection (m = batch·seq)
// and batched decode (m = batch).
var benchShapes = []struct {
	name    string
	transB  bool
	m, n, k int
}{
	{"64³", false, 64, 64, 64},
	{"256³", false, 256, 256, 256},
	{"1024³", false, 1024, 1024, 1024},
	{"train_4096x256x256", false, 4096, 256, 256},
	{"train_4096x256x256_tB", true, 4096, 256, 256},
	{"decode_32x1024x256", false, 32, 1024, 256},
	{"decode_32x1024x256_tB", true, 32, 1024, 256},
	{"decode_1x1024x256", false, 1, 1024, 256},
	{"decode_1x1024x256_tB", true, 1, 1024, 256},
	{"decode_4x1024x256_tB", true, 4, 1024, 256},
}

func benchGemm(b *testing.B, f func(tB bool, m, n, k int, a, bm, c []float32)) {
	for _, s := range benchShapes {
		b.Run(s.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			a, bm, c := randSlice(r, s.m*s.k), randSlice(r, s.k*s.n), make([]float32, s.m*s.n)
			f(s.transB, s.m, s.n, s.k, a, bm, c)
			b.ResetTimer()
			for b.Loop() {
				f(s.transB, s.m, s.n, s.k, a, bm, c)
			}
			b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func ldb(tB bool, n, k int) int {
	if tB {
		return k
	}
	return n
}

// BenchmarkGemm measures every code path at 1 and GOMAXPROCS threads, and gonum's blas32.Gemm
// (which uses all cores) on the same shapes.
func BenchmarkGemm(b *testing.B) {
	threads := []int{1}
	if p := runtime.GOMAXPROCS(0); p > 1 {
		threads = append(threads, p)
	}
	for _, p := range impls {
		for _, t := range threads {
			b.Run(fmt.Sprintf("%s/threads=%d", p.name, t), func(b *testing.B) {
				benchGemm(b, func(tB bool, m, n, k int, a, bm, c []float32) {
					gemmWith(p, t, false, tB, m, n, k, 1, a, k, bm, ldb(tB, n, k), 0, c, n)
				})
			})
		}
	}
	b.Run("gonum", func(b *testing.B) {
		blas32.Use(gonum.Implementation{})
		benchGemm(b, func(tB bool, m, n, k int, a, bm, c []float32) {
			tr := blas.NoTrans
			br, bc := k, n
			if tB {
				tr, br, bc = blas.Trans, n, k
			}
			blas32.Gemm(blas.NoTrans, tr, 1,
				blas32.General{Rows: m, Cols: k, Stride: k, Data: a},
				blas32.General{Rows: br, Cols: bc, Stride: bc, Data: bm},
				0, blas32.General{Rows: m, Cols: n, Stride: n, Data: c})
		})
	})
}

func BenchmarkPeak(b *testing.B) {
	for _, t := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("threads=%d", t), func(b *testing.B) {
			var g float64
			for b.Loop() {
				g = MeasurePeakGFLOPS(t, 20e6)
			}
			b.ReportMetric(g, "GFLOP/s")
		})
	}
}

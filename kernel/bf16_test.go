package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
)

func TestBF16Rounding(t *testing.T) {
	nan := math.Float32frombits(0x7fc00001)
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // tie, even kept
		{0x3f818000, 0x3f82}, // tie, odd rounds up
		{0x3f808001, 0x3f81}, // above the tie
		{0xbf807fff, 0xbf80}, // below the tie, negative
		{0x7f7fffff, 0x7f80}, // the largest float32 rounds to +Inf
		{0x7f800000, 0x7f80}, // +Inf
		{0xff800000, 0xff80}, // −Inf
		{0x00000001, 0x0000}, // the smallest subnormal
		{0x80000000, 0x8000}, // −0
		{0x7f800001, 0x7fc0}, // a signalling NaN whose payload is all in the low half stays a NaN
	} {
		if got := BF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("BF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if h := BF16(nan); h&0x7f80 != 0x7f80 || h&0x7f == 0 {
		t.Errorf("BF16(NaN) = %#04x, not a NaN", h)
	}
}

// refGemmBF16 is GemmBF16 from its definition, element by element, with
// none of the packing: C ← beta·C, then for each block of 512 values of k
// the block's sum of bfloat16 products, odd element of a pair first, with
// DAZ and FTZ, added as C + float32(alpha·s).
func refGemmBF16(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	opA := func(i, kk int) uint16 {
		if kk >= k {
			return 0
		}
		if transA {
			return BF16(a[kk*lda+i])
		}
		return BF16(a[i*lda+kk])
	}
	opB := func(kk, j int) uint16 {
		if kk >= k {
			return 0
		}
		if transB {
			return BF16(b[j*ldb+kk])
		}
		return BF16(b[kk*ldb+j])
	}
	for i := range m {
		for j := range n {
			x := &c[i*ldc+j]
			if beta == 0 {
				*x = 0
			} else if beta != 1 {
				*x *= beta
			}
			for k0 := 0; k0 < k; k0 += 2 * bf16KC {
				var s float32
				for kk := k0; kk < min(k0+2*bf16KC, k); kk += 2 {
					s = bf16Add(s, bf16Value(opA(i, kk+1))*bf16Value(opB(kk+1, j)))
					s = bf16Add(s, bf16Value(opA(i, kk))*bf16Value(opB(kk, j)))
				}
				if alpha == 1 {
					*x += s
				} else {
					*x += float32(alpha * s)
				}
			}
		}
	}
}

func randMatrix(r *rand.Rand, n int, tiny bool) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
		if tiny {
			// products and sums near and below the smallest normal float32
			x[i] *= float32(math.Ldexp(1, -62-r.IntN(6)))
		}
	}
	return x
}

// TestGemmBF16 checks every path against the definition bit for bit, over
// tile and block edges, transposes, alpha, beta, odd k, values whose
// products underflow, and thread counts (40×150×301 on 3 threads: A packed
// and C scaled by three workers, the last one's strip past m).
func TestGemmBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	shapes := [][3]int{{1, 1, 1}, {6, 64, 2}, {7, 65, 3}, {13, 130, 511}, {5, 63, 513}, {12, 128, 1024}, {3, 200, 1100}, {25, 70, 40}, {40, 150, 301}}
	paths := append([]*impl{}, impls...)
	zen := amdCPU()
	for _, p := range paths {
		for si, sh := range shapes {
			m, n, k := sh[0], sh[1], sh[2]
			if p == generic && m*n*k > 2e6 {
				continue
			}
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				tiny := si%3 == 1
				a, b := randMatrix(r, m*k, tiny), randMatrix(r, k*n, tiny)
				lda, ldb := k, n
				if tr[0] {
					lda = m
				}
				if tr[1] {
					ldb = k
				}
				for _, ab := range [][2]float32{{1, 0}, {0.75, 1}, {-1.5, 0.25}} {
					c0 := randMatrix(r, m*(n+3), false)
					want := append([]float32(nil), c0...)
					refGemmBF16(tr[0], tr[1], m, n, k, ab[0], a, lda, b, ldb, ab[1], want, n+3)
					for _, threads := range []int{1, 3} {
						got := append([]float32(nil), c0...)
						gemmBF16(p, threads, tr[0], tr[1], m, n, k, ab[0], a, lda, b, ldb, ab[1], got, n+3)
						for i := range got {
							if tiny && bf16Native(p) && !zen {
								// Only AMD's treatment of sums near 2⁻¹²⁶ is measured: elsewhere the
								// native result may differ there, by flushed amounts only.
								if d := math.Abs(float64(got[i] - want[i])); d > 2*float64(k)*0x1p-126*math.Max(1, math.Abs(float64(ab[0])))+0x1p-23*math.Abs(float64(want[i])) {
									t.Fatalf("%s, %d×%d×%d, values near 2⁻¹²⁶: C[%d] = %g, want %g", p.name, m, n, k, i, got[i], want[i])
								}
								continue
							}
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%s (native %v), %d×%d×%d trans %v alpha %g beta %g tiny %v threads %d: C[%d] = %g (%#08x), want %g (%#08x)",
									p.name, bf16Native(p), m, n, k, tr, ab[0], ab[1], tiny, threads, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
							}
						}
					}
				}
			}
		}
	}
	t.Logf("paths %v; native bfloat16 on %s: %v", Paths(), Path(), BF16Native())
}

// amdCPU reports whether /proc/cpuinfo names an AMD CPU, whose VDPBF16PS
// the portable kernel reproduces near 2⁻¹²⁶ too.
func amdCPU() bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	return err == nil && strings.Contains(string(b), "AuthenticAMD")
}

// TestGemmBF16Accuracy bounds GemmBF16's error against the float64 product
// of the unrounded inputs: each input loses at most 2⁻⁹ of its value.
func TestGemmBF16Accuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	m, n, k := 9, 70, 700
	a, b := randMatrix(r, m*k, false), randMatrix(r, k*n, false)
	c := make([]float32, m*n)
	GemmBF16(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
	worst := 0.0
	for i := range m {
		for j := range n {
			var want, mag float64
			for kk := range k {
				want += float64(a[i*k+kk]) * float64(b[kk*n+j])
				mag += math.Abs(float64(a[i*k+kk]) * float64(b[kk*n+j]))
			}
			worst = max(worst, math.Abs(float64(c[i*n+j])-want)/mag)
		}
	}
	if worst > 2*math.Ldexp(1, -9)+1e-6 {
		t.Fatalf("error relative to Σ|a·b|: %.3g, above two bfloat16 roundings (%.3g)", worst, 2*math.Ldexp(1, -9))
	}
	t.Logf("largest error relative to Σ|a·b|: %.3g", worst)
}

// TestGemmPackedBF16 checks products with a PackBBF16 operand against
// GemmBF16, bit for bit, for batches of every size up to 13 rows (the
// decoder's), op(B) stored either way, and on one goroutine or several.
func TestGemmPackedBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 4))
	for _, sh := range [][2]int{{70, 33}, {128, 576}, {200, 1030}} {
		n, k := sh[0], sh[1]
		w := randMatrix(r, n*k, false)
		for _, transB := range []bool{true, false} {
			ldb := n
			if transB {
				ldb = k
			}
			pb := PackBBF16(transB, n, k, w, ldb)
			if pb.N() != n || pb.K() != k {
				t.Fatalf("PackBBF16: %d×%d, want %d×%d", pb.K(), pb.N(), k, n)
			}
			for m := 1; m <= 13; m++ {
				x := randMatrix(r, m*k, false)
				want := make([]float32, m*n)
				GemmBF16(false, transB, m, n, k, 1, x, k, w, ldb, 0, want, n)
				for _, serial := range []bool{false, true} {
					got := randMatrix(r, m*n, false)
					if serial {
						GemmPackedSerial(m, 1, x, k, pb, 0, got, n)
					} else {
						GemmPacked(m, 1, x, k, pb, 0, got, n)
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%d×%d×%d transB %v serial %v: C[%d] = %g, GemmBF16 %g", m, n, k, transB, serial, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

func TestGemmBF16Refuses(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a too short C was accepted")
		}
	}()
	GemmBF16(false, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 3), 2)
}

// BenchmarkGemmBF16 measures GemmBF16 against Gemm (float32) on the same
// shapes: the nano model's and SmolLM2-135M's (576 wide, SwiGLU 1536) of a
// 1024-token batch, forward x·Wᵀ and the weight gradient dYᵀ·X.
func BenchmarkGemmBF16(b *testing.B) {
	shapes := []struct {
		name    string
		tA, tB  bool
		m, n, k int
	}{
		{"nano-xWt", false, true, 1024, 688, 256},
		{"nano-dX", false, false, 4096, 256, 688},
		{"nano-dW", true, false, 688, 256, 4096},
		{"smol-xWt", false, true, 1024, 1536, 576},
		{"smol-dW", true, false, 1536, 576, 1024},
		{"square-1024", false, false, 1024, 1024, 1024},
	}
	for _, sh := range shapes {
		r := rand.New(rand.NewPCG(1, 1))
		a, bm := randMatrix(r, sh.m*sh.k, false), randMatrix(r, sh.k*sh.n, false)
		c := make([]float32, sh.m*sh.n)
		lda, ldb := sh.k, sh.n
		if sh.tA {
			lda = sh.m
		}
		if sh.tB {
			ldb = sh.k
		}
		for _, threads := range []int{1, runtime.GOMAXPROCS(0)} {
			for _, prec := range []string{"f32", "bf16"} {
				b.Run(fmt.Sprintf("%s/%s/threads=%d", sh.name, prec, threads), func(b *testing.B) {
					for b.Loop() {
						if prec == "bf16" {
							gemmBF16(active, threads, sh.tA, sh.tB, sh.m, sh.n, sh.k, 1, a, lda, bm, ldb, 0, c, sh.n)
						} else {
							gemmWith(active, threads, sh.tA, sh.tB, sh.m, sh.n, sh.k, 1, a, lda, bm, ldb, 0, c, sh.n)
						}
					}
					b.ReportMetric(2*float64(sh.m*sh.n*sh.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// TestBF16PairsPaths checks the vector conversions (pairs2, pairsAdj) of
// every path against BF16 on special values, ties and random floats, for
// lengths with and without a tail.
func TestBF16PairsPaths(t *testing.T) {
	special := []uint32{0, 0x80000000, 0x3f808000, 0x3f818000, 0x3f808001, 0x7f7fffff, 0x7f800000, 0xff800000,
		0x7f800001, 0xffc00000, 0x7fbfffff, 0x00000001, 0x807fffff, 0x00ff8000}
	r := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{0, 1, 7, 8, 15, 16, 17, 33, 100} {
		x := make([]float32, 2*n+1)
		for i := range x {
			if i < len(special) {
				x[(i*7)%len(x)] = math.Float32frombits(special[i])
			} else {
				x[i] = math.Float32frombits(r.Uint32())
			}
		}
		lo, hi := x[:n], x[n:2*n]
		for _, p := range impls {
			got := make([]uint32, n)
			pairs2(p, got, lo, hi)
			for j := range n {
				if want := uint32(BF16(lo[j])) | uint32(BF16(hi[j]))<<16; got[j] != want {
					t.Fatalf("%s pairs2 n=%d [%d]: %#08x, want %#08x (from %#08x, %#08x)", p.name, n, j, got[j], want, math.Float32bits(lo[j]), math.Float32bits(hi[j]))
				}
			}
			for _, xs := range [][]float32{x[:2*n], x[:2*n+1]} {
				q := (len(xs) + 1) / 2
				adj := make([]uint32, q)
				pairsAdj(p, adj, xs)
				for j := range q {
					want := uint32(BF16(xs[2*j]))
					if 2*j+1 < len(xs) {
						want |= uint32(BF16(xs[2*j+1])) << 16
					}
					if adj[j] != want {
						t.Fatalf("%s pairsAdj len %d [%d]: %#08x, want %#08x", p.name, len(xs), j, adj[j], want)
					}
				}
			}
		}
	}
}

package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// naiveGemm is the reference: C = alpha·op(A)·op(B) + beta·C in float64.
func naiveGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float64 {
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			out[i*n+j] = v
		}
	}
	return out
}

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

type gemmCase struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	padA, padB     int
	padC           int
}

func (tc gemmCase) String() string {
	return fmt.Sprintf("tA=%v tB=%v m=%d n=%d k=%d alpha=%g beta=%g pad=%d/%d/%d", tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, tc.beta, tc.padA, tc.padB, tc.padC)
}

// check runs one case on path p with threads goroutines and compares with naiveGemm.
func (tc gemmCase) check(t *testing.T, r *rand.Rand, p *impl, threads int) {
	t.Helper()
	tc.checkWith(t, r, func(c []float32, a []float32, lda int, b []float32, ldb int, ldc int) {
		gemmN(p, threads, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
	}, fmt.Sprintf("%s threads=%d", p.name, threads))
}

// checkWith runs one case through run and compares with naiveGemm.
func (tc gemmCase) checkWith(t *testing.T, r *rand.Rand, run func(c []float32, a []float32, lda int, b []float32, ldb int, ldc int), name string) {
	t.Helper()
	ar, ac := tc.m, tc.k
	if tc.transA {
		ar, ac = tc.k, tc.m
	}
	br, bc := tc.k, tc.n
	if tc.transB {
		br, bc = tc.n, tc.k
	}
	lda, ldb, ldc := ac+tc.padA, bc+tc.padB, tc.n+tc.padC
	a := randSlice(r, max(0, (ar-1)*lda+ac))
	b := randSlice(r, max(0, (br-1)*ldb+bc))
	c := randSlice(r, max(0, tc.m*ldc))
	if tc.beta == 0 {
		for i := range c {
			if i%3 == 0 {
				c[i] = float32(math.NaN())
			}
		}
	}
	c0 := append([]float32(nil), c...)
	want := naiveGemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
	run(c, a, lda, b, ldb, ldc)
	// Each output is a sum of k products of N(0,1) values: float32 rounding error grows ~ k·ε·|terms|.
	tol := 1e-5 * float64(tc.k+4) * (math.Abs(float64(tc.alpha)) + math.Abs(float64(tc.beta)) + 1)
	for i := range tc.m {
		for j := range ldc {
			got := c[i*ldc+j]
			if j >= tc.n {
				if math.Float32bits(got) != math.Float32bits(c0[i*ldc+j]) {
					t.Fatalf("%s %v: C[%d,%d] in the stride padding changed: %v → %v", name, tc, i, j, c0[i*ldc+j], got)
				}
				continue
			}
			if w := want[i*tc.n+j]; !(math.Abs(float64(got)-w) <= tol) {
				t.Fatalf("%s %v: C[%d,%d] = %v, want %v (tol %g)", name, tc, i, j, got, w, tol)
			}
		}
	}
}

func TestGemmSmallShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 300
	if testing.Short() {
		n = 60
	}
	for _, p := range impls {
		t.Run(p.name, func(t *testing.T) {
			for it := range n {
				tc := gemmCase{
					transA: it&1 != 0, transB: it&2 != 0,
					m: 1 + r.IntN(70), n: 1 + r.IntN(70), k: 1 + r.IntN(70),
					alpha: []float32{1, -0.5, 2}[r.IntN(3)], beta: []float32{0, 1, 0.25}[r.IntN(3)],
				}
				if it%5 == 0 {
					tc.padA, tc.padB, tc.padC = r.IntN(9), r.IntN(9), r.IntN(9)
				}
				tc.check(t, r, p, 1+it%3)
			}
		})
	}
}

func TestGemmEdges(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	dims := []int{1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65}
	for _, p := range impls {
		t.Run(p.name, func(t *testing.T) {
			for _, d := range dims {
				for tr := range 4 {
					tA, tB := tr&1 != 0, tr&2 != 0
					gemmCase{transA: tA, transB: tB, m: d, n: 37, k: 29, alpha: 1, beta: 0}.check(t, r, p, 2)
					gemmCase{transA: tA, transB: tB, m: 13, n: d, k: 29, alpha: 1, beta: 1}.check(t, r, p, 2)
					gemmCase{transA: tA, transB: tB, m: 9, n: 21, k: d, alpha: -1, beta: 0.5, padA: 3, padB: 1, padC: 2}.check(t, r, p, 1)
				}
			}
		})
	}
}

// TestGemmDirectB covers few rows with B read in place (n a multiple of 8 for AVX2).
func TestGemmDirectB(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, p := range impls {
		for _, m := range []int{1, 5, 12} {
			for _, n := range []int{8, 16, 24, 40, 64, 72, 128, 136} {
				for _, tA := range []bool{false, true} {
					gemmCase{transA: tA, m: m, n: n, k: 33, alpha: 1.5, beta: 0.5, padB: 3, padC: 1}.check(t, r, p, 1+n%2)
				}
			}
		}
	}
}

// TestGemmBlocked crosses the cache-block boundaries in every dimension, with several threads.
func TestGemmBlocked(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	cases := []gemmCase{
		{m: blockM + 37, n: 2*blockN/3 + 19, k: blockK + 45, alpha: 1, beta: 0},
		{transA: true, transB: true, m: 2*blockM + 5, n: 90, k: 2*blockK + 3, alpha: 0.5, beta: 1, padA: 4, padB: 7, padC: 1},
		{transB: true, m: 1, n: blockN + 70, k: blockK + 1, alpha: 1, beta: 0},
		{transA: true, m: 3, n: 513, k: 300, alpha: 2, beta: 0.5},
	}
	if testing.Short() {
		cases = cases[2:]
	}
	for _, p := range impls {
		for _, tc := range cases {
			for _, threads := range []int{1, 2, 3} {
				tc.check(t, r, p, threads)
			}
		}
	}
}

func TestGemmDegenerate(t *testing.T) {
	for _, p := range impls {
		// k == 0: C = beta·C.
		c := []float32{1, 2, 3, float32(math.NaN())}
		gemmWith(p, 1, false, false, 2, 2, 0, 1, nil, 1, nil, 2, 0.5, c, 2)
		if c[0] != 0.5 || c[2] != 1.5 || !math.IsNaN(float64(c[3])) {
			t.Errorf("%s: k=0 beta=0.5 gave %v", p.name, c)
		}
		// alpha == 0, beta == 0: C = 0 even where C held NaN.
		c = []float32{1, float32(math.NaN())}
		gemmWith(p, 1, false, false, 1, 2, 1, 0, []float32{1}, 1, []float32{1, 1}, 2, 0, c, 2)
		if c[0] != 0 || c[1] != 0 {
			t.Errorf("%s: alpha=0 beta=0 gave %v", p.name, c)
		}
		// m == 0 / n == 0 touch nothing.
		gemmWith(p, 1, false, false, 0, 5, 5, 1, nil, 5, make([]float32, 25), 5, 0, nil, 5)
	}
}

func TestGemmDeterministicAcrossThreads(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	m, n, k := 300, 260, 520
	a, b := randSlice(r, m*k), randSlice(r, k*n)
	for _, p := range impls {
		ref := make([]float32, m*n)
		gemmWith(p, 1, false, true, m, n, k, 1, a, k, b, k, 0, ref, n)
		for _, threads := range []int{2, 3, 4} {
			c := make([]float32, m*n)
			gemmN(p, threads, false, true, m, n, k, 1, a, k, b, k, 0, c, n)
			for i := range c {
				if math.Float32bits(c[i]) != math.Float32bits(ref[i]) {
					t.Fatalf("%s: threads=%d differs from 1 thread at %d: %v vs %v", p.name, threads, i, c[i], ref[i])
				}
			}
		}
	}
}

func TestGemmSerialMatchesGemm(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	m, n, k := 200, 700, 300
	a, b := randSlice(r, m*k), randSlice(r, n*k)
	c1, c2 := make([]float32, m*n), make([]float32, m*n)
	Gemm(false, true, m, n, k, 0.5, a, k, b, k, 0, c1, n)
	GemmSerial(false, true, m, n, k, 0.5, a, k, b, k, 0, c2, n)
	for i := range c1 {
		if math.Float32bits(c1[i]) != math.Float32bits(c2[i]) {
			t.Fatalf("GemmSerial differs from Gemm at %d: %v vs %v", i, c2[i], c1[i])
		}
	}
}

func TestGemmPanics(t *testing.T) {
	cases := map[string]func(){
		"short a": func() {
			Gemm(false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2)
		},
		"small ld": func() {
			Gemm(false, false, 2, 2, 2, 1, make([]float32, 4), 1, make([]float32, 4), 2, 0, make([]float32, 4), 2)
		},
		"short c": func() {
			Gemm(false, true, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 3), 2)
		},
		"negative": func() { Gemm(false, false, -1, 2, 2, 1, nil, 2, nil, 2, 0, nil, 2) },
	}
	for name, f := range cases {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestVectorHelpers(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, p := range impls {
		for _, n := range []int{0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 257} {
			x, y := randSlice(r, n), randSlice(r, n)
			var want float64
			for i := range x {
				want += float64(x[i]) * float64(y[i])
			}
			if got := p.dot(x, y); math.Abs(float64(got)-want) > 1e-5*float64(n+1) {
				t.Errorf("%s: dot n=%d = %v, want %v", p.name, n, got, want)
			}
			y2 := append([]float32(nil), y...)
			p.axpy(-1.5, x, y2)
			for i := range y2 {
				if w := y[i] - 1.5*x[i]; math.Abs(float64(y2[i]-w)) > 1e-6*(1+math.Abs(float64(w))) {
					t.Fatalf("%s: axpy n=%d [%d] = %v, want %v", p.name, n, i, y2[i], w)
				}
			}
			x2 := append([]float32(nil), x...)
			p.scale(0.3, x2)
			for i := range x2 {
				if w := 0.3 * x[i]; x2[i] != w {
					t.Fatalf("%s: scale n=%d [%d] = %v, want %v", p.name, n, i, x2[i], w)
				}
			}
		}
	}
	// Public wrappers use the active path.
	if got := Dot([]float32{1, 2, 3}, []float32{4, 5, 6}); got != 32 {
		t.Errorf("Dot = %v, want 32", got)
	}
	y := []float32{1, 1}
	Axpy(2, []float32{3, 4}, y)
	if y[0] != 7 || y[1] != 9 {
		t.Errorf("Axpy = %v, want [7 9]", y)
	}
}

// TestGemmDotPath checks the dot-product path of A·Bᵀ on every shape, whatever useDotT picks.
func TestGemmDotPath(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, p := range impls {
		if p.dotT == nil {
			continue
		}
		for it := range 200 {
			tc := gemmCase{transA: it%2 == 1, transB: true, m: 1 + r.IntN(40), n: 1 + r.IntN(40), k: 1 + r.IntN(300),
				alpha: []float32{1, -0.5}[it%2], beta: []float32{0, 1, 0.25}[it%3], padA: it % 3, padB: it % 5, padC: it % 2}
			forced := *p
			forced.name += "/dot"
			tc.checkWith(t, r, func(c []float32, a []float32, lda int, b []float32, ldb int, ldc int) {
				g := gemmArgs{p: &forced, transA: tc.transA, transB: true, k: tc.k, alpha: tc.alpha, a: a, lda: lda, b: b, ldb: ldb, beta: tc.beta, c: c, ldc: ldc}
				g.dotT(1+it%3, tc.m, tc.n)
			}, forced.name)
		}
	}
}

// TestGemmConcurrent runs products from several goroutines at once (each parallel inside).
func TestGemmConcurrent(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	m, n, k := 150, 130, 200
	a, b := randSlice(r, m*k), randSlice(r, k*n)
	want := make([]float32, m*n)
	Gemm(false, false, m, n, k, 1, a, k, b, n, 0, want, n)
	errs := make(chan string, 8)
	for g := range 8 {
		go func() {
			c := make([]float32, m*n)
			for range 5 {
				Gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
				for i := range c {
					if c[i] != want[i] {
						errs <- fmt.Sprintf("goroutine %d: C[%d] = %v, want %v", g, i, c[i], want[i])
						return
					}
				}
			}
			errs <- ""
		}()
	}
	for range 8 {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}

func TestExpShift(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	inf := float32(math.Inf(1))
	special := []float32{0, 1, -1, -86.9, -87.1, -100, -inf, 88, 88.7, 88.8, 100, inf, 1e-8, -1e-8, 0.3465, -0.3466}
	for _, p := range impls {
		for _, n := range []int{0, 1, 5, 16, 17, 31, 64, 100, 1000} {
			x := make([]float32, n)
			for i := range x {
				if i < len(special) && n < 100 {
					x[i] = special[i] + 2
				} else {
					x[i] = float32(r.NormFloat64() * 20)
				}
			}
			dst := make([]float32, n)
			sum := p.expShift(dst, x, 2)
			var want float64
			for i, v := range x {
				y := float64(v - 2) // the argument as the kernel rounds it
				e := math.Exp(y)
				if float32(y) < -87 {
					e = 0
				}
				if e > math.MaxFloat32 {
					if !math.IsInf(float64(dst[i]), 1) {
						t.Fatalf("%s: exp(%v) = %v, want +Inf", p.name, y, dst[i])
					}
					want = math.Inf(1)
					continue
				}
				want += e
				if e == 0 {
					if dst[i] != 0 {
						t.Fatalf("%s: exp(%v) = %v, want 0", p.name, y, dst[i])
					}
					continue
				}
				if rel := math.Abs(float64(dst[i])-e) / e; !(rel < 1e-6) && e > 1e-37 {
					t.Fatalf("%s: exp(%v) = %v, want %v (rel err %g)", p.name, y, dst[i], e, rel)
				}
			}
			if math.IsInf(want, 1) {
				if !math.IsInf(float64(sum), 1) {
					t.Fatalf("%s n=%d: sum %v, want +Inf", p.name, n, sum)
				}
			} else if math.Abs(float64(sum)-want) > 1e-5*want+1e-30 {
				t.Fatalf("%s n=%d: sum %v, want %v", p.name, n, sum, want)
			}
		}
		nan := []float32{float32(math.NaN())}
		p.expShift(nan, nan, 0)
		if !math.IsNaN(float64(nan[0])) {
			t.Errorf("%s: exp(NaN) = %v", p.name, nan[0])
		}
	}
}

func TestSigmoid(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	inf := float32(math.Inf(1))
	for _, p := range impls {
		for _, n := range []int{0, 1, 7, 16, 33, 300} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64() * 10)
			}
			if n >= 7 {
				copy(x, []float32{-inf, inf, 0, -100, 100, 87.5, -87.5})
			}
			dst := make([]float32, n)
			p.sigmoid(dst, x)
			for i, v := range x {
				want := 1 / (1 + math.Exp(-float64(v)))
				if math.Abs(float64(dst[i])-want) > 1e-6*want+1e-38 {
					t.Fatalf("%s: σ(%v) = %v, want %v", p.name, v, dst[i], want)
				}
			}
		}
	}
	// In place.
	x := []float32{0, 2}
	Sigmoid(x, x)
	if x[0] != 0.5 || math.Abs(float64(x[1])-0.8807970779778823) > 1e-7 {
		t.Errorf("Sigmoid in place = %v", x)
	}
}

func TestMax(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	for _, p := range impls {
		if got := p.max(nil); !math.IsInf(float64(got), -1) {
			t.Errorf("%s: max of empty = %v", p.name, got)
		}
		for _, n := range []int{1, 2, 15, 16, 17, 33, 48, 63, 200} {
			for pos := range n {
				x := make([]float32, n)
				for i := range x {
					x[i] = -1000 + float32(r.Float64())
				}
				x[pos] = 5
				if got := p.max(x); got != 5 {
					t.Fatalf("%s: max n=%d with the maximum at %d = %v", p.name, n, pos, got)
				}
			}
		}
	}
}

// TestGemmRowsBatchInvariant checks that every element of GemmRows's product, and of
// GemmPacked's, is bit for bit the same for m = 1 … M rows of one op(A) and n = 1 … N columns of
// one op(B), on every code path and thread count, and that GemmPacked equals GemmRows. Gemm fails
// this for A·Bᵀ: it switches to the dot-product kernel below some m.
func TestGemmRowsBatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	const M = 50
	shapes := []struct {
		transA, transB bool
		n, k           int
		alpha, beta    float32
	}{
		{false, true, 40, 32, 1, 0},             // decode x·Wᵀ, small
		{false, true, 130, 300, 0.3, 1},         // two k blocks, column edges, scaled scores
		{false, false, 70, 64, 1, 1},            // B read in place for few rows, packed for more
		{false, false, 36, 280, 0.5, 0},         // the same over two k blocks
		{true, true, 33, 20, -0.5, 0},           // transposed A
		{false, true, 2*blockN/3 + 5, 40, 1, 0}, // large enough to run on several goroutines
	}
	for _, p := range impls {
		for _, sh := range shapes {
			name := fmt.Sprintf("%s tA=%v tB=%v n=%d k=%d", p.name, sh.transA, sh.transB, sh.n, sh.k)
			lda, ldb := sh.k+3, sh.k+1
			a := randSlice(r, M*lda)
			if sh.transA {
				lda = M + 2
				a = randSlice(r, sh.k*lda)
			}
			if !sh.transB {
				ldb = sh.n + 2
			}
			b := randSlice(r, max(sh.n, sh.k)*ldb)
			c0 := randSlice(r, M*sh.n)
			full := append([]float32(nil), c0...)
			newGemm(p, sh.transA, sh.transB, M, sh.n, sh.k, sh.alpha, a, lda, b, ldb, sh.beta, full, sh.n).rowsInvariant().exec(1)
			// part runs the product of the first m rows and n columns.
			part := func(m, n, threads int) {
				c := append([]float32(nil), c0[:m*sh.n]...)
				newGemm(p, sh.transA, sh.transB, m, n, sh.k, sh.alpha, a, lda, b, ldb, sh.beta, c, sh.n).rowsInvariant().exec(threads)
				sameBlock(t, fmt.Sprintf("%s: GemmRows m=%d n=%d threads=%d", name, m, n, threads), c, full, m, n, sh.n)
				if sh.transA {
					return
				}
				clear(c)
				copy(c, c0[:m*sh.n])
				gemmPacked(threads, m, sh.alpha, a, lda, packBWith(p, sh.transB, n, sh.k, b, ldb), sh.beta, c, sh.n)
				sameBlock(t, fmt.Sprintf("%s: GemmPacked m=%d n=%d threads=%d", name, m, n, threads), c, full, m, n, sh.n)
			}
			for m := 1; m <= M; m++ {
				part(m, sh.n, 1+m%3)
			}
			for n := 1; n < sh.n; n += 1 + n/8 {
				part(1, n, 1)
				part(M, n, 2)
			}
		}
	}
}

// sameBlock fails unless the first m rows and n columns of got and want (row stride ld) are equal
// bit for bit.
func sameBlock(t *testing.T, name string, got, want []float32, m, n, ld int) {
	t.Helper()
	for i := range m {
		for j := range n {
			if g, w := got[i*ld+j], want[i*ld+j]; math.Float32bits(g) != math.Float32bits(w) {
				t.Fatalf("%s: C[%d,%d] is %v, %v in the whole product", name, i, j, g, w)
			}
		}
	}
}

// TestGemmPackedMatchesNaive checks GemmPacked's values on every code path, with edges of every
// block.
func TestGemmPackedMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	cases := []gemmCase{
		{transB: true, m: 1, n: 1, k: 1, alpha: 1},
		{transB: true, m: 7, n: 65, k: 17, alpha: 2, beta: 0.5, padA: 1, padB: 2, padC: 3},
		{m: 13, n: 100, k: blockK + 9, alpha: -1, beta: 1, padB: 4},
		{transB: true, m: blockM + 5, n: blockN + 21, k: 2*blockK + 1, alpha: 1},
		{transB: true, m: 3, n: 10, k: 0, alpha: 1, beta: 0.5, padA: 1, padB: 1},
	}
	for _, p := range impls {
		for i, tc := range cases {
			tc.checkWith(t, r, func(c []float32, a []float32, lda int, b []float32, ldb int, ldc int) {
				gemmPacked(1+i%3, tc.m, tc.alpha, a, lda, packBWith(p, tc.transB, tc.n, tc.k, b, ldb), tc.beta, c, ldc)
			}, p.name+"/packed")
		}
	}
	pb := PackB(true, 3, 2, make([]float32, 6), 2)
	if pb.N() != 3 || pb.K() != 2 {
		t.Fatalf("PackB(3×2ᵀ): N %d, K %d", pb.N(), pb.K())
	}
}

func TestChoosePath(t *testing.T) {
	for _, name := range Paths() {
		p, err := choose(name)
		if err != nil || p.name != name {
			t.Errorf("choose(%q) = %v, %v", name, p.name, err)
		}
	}
	if p, err := choose(""); err != nil || p != impls[0] {
		t.Errorf(`choose("") = %v, %v; want the fastest path`, p.name, err)
	}
	if _, err := choose("neon512"); err == nil || !strings.Contains(err.Error(), EnvPath) {
		t.Errorf("an unknown path gave %v; want an error naming %s", err, EnvPath)
	}
	if Err() != nil && os.Getenv(EnvPath) == "" {
		t.Errorf("Err() = %v without %s", Err(), EnvPath)
	}
}

// TestEnvSelectsPath runs this test binary again with EnvPath set to each
// supported path (and to one no CPU has) and checks what it reports.
func TestEnvSelectsPath(t *testing.T) {
	if os.Getenv("COMPACTRL_KERNEL_CHILD") == "1" {
		fmt.Printf("path=%s err=%v\n", Path(), Err())
		return
	}
	run := func(name string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEnvSelectsPath$")
		if w := os.Getenv("COMPACTRL_EXEC_WRAPPER"); w != "" {
			// A cross-built test binary run under an emulator (qemu-aarch64-static) re-runs itself
			// through it.
			cmd = exec.Command(w, os.Args[0], "-test.run=^TestEnvSelectsPath$")
		}
		cmd.Env = append(os.Environ(), "COMPACTRL_KERNEL_CHILD=1", EnvPath+"="+name)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s=%s: %v\n%s", EnvPath, name, err, out)
		}
		return string(out)
	}
	for _, name := range Paths() {
		if out := run(name); !strings.Contains(out, "path="+name+" err=<nil>") {
			t.Errorf("%s=%s: child reported %q", EnvPath, name, out)
		}
	}
	if out := run("sve2"); !strings.Contains(out, "err="+EnvPath+"=sve2") {
		t.Errorf("%s=sve2: child reported %q; want an error", EnvPath, out)
	}
}

// TestVectorPositionInvariant checks that ExpShift and Sigmoid give an element the same bits
// wherever it sits in its slice (vector body or tail, any length): the model splits these calls
// over goroutines at boundaries that move with the batch, so a value that depended on its place
// would break the decoder's batch invariance.
func TestVectorPositionInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	x := randSlice(r, 70)
	for i := range x {
		x[i] *= 8
	}
	for _, p := range impls {
		ref := make([]float32, len(x))
		p.expShift(ref, x, 0.5)
		refS := make([]float32, len(x))
		p.sigmoid(refS, x)
		for off := range 17 {
			for n := 0; off+n <= len(x); n += 1 + n/3 {
				d := make([]float32, n)
				p.expShift(d, x[off:off+n], 0.5)
				sameBlock(t, fmt.Sprintf("%s expShift off=%d n=%d", p.name, off, n), d, ref[off:], 1, n, n)
				p.sigmoid(d, x[off:off+n])
				sameBlock(t, fmt.Sprintf("%s sigmoid off=%d n=%d", p.name, off, n), d, refS[off:], 1, n, n)
			}
		}
	}
}

// TestRowGo checks the portable kernel's row on operands cut to exactly the elements it may read
// (it reads them through unsafe pointers): its values against a float64 sum, and a panic for
// every operand one element too short.
func TestRowGo(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	cases := []struct{ kc, as, bs int }{
		{1, 1, goNR},
		{7, 1, goNR},
		{256, 1, goNR},
		{33, 5, goNR + 3},
		{40, 1, 1024},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("kc=%d as=%d bs=%d", tc.kc, tc.as, tc.bs), func(t *testing.T) {
			na, nb := (tc.kc-1)*tc.as+1, (tc.kc-1)*tc.bs+goNR
			a, b, c := randSlice(r, na), randSlice(r, nb), randSlice(r, goNR)
			want := make([]float64, goNR)
			for j := range want {
				var s float64
				for p := range tc.kc {
					s += float64(a[p*tc.as]) * float64(b[p*tc.bs+j])
				}
				want[j] = float64(c[j]) - 0.5*s
			}
			rowGo(tc.kc, a, tc.as, b, tc.bs, c, -0.5)
			for j, w := range want {
				if d := math.Abs(float64(c[j]) - w); d > 1e-5*float64(tc.kc)*(1+math.Abs(w)) {
					t.Errorf("c[%d] = %v, want %v", j, c[j], w)
				}
			}
			for name, f := range map[string]func(){
				"a": func() { rowGo(tc.kc, a[:na-1], tc.as, b, tc.bs, c, 1) },
				"b": func() { rowGo(tc.kc, a, tc.as, b[:nb-1], tc.bs, c, 1) },
				"c": func() { rowGo(tc.kc, a, tc.as, b, tc.bs, c[:goNR-1], 1) },
			} {
				func() {
					defer func() {
						if recover() == nil {
							t.Errorf("%s one element short: no panic", name)
						}
					}()
					f()
				}()
			}
		})
	}
}

// TestGemmGoDotPathBatchInvariant checks that on the portable path Gemm's dot-product tiles (A·Bᵀ
// with few rows) sum every element as its micro-kernel does: Gemm equals GemmRows bit for bit,
// over one and several k blocks and at every column edge.
func TestGemmGoDotPathBatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	for _, tc := range []struct {
		transA      bool
		m, n, k     int
		alpha, beta float32
	}{
		{false, 1, 37, 64, 1, 0},
		{false, 4, 29, blockK + 70, -0.5, 1},
		{true, 3, 9, 2*blockK + 1, 2, 0.5},
	} {
		t.Run(fmt.Sprintf("tA=%v %d×%d×%d", tc.transA, tc.m, tc.n, tc.k), func(t *testing.T) {
			if !generic.useDotT(tc.m, tc.k) {
				t.Fatalf("the go path does not take its dot tiles for m=%d", tc.m)
			}
			a, b := randSlice(r, tc.m*tc.k), randSlice(r, tc.n*tc.k)
			c0 := randSlice(r, tc.m*tc.n)
			lda := ld(tc.transA, tc.m, tc.k)
			dot, rows := append([]float32(nil), c0...), append([]float32(nil), c0...)
			gemmN(generic, 1, tc.transA, true, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, tc.k, tc.beta, dot, tc.n)
			newGemm(generic, tc.transA, true, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, tc.k, tc.beta, rows, tc.n).rowsInvariant().exec(1)
			sameBlock(t, "Gemm against GemmRows", dot, rows, tc.m, tc.n, tc.n)
		})
	}
}

// B read in place at a column edge: the tile reads whole units of columns past n, which may hold
// anything (here NaN) as long as they are inside b; C must equal, bit for bit, the product with B
// packed (a copy of B with no room, whose last row ends the slice, is packed), and no NaN may
// leak into it.
func TestDirectBColumnEdge(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, p := range impls {
		if InPlaceColumns%p.directBUnit != 0 {
			t.Errorf("%s: InPlaceColumns %d is not a multiple of directBUnit %d", p.name, InPlaceColumns, p.directBUnit)
		}
		for _, k := range []int{1, 5, 32, 300} {
			for _, n := range []int{1, 3, 5, 13, 21, 37} {
				for _, m := range []int{1, 2, 7, 12} {
					u := InPlaceColumns
					ldb := (n+u-1)/u*u + u
					roomy := make([]float32, (k-1)*ldb+(n+u-1)/u*u)
					tight := make([]float32, k*n)
					for i := range roomy {
						roomy[i] = float32(math.NaN())
					}
					for q := range k {
						for j := range n {
							v := r.Float32()*2 - 1
							roomy[q*ldb+j], tight[q*n+j] = v, v
						}
					}
					a := randSlice(r, m*k)
					c0 := randSlice(r, m*n)
					g := newGemm(p, false, false, m, n, k, 0.5, a, k, roomy, ldb, 0, nil, n)
					if !g.directFits(0, n) {
						t.Fatalf("%s: roomy B does not fit in place", p.name)
					}
					if tg := newGemm(p, false, false, m, n, k, 0.5, a, k, tight, n, 0, nil, n); n%p.directBUnit != 0 && tg.directFits(0, n) {
						t.Fatalf("%s n=%d: a B whose last row ends its slice fits in place", p.name, n)
					}
					for _, beta := range []float32{0, 1} {
						want := append([]float32(nil), c0...)
						got := append([]float32(nil), c0...)
						newGemm(p, false, false, m, n, k, 0.5, a, k, tight, n, beta, want, n).rowsInvariant().exec(1)
						newGemm(p, false, false, m, n, k, 0.5, a, k, roomy, ldb, beta, got, n).rowsInvariant().exec(1)
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%s m=%d n=%d k=%d beta=%v: C[%d] = %v in place, %v packed", p.name, m, n, k, beta, i, got[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestThreadsFor: a product gets a goroutine per parallelFlops of work, and one of few rows
// is counted by the B it reads (streamRows rows), so that a batch-1 decode step's products split.
func TestThreadsFor(t *testing.T) {
	for _, c := range []struct{ threads, m, n, k, want int }{
		{2, 1, 576, 576, 2},    // 2·8·576·576 = 5.3 Mflop of work: SmolLM2's q and o at batch 1
		{2, 1, 64, 64, 1},      // 65 kflop: the demo's model at batch 1 stays on one goroutine
		{2, 32, 688, 256, 2},   // 11 Mflop: the nano decode step's gate at batch 32
		{1, 1, 576, 576, 1},    // one thread allowed
		{8, 1, 256, 256, 1},    // 2·8·256·256 = 1.05 Mflop: one unit of work
		{8, 16, 256, 256, 2},   // 2.1 Mflop: two
		{8, 64, 1024, 1024, 8}, // capped at threads
	} {
		if got := threadsFor(c.threads, c.m, c.n, c.k); got != c.want {
			t.Errorf("threadsFor(%d, %d×%d×%d) = %d, want %d", c.threads, c.m, c.n, c.k, got, c.want)
		}
	}
}

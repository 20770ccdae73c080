package kernel

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func needAVX2(t *testing.T) {
	t.Helper()
	if !slices.Contains(Paths(), "avx2") {
		t.Skip("this CPU has no AVX2 and FMA")
	}
}

// TestAVX2ExpEqualsAVX512 checks that the AVX2 exponential (two multiplications by powers of two
// in place of VSCALEFPS) gives every lane the AVX-512 kernel's value bit for bit, over the whole
// float32 range of arguments, the clamps and the special values.
func TestAVX2ExpEqualsAVX512(t *testing.T) {
	if !slices.Contains(Paths(), "avx512") {
		t.Skip("this CPU has no AVX-512")
	}
	r := rand.New(rand.NewPCG(5, 6))
	inf := float32(math.Inf(1))
	x := []float32{0, -0, 1, -1, -86.9, -87, -87.0001, -87.5, -88, -100, -inf, inf, 88, 88.7, 88.72, 88.73, 89, 100,
		1e-8, -1e-8, 0.3465, -0.3466, -86.64, -86.7, -87.33, float32(math.NaN())}
	for range 100000 {
		x = append(x, float32(r.Float64()*180-90))
	}
	for range 1000 {
		x = append(x, math.Float32frombits(r.Uint32()))
	}
	x = x[:len(x)&^15]
	a, b := make([]float32, len(x)), make([]float32, len(x))
	sa := expShift256(a, x, 0)
	sb := expShift512(b, x, 0)
	for i := range x {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
			t.Fatalf("e^%v: avx2 %v (%#08x), avx512 %v (%#08x)", x[i], a[i], math.Float32bits(a[i]), b[i], math.Float32bits(b[i]))
		}
	}
	if !(sa != sa && sb != sb) && math.Abs(float64(sa-sb)) > 1e-6*math.Abs(float64(sb)) {
		t.Errorf("sums: avx2 %v, avx512 %v", sa, sb)
	}
	sigmoid256(a, x)
	sigmoid512(b, x)
	for i := range x {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
			t.Fatalf("σ(%v): avx2 %v, avx512 %v", x[i], a[i], b[i])
		}
	}
}

// TestPackT8 checks the AVX2 transposing pack on every depth up to three blocks: the values,
// and that no element of dst outside the 8 columns of each of the kc rows is written.
func TestPackT8(t *testing.T) {
	needAVX2(t)
	r := rand.New(rand.NewPCG(7, 8))
	for kc := 0; kc <= 25; kc++ {
		const ldb, ds = 29, 13
		b := randSlice(r, 7*ldb+kc) // 8 rows of B, the last cut right after its kc values
		dst := make([]float32, max(kc, 1)*ds+8)
		for i := range dst {
			dst[i] = -7
		}
		packT8(kc, b, ldb, dst, ds)
		for q := range max(kc, 1) {
			for j := range ds {
				want := float32(-7)
				if j < 8 && q < kc {
					want = b[j*ldb+q]
				}
				if got := dst[q*ds+j]; got != want {
					t.Fatalf("kc=%d: dst[%d·ds+%d] = %v, want %v", kc, q, j, got, want)
				}
			}
		}
	}
}

// TestPackAT256 checks the AVX2 pack of w ≤ 8 columns of transposed A, and that nothing past
// dst[kc·w] is written.
func TestPackAT256(t *testing.T) {
	needAVX2(t)
	r := rand.New(rand.NewPCG(9, 10))
	for w := 1; w <= 8; w++ {
		for kc := 0; kc <= 9; kc++ {
			const lda = 11
			a := randSlice(r, max(kc-1, 0)*lda+w)
			dst := make([]float32, kc*w+16)
			if kc == 0 {
				packATAVX2(0, nil, lda, w, nil)
			}
			for i := range dst {
				dst[i] = -7
			}
			packATAVX2(kc, a, lda, w, dst)
			for i, got := range dst {
				want := float32(-7)
				if q := i / w; q < kc {
					want = a[q*lda+i%w]
				}
				if got != want {
					t.Fatalf("w=%d kc=%d: dst[%d] = %v, want %v", w, kc, i, got, want)
				}
			}
		}
	}
}

// TestPackN256 checks the AVX2 pack of a 16-column strip of B: w ≤ 16 values of each row, zeros
// after them, and nothing past dst[16·kc].
func TestPackN256(t *testing.T) {
	needAVX2(t)
	r := rand.New(rand.NewPCG(11, 12))
	for w := 1; w <= 16; w++ {
		for kc := 1; kc <= 5; kc++ {
			const ldb = 19
			b := randSlice(r, (kc-1)*ldb+w)
			dst := make([]float32, 16*kc+16)
			for i := range dst {
				dst[i] = -7
			}
			packN256(kc, b, ldb, w, dst)
			for i, got := range dst {
				q, j := i/16, i%16
				want := float32(-7)
				switch {
				case q < kc && j < w:
					want = b[q*ldb+j]
				case q < kc:
					want = 0
				}
				if got != want {
					t.Fatalf("w=%d kc=%d: dst[%d] = %v, want %v", w, kc, i, got, want)
				}
			}
		}
	}
}

// TestMicroPackedEqualsMicro checks that the unrolled AVX-512 tile on packed operands gives
// every element of C the value of the general tile bit for bit, with C read and with C taken
// as zero.
func TestMicroPackedEqualsMicro(t *testing.T) {
	if !slices.Contains(Paths(), "avx512") {
		t.Skip("this CPU has no AVX-512")
	}
	r := rand.New(rand.NewPCG(13, 14))
	for _, kc := range []int{2, 4, 64, 130, 256} {
		for _, zc := range []bool{false, true} {
			a, b := randSlice(r, mr512*kc), randSlice(r, nr512*kc)
			const ldc = nr512 + 3
			c1 := randSlice(r, (mr512-1)*ldc+nr512)
			c2 := slices.Clone(c1)
			micro512(mr512, nr512, kc, a, 1, mr512, b, nr512, c1, ldc, 0.75, zc)
			gemmPacked512m6n4U2(kc, a, b, c2, ldc, 0.75, zc)
			for i := range c1 {
				if math.Float32bits(c1[i]) != math.Float32bits(c2[i]) {
					t.Fatalf("kc=%d zc=%v: c[%d] = %v unrolled, %v general", kc, zc, i, c2[i], c1[i])
				}
			}
		}
	}
}

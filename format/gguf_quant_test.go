package format

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compactrl/compactrl/internal/testenv"
)

// halfOffsets are the byte offsets of each type's float16 fields in one
// block (the rest of a block is integer codes).
var halfOffsets = map[uint32][]int{
	GGMLTypeQ4_0: {0}, GGMLTypeQ4_1: {0, 2}, GGMLTypeQ5_0: {0}, GGMLTypeQ5_1: {0, 2},
	GGMLTypeQ8_0: {0}, GGMLTypeQ4_K: {0, 2}, GGMLTypeQ5_K: {0, 2}, GGMLTypeQ6_K: {208},
}

// randomBlocks returns n blocks of type t: random codes, and random
// finite float16 scales over their whole range (subnormals and signed
// zeros included), so every product is a number.
func randomBlocks(rng *rand.Rand, t uint32, n int) []byte {
	g := ggmlTypes[t]
	b := make([]byte, n*g.blockBytes)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	for blk := range n {
		for _, off := range halfOffsets[t] {
			h := uint16(rng.UintN(1 << 16))
			if h>>10&0x1f == 0x1f { // Inf or NaN: make it the largest finite exponent
				h &^= 1 << 10
			}
			binary.LittleEndian.PutUint16(b[blk*g.blockBytes+off:], h)
		}
	}
	return b
}

func TestDequantizeHandVectors(t *testing.T) {
	// Q4_0 block: d = 0.5 (0x3800); qs[0] = 0x1F → values 0 and 16 are
	// (15−8)·0.5 = 3.5 and (1−8)·0.5 = −3.5.
	b := make([]byte, 18)
	binary.LittleEndian.PutUint16(b, 0x3800)
	b[2] = 0x1F
	got, err := Dequantize(GGMLTypeQ4_0, b, 32)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 3.5 || got[16] != -3.5 || got[1] != -4 {
		t.Fatalf("Q4_0: got %v", got)
	}
	// Q4_1 block: d = 2 (0x4000), m = −1 (0xBC00); qs[3] = 0x52 → value 3:
	// 2·2 − 1 = 3; value 19: 2·5 − 1 = 9; value 0: −1.
	b = make([]byte, 20)
	binary.LittleEndian.PutUint16(b, 0x4000)
	binary.LittleEndian.PutUint16(b[2:], 0xBC00)
	b[4+3] = 0x52
	if got, _ = Dequantize(GGMLTypeQ4_1, b, 32); got[3] != 3 || got[19] != 9 || got[0] != -1 {
		t.Fatalf("Q4_1: got %v", got)
	}
	// Q8_0 block: d = 0.25, qs[5] = −128 → −32.
	b = make([]byte, 34)
	binary.LittleEndian.PutUint16(b, 0x3400)
	b[2+5] = 0x80
	if got, _ = Dequantize(GGMLTypeQ8_0, b, 32); got[5] != -32 || got[0] != 0 {
		t.Fatalf("Q8_0: got %v", got)
	}
	// Q5_0 block: d = 1; qh bit 20 set, qs[4] high nibble 3 → value 20 is
	// (16+3) − 16 = 3; value 4 (low nibble 0, bit 4 clear) is −16.
	b = make([]byte, 22)
	binary.LittleEndian.PutUint16(b, 0x3C00)
	binary.LittleEndian.PutUint32(b[2:], 1<<20)
	b[6+4] = 0x30
	if got, _ = Dequantize(GGMLTypeQ5_0, b, 32); got[20] != 3 || got[4] != -16 {
		t.Fatalf("Q5_0: got %v", got)
	}
	// Q6_K super-block: d = 1, scale of values 32..47 = 2; value 32 (half
	// 0, group 1: ql[32] low nibble, qh[0] bits 2–3) = 2·((5 | 1<<4) − 32).
	b = make([]byte, 210)
	binary.LittleEndian.PutUint16(b[208:], 0x3C00)
	b[192+2] = 2
	b[32] = 0x05
	b[128] = 1 << 2
	if got, _ = Dequantize(GGMLTypeQ6_K, b, 256); got[32] != 2*float32(21-32) {
		t.Fatalf("Q6_K: value 32 = %v, want %v", got[32], 2*float32(21-32))
	}
}

func TestDequantizeRefusesBadSizes(t *testing.T) {
	if _, err := Dequantize(GGMLTypeQ4_1, make([]byte, 20), 31); err == nil || !strings.Contains(err.Error(), "block of 32") {
		t.Fatalf("31 values of Q4_1: %v", err)
	}
	if _, err := Dequantize(GGMLTypeQ4_1, make([]byte, 19), 32); err == nil || !strings.Contains(err.Error(), "take 20 bytes") {
		t.Fatalf("short Q4_1 block: %v", err)
	}
	if _, err := Dequantize(16, nil, 256); err == nil || !strings.Contains(err.Error(), "ggml type 16 unsupported") {
		t.Fatalf("IQ2_XXS: %v", err)
	}
}

// TestDequantizeMatchesGGUFPackage compares every type's dequantization
// of generated blocks, bit for bit, with the gguf package's
// gguf.quants.dequantize.
func TestDequantizeMatchesGGUFPackage(t *testing.T) {
	py := testenv.MustHaveReference(t, "gguf")
	rng := rand.New(rand.NewPCG(44, 1))
	dir := t.TempDir()
	types := slices.Sorted(func(yield func(uint32) bool) {
		for k := range ggmlTypes {
			if !yield(k) {
				return
			}
		}
	})
	for _, typ := range types {
		g := ggmlTypes[typ]
		t.Run(g.name, func(t *testing.T) {
			raw := randomBlocks(rng, typ, 64*qkK/g.block)
			n := len(raw) / g.blockBytes * g.block
			in, out := filepath.Join(dir, g.name+".in"), filepath.Join(dir, g.name+".out")
			if err := os.WriteFile(in, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(py, "testdata/gguf_dequant.py", "blocks", strconv.Itoa(int(typ)), in, out)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("gguf package: %v\n%s", err, b)
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Dequantize(typ, raw, n)
			if err != nil {
				t.Fatal(err)
			}
			if len(want) != 4*n {
				t.Fatalf("gguf package gave %d bytes for %d values", len(want), n)
			}
			for i, v := range got {
				w := binary.LittleEndian.Uint32(want[4*i:])
				if math.Float32bits(v) != w {
					t.Fatalf("value %d: %v (%#08x), gguf package %v (%#08x)", i, v, math.Float32bits(v), math.Float32frombits(w), w)
				}
			}
		})
	}
}

// TestEncodeMatchesGGUFPackage compares the F16 and BF16 bytes WriteGGUFWith
// stores for float32 values (random, halfway cases, subnormals, the edges
// of F16's range) with the gguf package's gguf.quants.quantize.
func TestEncodeMatchesGGUFPackage(t *testing.T) {
	py := testenv.MustHaveReference(t, "gguf")
	rng := rand.New(rand.NewPCG(45, 1))
	vals := []float32{0, float32(math.Copysign(0, -1)), 1, -2, 1 + 1.0/256, 1 + 3.0/256, 1 + 1.0/2048, 1 + 3.0/2048,
		65504, 65519, 65520, -70000, 6e-8, 3e-8, 1e-40, -1e-45, math.MaxFloat32, -math.MaxFloat32, 3e38}
	for range 4096 {
		vals = append(vals, math.Float32frombits(rng.Uint32()&^(0xff<<23)|uint32(rng.IntN(254)+1)<<23))
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "values.in")
	var raw []byte
	for _, v := range vals {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
	}
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []uint32{GGMLTypeF32, GGMLTypeF16, GGMLTypeBF16} {
		t.Run(GGMLTypeName(typ), func(t *testing.T) {
			out := filepath.Join(dir, GGMLTypeName(typ)+".out")
			cmd := exec.Command(py, "testdata/gguf_dequant.py", "quantize", strconv.Itoa(int(typ)), in, out)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("gguf package: %v\n%s", err, b)
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			for _, v := range vals {
				got = appendAs(got, typ, v)
			}
			if len(got) != len(want) {
				t.Fatalf("%d bytes, gguf package %d", len(got), len(want))
			}
			w := len(got) / len(vals)
			for i, v := range vals {
				if g, r := got[i*w:(i+1)*w], want[i*w:(i+1)*w]; !bytes.Equal(g, r) {
					t.Errorf("%v (%#08x): %x, gguf package %x", v, math.Float32bits(v), g, r)
				}
			}
		})
	}
}

// TestReadGGUFMatchesGGUFPackageOnSmolLM2 dequantizes every tensor of the
// real SmolLM2-135M-Instruct Q4_1 file (Q4_1, Q8_0 and F32 tensors) and
// compares the sha256 of its float32 values with the gguf package's.
func TestReadGGUFMatchesGGUFPackageOnSmolLM2(t *testing.T) {
	path := testenv.MustHaveSmolLM2(t)
	py := testenv.MustHaveReference(t, "gguf")
	out, err := exec.Command(py, "testdata/gguf_dequant.py", "file", path).Output()
	if err != nil {
		t.Fatalf("gguf package: %v", err)
	}
	want := map[string]string{}
	types := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			t.Fatalf("gguf package line %q", sc.Text())
		}
		want[f[0]] = f[2]
		types[f[1]]++
	}
	_, ts, err := ReadGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != len(want) || len(ts) != 272 {
		t.Fatalf("%d tensors, gguf package %d (want 272)", len(ts), len(want))
	}
	for _, tn := range ts {
		b := make([]byte, 4*len(tn.Data))
		for i, v := range tn.Data {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want[tn.Name] {
			t.Errorf("tensor %s: sha256 %s, gguf package %s", tn.Name, got, want[tn.Name])
		}
	}
	t.Logf("%d tensors equal bit for bit; types %v", len(ts), types)
}

// TestFloat32ToHalf: every finite half round-trips; values halfway
// between two halves round to the even one; overflow is Inf.
func TestFloat32ToHalf(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		if h>>10&0x1f == 0x1f {
			continue
		}
		if got := Float32ToHalf(HalfToFloat32(uint16(h))); got != uint16(h) {
			t.Fatalf("half %#04x → %v → %#04x", h, HalfToFloat32(uint16(h)), got)
		}
		next := uint16(h) + 1
		if h&0x7fff == 0x7bff || h == 0x7fff || h == 0xffff {
			continue
		}
		a, b := float64(HalfToFloat32(uint16(h))), float64(HalfToFloat32(next))
		mid := float32((a + b) / 2)
		want := uint16(h)
		if h&1 == 1 {
			want = next
		}
		if got := Float32ToHalf(mid); got != want {
			t.Fatalf("midpoint of %#04x and %#04x (%v): %#04x, want %#04x", h, next, mid, got, want)
		}
	}
	if Float32ToHalf(70000) != 0x7c00 || Float32ToHalf(-70000) != 0xfc00 || Float32ToHalf(float32(math.NaN()))&0x7fff <= 0x7c00 {
		t.Fatal("overflow or NaN")
	}
	if Float32ToHalf(1e-10) != 0 || Float32ToHalf(-1e-10) != 0x8000 {
		t.Fatal("underflow")
	}
}

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The encodings GNU as (binutils 2.40) gives for these operands, Intel
// order dst, src1, src2 (`vdpbf16ps %zmm3,%zmm2,%zmm1` in AT&T syntax).
func TestEncodingVectors(t *testing.T) {
	for _, c := range []struct {
		dst, src1, src2 int
		want            []byte
	}{
		{1, 2, 3, []byte{0x62, 0xf2, 0x6e, 0x48, 0x52, 0xcb}},
		{29, 30, 31, []byte{0x62, 0x02, 0x0e, 0x40, 0x52, 0xef}},
		{8, 17, 0, []byte{0x62, 0x72, 0x76, 0x40, 0x52, 0xc0}},
		{16, 4, 25, []byte{0x62, 0x82, 0x5e, 0x48, 0x52, 0xc1}},
	} {
		if got := vdpbf16ps(c.dst, c.src1, c.src2); !bytes.Equal(got, c.want) {
			t.Errorf("VDPBF16PS zmm%d, zmm%d, zmm%d = % x, want % x", c.dst, c.src1, c.src2, got, c.want)
		}
	}
}

// Every register triple the kernel could use, against GNU as where it is
// installed (it comes with gcc).
func TestEncodingAgainstGNUAs(t *testing.T) {
	as, err := exec.LookPath("as")
	if err != nil {
		t.Skip("GNU as not installed")
	}
	objcopy, err := exec.LookPath("objcopy")
	if err != nil {
		t.Skip("objcopy not installed")
	}
	var src strings.Builder
	var want []byte
	for d := range 32 {
		for s1 := range 32 {
			s2 := (d*7 + s1*13) % 32
			src.WriteString("vdpbf16ps %zmm" + strconv.Itoa(s2) + ", %zmm" + strconv.Itoa(s1) + ", %zmm" + strconv.Itoa(d) + "\n")
			want = append(want, vdpbf16ps(d, s1, s2)...)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.s"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(as, "--64", "-o", filepath.Join(dir, "x.o"), filepath.Join(dir, "x.s")).CombinedOutput(); err != nil {
		t.Fatalf("as: %v %s", err, out)
	}
	if out, err := exec.Command(objcopy, "-O", "binary", "-j", ".text", filepath.Join(dir, "x.o"), filepath.Join(dir, "x.bin")).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v %s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "x.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		for i := 0; i+6 <= len(want); i += 6 {
			if !bytes.Equal(got[i:i+6], want[i:i+6]) {
				t.Fatalf("instruction %d: as gives % x, bf16gen % x", i/6, got[i:i+6], want[i:i+6])
			}
		}
		t.Fatalf("lengths: as %d, bf16gen %d", len(got), len(want))
	}
}

package kernel

import "golang.org/x/sys/cpu"

//go:generate go run ./bf16gen -out kernel_bf16_amd64.s

// bf16TileC is the AVX512_BF16 micro-kernel (kernel_bf16_amd64.s): it adds
// the 6×64 tile of sums over kp pairs of packed A (6 pairs a step) and
// packed B (64 pairs a step), computed as bf16TileGo computes them, to the
// first rows rows of a block of C, C ← C + float32(alpha·s), the columns of
// vector v (16 columns) under bits 16v…16v+15 of masks.
//
//go:noescape
func bf16TileC(kp int, a *uint32, b *uint32, c *float32, ldc int, alpha float32, rows int, masks uint64)

// bf16Native reports whether path p runs bfloat16 products on VDPBF16PS:
// the avx512 path on a CPU with AVX512_BF16 (AMD Zen 4 and later, Intel
// Cooper Lake, Sapphire Rapids and later).
func bf16Native(p *impl) bool { return p == avx512 && cpu.X86.HasAVX512BF16 }

// bf16TileAddOn adds the tile's sums to the first rows rows and w columns
// of the block of C at c (row stride ldc), as bf16AddTile does from a
// scratch tile; acc is that scratch where the path has no direct kernel.
func bf16TileAddOn(p *impl, kp int, a, b []uint32, c []float32, ldc int, alpha float32, rows, w int, acc []float32) {
	if bf16Native(p) && kp > 0 {
		_ = c[(rows-1)*ldc+w-1] // the block is inside C
		masks := uint64(1)<<w - 1
		if w == 64 {
			masks = ^uint64(0)
		}
		bf16TileC(kp, &a[0], &b[0], &c[0], ldc, alpha, rows, masks)
		return
	}
	bf16TileGo(kp, a, b, acc)
	bf16AddTile(c, ldc, alpha, rows, w, acc)
}

// pairs2 writes dst[j] = BF16(lo[j]) | BF16(hi[j])<<16 for j < len(lo):
// 16 at a time in AVX-512 on the avx512 path.
func pairs2(p *impl, dst []uint32, lo, hi []float32) {
	n := 0
	if p == avx512 {
		n = len(lo) &^ 15
		if n > 0 {
			bf16Pairs2(dst[:n], lo[:n], hi[:n])
		}
	}
	pairs2Go(dst[n:len(lo)], lo[n:], hi[n:len(lo)])
}

// pairsAdj writes dst[q] = BF16(x[2q]) | BF16(x[2q+1])<<16 for q <
// len(dst) (the second 0 past the end of x): 8 at a time in AVX-512 on the
// avx512 path.
func pairsAdj(p *impl, dst []uint32, x []float32) {
	n := 0
	if p == avx512 {
		n = min(len(dst), len(x)/2) &^ 7
		if n > 0 {
			bf16PairsAdj(dst[:n], x[:2*n])
		}
	}
	pairsAdjGo(dst[n:], x[2*n:])
}

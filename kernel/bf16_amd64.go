package kernel

import "golang.org/x/sys/cpu"

//go:generate go run ./bf16gen -out kernel_bf16_amd64.s

// bf16Tile is the AVX512_BF16 micro-kernel (kernel_bf16_amd64.s): acc, a
// 6×64 row-major tile, gets the sums over kp pairs of packed A (6 pairs a
// step) and packed B (64 pairs a step), as bf16TileGo computes them.
//
//go:noescape
func bf16Tile(kp int, a *uint32, b *uint32, acc *float32)

// bf16TileC is bf16Tile adding its sums to the first rows rows of a
// 64-column block of C instead: C ← C + float32(alpha·s).
//
//go:noescape
func bf16TileC(kp int, a *uint32, b *uint32, c *float32, ldc int, alpha float32, rows int)

// bf16Native reports whether path p runs bfloat16 products on VDPBF16PS:
// the avx512 path on a CPU with AVX512_BF16 (AMD Zen 4 and later, Intel
// Cooper Lake, Sapphire Rapids and later).
func bf16Native(p *impl) bool { return p == avx512 && cpu.X86.HasAVX512BF16 }

// bf16TileOn runs the tile on path p: VDPBF16PS where bf16Native, else the
// portable emulation, which gives the same bits.
func bf16TileOn(p *impl, kp int, a, b []uint32, acc []float32) {
	if bf16Native(p) && kp > 0 {
		bf16Tile(kp, &a[0], &b[0], &acc[0])
		return
	}
	bf16TileGo(kp, a, b, acc)
}

// bf16TileAddOn adds the tile's sums to the first rows rows of the
// 64-column block of C at c (row stride ldc), as bf16AddTile does from a
// scratch tile; acc is that scratch where the path has no direct kernel.
func bf16TileAddOn(p *impl, kp int, a, b []uint32, c []float32, ldc int, alpha float32, rows int, acc []float32) {
	if bf16Native(p) && kp > 0 {
		bf16TileC(kp, &a[0], &b[0], &c[0], ldc, alpha, rows)
		return
	}
	bf16TileGo(kp, a, b, acc)
	bf16AddTile(c, ldc, alpha, rows, bf16NR, acc)
}

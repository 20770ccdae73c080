//go:build !amd64

package kernel

// bf16Native reports whether path p runs bfloat16 products natively: no
// path outside amd64 does yet.
func bf16Native(p *impl) bool { return false }

func bf16TileAddOn(p *impl, kp int, a, b []uint32, c []float32, ldc int, alpha float32, rows, w int, acc []float32) {
	bf16TileGo(kp, a, b, acc)
	bf16AddTile(c, ldc, alpha, rows, w, acc)
}

func pairs2(p *impl, dst []uint32, lo, hi []float32) { pairs2Go(dst, lo, hi) }

func pairsAdj(p *impl, dst []uint32, x []float32) { pairsAdjGo(dst, x) }

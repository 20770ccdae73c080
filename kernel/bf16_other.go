//go:build !amd64

package kernel

// bf16Native reports whether path p runs bfloat16 products natively: no
// path outside amd64 does yet.
func bf16Native(p *impl) bool { return false }

func bf16TileOn(p *impl, kp int, a, b []uint32, acc []float32) { bf16TileGo(kp, a, b, acc) }

func bf16TileAddOn(p *impl, kp int, a, b []uint32, c []float32, ldc int, alpha float32, rows int, acc []float32) {
	bf16TileGo(kp, a, b, acc)
	bf16AddTile(c, ldc, alpha, rows, bf16NR, acc)
}

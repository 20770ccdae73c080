package kernel

import "fmt"

// Dot returns Σ_i x[i]·y[i]. It panics if len(x) != len(y).
func Dot(x, y []float32) float32 {
	if len(x) != len(y) {
		panic(fmt.Sprintf("kernel.Dot: len(x) = %d != len(y) = %d", len(x), len(y)))
	}
	return active.dot(x, y)
}

// Axpy computes y[i] += alpha·x[i]. It panics if len(x) != len(y).
func Axpy(alpha float32, x, y []float32) {
	if len(x) != len(y) {
		panic(fmt.Sprintf("kernel.Axpy: len(x) = %d != len(y) = %d", len(x), len(y)))
	}
	active.axpy(alpha, x, y)
}

// Scale computes x[i] *= alpha.
func Scale(alpha float32, x []float32) {
	active.scale(alpha, x)
}

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

// ExpShift sets dst[i] = e^(x[i]−shift) and returns Σ_i dst[i]: the exponentials of a softmax row
// (shift = its maximum) and their normaliser in one pass. Arguments x[i]−shift below −87
// (−Inf included: masked scores) give 0, past the float32 range +Inf; the relative error is below
// 1e-6 elsewhere. It panics if len(dst) != len(x).
func ExpShift(dst, x []float32, shift float32) float32 {
	if len(dst) != len(x) {
		panic(fmt.Sprintf("kernel.ExpShift: len(dst) = %d != len(x) = %d", len(dst), len(x)))
	}
	return active.expShift(dst, x, shift)
}

// Sigmoid sets dst[i] = σ(x[i]) = 1/(1 + e^(−x[i])) (the gate of SiLU / SwiGLU), with ExpShift's
// exponential: relative error below 1e-6, exactly 0 and 1 far out. It panics if len(dst) != len(x).
func Sigmoid(dst, x []float32) {
	if len(dst) != len(x) {
		panic(fmt.Sprintf("kernel.Sigmoid: len(dst) = %d != len(x) = %d", len(dst), len(x)))
	}
	active.sigmoid(dst, x)
}

// Max returns max_i x[i], or −Inf when x is empty.
func Max(x []float32) float32 {
	return active.max(x)
}

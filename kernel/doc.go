// Package kernel holds the numeric kernels of the built-in engine: single-precision matrix
// multiplication (Gemm, C = alpha·op(A)·op(B) + beta·C, row-major) and small vector helpers
// (Dot, Axpy, Scale).
//
// Gemm is a blocked driver around a register-blocked micro-kernel: for each kc×nc panel of op(B)
// and mc×kc block of op(A) (cache blocking), both are packed into contiguous strips (alpha folded
// into A), then an mr×nr tile of C is accumulated in registers over kc and added to C. The code
// path is chosen once at start-up from the CPU's features; Path names it.
package kernel

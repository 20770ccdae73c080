package model

import (
	"math"
	"testing"
)

func TestExpf(t *testing.T) {
	worst := 0.0
	for x := -87.0; x <= 88; x += 0.001 {
		got := float64(expf(float32(x)))
		want := math.Exp(float64(float32(x)))
		worst = math.Max(worst, math.Abs(got-want)/want)
	}
	if worst > 3e-7 {
		t.Fatalf("expf relative error %.3g > 3e-7", worst)
	}
	src := []float32{-200, -3, 0, 1.5, 10}
	dst := make([]float32, len(src))
	var want float32
	for _, v := range src {
		want += expf(v - 2)
	}
	if got := expShift(dst, src, 2); got != want || dst[0] != 0 || dst[3] != expf(-0.5) {
		t.Fatalf("expShift sum %g, want %g; %v", got, want, dst)
	}
	if expf(float32(math.Inf(-1))) != 0 || expf(-100) != 0 || !math.IsInf(float64(expf(100)), 1) {
		t.Fatal("expf limits wrong")
	}
}

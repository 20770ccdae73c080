package optim

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func TestScheduleValues(t *testing.T) {
	s := Schedule{Peak: 1e-3, Min: 1e-4, Warmup: 10, Total: 110}
	for _, c := range []struct {
		step int
		want float64
	}{
		{0, 1e-4}, {4, 5e-4}, {9, 1e-3}, {10, 1e-3},
		{60, 1e-4 + 0.9e-3*0.5}, // halfway: cos(π/2) = 0
		{110, 1e-4}, {500, 1e-4},
	} {
		t.Run(fmt.Sprintf("step=%d", c.step), func(t *testing.T) {
			if got := s.LR(c.step); math.Abs(got-c.want) > 1e-12 {
				t.Errorf("LR(%d) = %g, want %g", c.step, got, c.want)
			}
		})
	}
	if got := (Schedule{Peak: 2, Warmup: 0}).LR(7); got != 2 {
		t.Errorf("constant schedule: %g", got)
	}
}

func TestClipGradNorm(t *testing.T) {
	ps := []Param{{Name: "a", Data: make([]float32, 1), Grad: []float32{3}}, {Name: "b", Data: make([]float32, 1), Grad: []float32{4}}}
	if n := ClipGradNorm(ps, 1); n != 5 {
		t.Fatalf("norm %g, want 5", n)
	}
	if math.Abs(float64(ps[0].Grad[0])-0.6) > 1e-6 || math.Abs(float64(ps[1].Grad[0])-0.8) > 1e-6 {
		t.Fatalf("clipped to %v %v, want 0.6 0.8", ps[0].Grad, ps[1].Grad)
	}
	if n := ClipGradNorm(ps, 10); math.Abs(n-1) > 1e-6 || math.Abs(float64(ps[0].Grad[0])-0.6) > 1e-6 {
		t.Fatalf("norm below the cap must not scale: %g %v", n, ps[0].Grad)
	}
}

// reference AdamW in float64, straight from the update equations.
func refAdamW(theta, grads []float64, steps int, lr, b1, b2, eps, wd float64) float64 {
	m, v, th := 0.0, 0.0, theta[0]
	for t := 1; t <= steps; t++ {
		g := grads[t-1]
		m = b1*m + (1-b1)*g
		v = b2*v + (1-b2)*g*g
		mh, vh := m/(1-math.Pow(b1, float64(t))), v/(1-math.Pow(b2, float64(t)))
		th -= lr * (wd*th + mh/(math.Sqrt(vh)+eps))
	}
	return th
}

func TestAdamWMatchesEquations(t *testing.T) {
	grads := []float64{0.5, -0.25, 1.5, 0.1}
	ps := []Param{{Name: "w", Data: []float32{2}, Grad: make([]float32, 1)}, {Name: "norm", Data: []float32{2}, Grad: make([]float32, 1)}}
	o := New(ps, 0.9, 0.95, 1e-8, 0.1, func(n string) bool { return n == "norm" })
	for _, g := range grads {
		ps[0].Grad[0], ps[1].Grad[0] = float32(g), float32(g)
		if err := o.Step(ps, 0.01); err != nil {
			t.Fatal(err)
		}
	}
	if want := refAdamW([]float64{2}, grads, 4, 0.01, 0.9, 0.95, 1e-8, 0.1); math.Abs(float64(ps[0].Data[0])-want) > 1e-6 {
		t.Errorf("decayed: %g, want %g", ps[0].Data[0], want)
	}
	if want := refAdamW([]float64{2}, grads, 4, 0.01, 0.9, 0.95, 1e-8, 0); math.Abs(float64(ps[1].Data[0])-want) > 1e-6 {
		t.Errorf("exempt from decay: %g, want %g", ps[1].Data[0], want)
	}
	// First step with bias correction moves by lr·(wd·θ + sign(g)).
	one := []Param{{Name: "x", Data: []float32{1}, Grad: []float32{-3}}}
	New(one, 0.9, 0.999, 1e-8, 0, nil).Step(one, 0.1)
	if math.Abs(float64(one[0].Data[0])-1.1) > 1e-6 {
		t.Errorf("first step: %g, want 1.1", one[0].Data[0])
	}
}

func TestAdamWStateResume(t *testing.T) {
	mk := func() []Param {
		return []Param{{Name: "a", Data: []float32{1, -1, 0.5}, Grad: make([]float32, 3)}}
	}
	grad := func(ps []Param, s int) {
		for i := range ps[0].Grad {
			ps[0].Grad[i] = float32(math.Sin(float64(s*3 + i)))
		}
	}
	full := mk()
	of := New(full, 0.9, 0.99, 1e-8, 0.01, nil)
	for s := 0; s < 6; s++ {
		grad(full, s)
		of.Step(full, 0.05)
	}
	half := mk()
	oh := New(half, 0.9, 0.99, 1e-8, 0.01, nil)
	for s := 0; s < 3; s++ {
		grad(half, s)
		oh.Step(half, 0.05)
	}
	st := oh.State()
	saved := State{Step: st.Step, Tensors: map[string][]float32{}}
	for k, v := range st.Tensors {
		saved.Tensors[k] = slices.Clone(v)
	}
	resumed := []Param{{Name: "a", Data: slices.Clone(half[0].Data), Grad: make([]float32, 3)}}
	or := New(resumed, 0.9, 0.99, 1e-8, 0.01, nil)
	if err := or.SetState(saved); err != nil {
		t.Fatal(err)
	}
	for s := 3; s < 6; s++ {
		grad(resumed, s)
		or.Step(resumed, 0.05)
	}
	if !slices.Equal(resumed[0].Data, full[0].Data) || or.Steps() != 6 {
		t.Fatalf("resumed %v (step %d), uninterrupted %v", resumed[0].Data, or.Steps(), full[0].Data)
	}
	delete(saved.Tensors, "a.exp_avg")
	if err := or.SetState(saved); err == nil {
		t.Fatal("incomplete state accepted")
	}
	if err := or.Step([]Param{{Name: "b", Data: make([]float32, 3), Grad: make([]float32, 3)}}, 0.1); err == nil {
		t.Fatal("wrong parameter accepted")
	}
}

// After Reset the optimiser steps exactly as a new one on the same weights:
// the first step moves each weight by lr·sign(g) again.
func TestAdamWReset(t *testing.T) {
	ps := []Param{{Name: "x", Data: []float32{1, 2}, Grad: make([]float32, 2)}}
	o := New(ps, 0.9, 0.999, 1e-8, 0, nil)
	for s := range 5 {
		ps[0].Grad[0], ps[0].Grad[1] = 100, float32(-s)
		o.Step(ps, 0.1)
	}
	o.Reset()
	if o.Steps() != 0 {
		t.Fatalf("steps after reset: %d", o.Steps())
	}
	before := slices.Clone(ps[0].Data)
	ps[0].Grad[0], ps[0].Grad[1] = -0.001, 0.001
	o.Step(ps, 0.1)
	for i, want := range []float32{before[0] + 0.1, before[1] - 0.1} {
		if math.Abs(float64(ps[0].Data[i]-want)) > 1e-5 {
			t.Errorf("weight %d after reset: %g, want %g (a fresh first step)", i, ps[0].Data[i], want)
		}
	}
}

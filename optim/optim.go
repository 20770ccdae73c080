// Package optim updates parameters from their gradients: AdamW with
// decoupled weight decay and bias correction, global gradient-norm
// clipping, and a linear warm-up + cosine learning-rate schedule. The
// optimiser state exports to named tensors for checkpoints.
//
// Flow per optimiser step: the caller accumulates gradients into
// Param.Grad, calls ClipGradNorm, then AdamW.Step with Schedule.LR(step).
package optim

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
)

// Param is one parameter tensor and its gradient (same length).
type Param struct {
	Name string
	Data []float32
	Grad []float32
}

// Schedule is a learning rate: linear warm-up from 0 to Peak over Warmup
// steps, then cosine decay to Min at Total steps, Min afterwards:
//
//	lr(s) = Peak·(s+1)/Warmup                                for s < Warmup
//	lr(s) = Min + (Peak−Min)·(1 + cos(π·(s−Warmup)/(Total−Warmup)))/2
//
// Total ≤ Warmup means constant Peak after warm-up.
type Schedule struct {
	Peak, Min     float64
	Warmup, Total int
}

// LR is the learning rate of step s (0-based).
func (c Schedule) LR(s int) float64 {
	if s < c.Warmup {
		return c.Peak * float64(s+1) / float64(c.Warmup)
	}
	if c.Total <= c.Warmup {
		return c.Peak
	}
	if s >= c.Total {
		return c.Min
	}
	f := float64(s-c.Warmup) / float64(c.Total-c.Warmup)
	return c.Min + (c.Peak-c.Min)*(1+math.Cos(math.Pi*f))/2
}

// GradNorm is the global L2 norm √(Σ_p Σ_i g²) over every gradient,
// summed in float64 in parameter order.
func GradNorm(ps []Param) float64 {
	var s float64
	for _, p := range ps {
		for _, g := range p.Grad {
			s += float64(g) * float64(g)
		}
	}
	return math.Sqrt(s)
}

// ClipGradNorm scales every gradient by min(1, maxNorm/‖g‖) and returns
// the norm before clipping. maxNorm ≤ 0 disables clipping.
func ClipGradNorm(ps []Param, maxNorm float64) float64 {
	n := GradNorm(ps)
	if maxNorm > 0 && n > maxNorm {
		f := float32(maxNorm / n)
		for _, p := range ps {
			for i := range p.Grad {
				p.Grad[i] *= f
			}
		}
	}
	return n
}

// AdamW is Adam with decoupled weight decay (Loshchilov & Hutter):
//
//	m ← β1·m + (1−β1)·g,  v ← β2·v + (1−β2)·g²
//	θ ← θ − lr·(wd·θ + (m/(1−β1ᵗ)) / (√(v/(1−β2ᵗ)) + ε))
//
// Weight decay applies to every parameter not exempted at New.
type AdamW struct {
	Beta1, Beta2, Eps, WeightDecay float64
	step                           int
	m, v                           [][]float32
	names                          []string
	decay                          []bool
}

// New returns AdamW for params (sizes fixed from now on). noDecay lists
// names exempt from weight decay (e.g. norm weights); nil exempts nothing.
func New(params []Param, beta1, beta2, eps, weightDecay float64, noDecay func(name string) bool) *AdamW {
	o := &AdamW{Beta1: beta1, Beta2: beta2, Eps: eps, WeightDecay: weightDecay}
	for _, p := range params {
		o.m = append(o.m, make([]float32, len(p.Data)))
		o.v = append(o.v, make([]float32, len(p.Data)))
		o.names = append(o.names, p.Name)
		o.decay = append(o.decay, noDecay == nil || !noDecay(p.Name))
	}
	return o
}

// Steps is the number of updates taken.
func (o *AdamW) Steps() int { return o.step }

// Step applies one update with learning rate lr.
func (o *AdamW) Step(params []Param, lr float64) error {
	if len(params) != len(o.m) {
		return fmt.Errorf("adamw: %d parameters, optimiser built for %d", len(params), len(o.m))
	}
	for i, p := range params {
		if p.Name != o.names[i] || len(p.Data) != len(o.m[i]) || len(p.Grad) != len(p.Data) {
			return fmt.Errorf("adamw: parameter %d is %q (%d values, %d grads), want %q (%d)", i, p.Name, len(p.Data), len(p.Grad), o.names[i], len(o.m[i]))
		}
	}
	o.step++
	b1, b2 := o.Beta1, o.Beta2
	c1 := 1 - math.Pow(b1, float64(o.step))
	c2 := 1 - math.Pow(b2, float64(o.step))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, p := range params {
		wd := 0.0
		if o.decay[i] {
			wd = o.WeightDecay
		}
		m, v := o.m[i], o.v[i]
		const chunk = 1 << 15
		for lo := 0; lo < len(p.Data); lo += chunk {
			hi := min(lo+chunk, len(p.Data))
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				for j := lo; j < hi; j++ {
					g := float64(p.Grad[j])
					mj := b1*float64(m[j]) + (1-b1)*g
					vj := b2*float64(v[j]) + (1-b2)*g*g
					m[j], v[j] = float32(mj), float32(vj)
					th := float64(p.Data[j])
					th -= lr * (wd*th + (mj/c1)/(math.Sqrt(vj/c2)+o.Eps))
					p.Data[j] = float32(th)
				}
			}()
		}
	}
	wg.Wait()
	return nil
}

// State is the optimiser state as named tensors: "NAME.exp_avg" and
// "NAME.exp_avg_sq" per parameter (the moment vectors, shared with the
// optimiser), and the step count.
type State struct {
	Step    int
	Tensors map[string][]float32
}

// Reset zeroes the moments and the step count: the next Step is the first
// of a fresh optimiser (bias correction included), for a new objective on
// the same parameters.
func (o *AdamW) Reset() {
	o.step = 0
	for i := range o.m {
		clear(o.m[i])
		clear(o.v[i])
	}
}

// State exports the state (slices alias the optimiser's).
func (o *AdamW) State() State {
	s := State{Step: o.step, Tensors: make(map[string][]float32, 2*len(o.m))}
	for i, n := range o.names {
		s.Tensors[n+".exp_avg"] = o.m[i]
		s.Tensors[n+".exp_avg_sq"] = o.v[i]
	}
	return s
}

// SetState restores a state exported by State, checking every tensor.
func (o *AdamW) SetState(s State) error {
	if s.Step < 0 {
		return errors.New("adamw state: negative step")
	}
	if len(s.Tensors) != 2*len(o.m) {
		return fmt.Errorf("adamw state: %d tensors, want %d", len(s.Tensors), 2*len(o.m))
	}
	for i, n := range o.names {
		for _, dst := range []struct {
			key string
			buf []float32
		}{{n + ".exp_avg", o.m[i]}, {n + ".exp_avg_sq", o.v[i]}} {
			src, ok := s.Tensors[dst.key]
			if !ok {
				return fmt.Errorf("adamw state: missing %q", dst.key)
			}
			if len(src) != len(dst.buf) {
				return fmt.Errorf("adamw state: %q has %d values, want %d", dst.key, len(src), len(dst.buf))
			}
		}
	}
	for i, n := range o.names {
		copy(o.m[i], s.Tensors[n+".exp_avg"])
		copy(o.v[i], s.Tensors[n+".exp_avg_sq"])
	}
	o.step = s.Step
	return nil
}

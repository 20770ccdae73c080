package model

import "math"

// expf is e^x in float32 with relative error below 3e-7 on the normal
// range: x = n·ln2 + r, |r| ≤ ln2/2 (Cody–Waite split of ln2), e^r by its
// degree-6 Taylor polynomial, scaled by 2^n through the exponent bits.
// Arguments below −87 give 0 (masked attention scores are −Inf).
func expf(x float32) float32 {
	if x < -87 {
		return 0
	}
	if x > 88 {
		return float32(math.Inf(1))
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	t := x * log2e
	var i int32
	if t >= 0 {
		i = int32(t + 0.5)
	} else {
		i = int32(t - 0.5)
	}
	n := float32(i)
	r := x - n*ln2hi - n*ln2lo
	p := 1 + r*(1+r*(0.5+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	return p * math.Float32frombits(uint32(i+127)<<23)
}

// expShift sets dst[i] = e^(src[i] − shift) (as expf) and returns Σ dst[i].
func expShift(dst, src []float32, shift float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	dst = dst[:len(src)]
	var sum float32
	for j, v := range src {
		x := v - shift
		if x < -87 {
			dst[j] = 0
			continue
		}
		x = min(x, 88)
		t := x * log2e
		var i int32
		if t >= 0 {
			i = int32(t + 0.5)
		} else {
			i = int32(t - 0.5)
		}
		n := float32(i)
		r := x - n*ln2hi - n*ln2lo
		p := 1 + r*(1+r*(0.5+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
		e := p * math.Float32frombits(uint32(i+127)<<23)
		dst[j] = e
		sum += e
	}
	return sum
}

package model

import (
	"math"

	"github.com/compactrl/compactrl/kernel"
)

// attendRow computes one causal attention row for one head:
// s_j = scale·(q·k_j), p = softmax(s), out = Σ_j p_j v_j over the n keys
// k_j = k[j·stride : j·stride+len(q)] (v likewise). It returns
// log Σ_j exp(s_j), which lets the backward pass rebuild p.
// scores must hold n floats.
func attendRow(out, q, k, v []float32, stride, n int, scale float32, scores []float32) float32 {
	hd := len(q)
	mx := float32(math.Inf(-1))
	for j := 0; j < n; j++ {
		s := scale * kernel.Dot(q, k[j*stride:j*stride+hd])
		scores[j] = s
		mx = max(mx, s)
	}
	var sum float32
	for j := 0; j < n; j++ {
		e := float32(math.Exp(float64(scores[j] - mx)))
		scores[j] = e
		sum += e
	}
	clear(out)
	inv := 1 / sum
	for j := 0; j < n; j++ {
		kernel.Axpy(scores[j]*inv, v[j*stride:j*stride+hd], out)
	}
	return mx + float32(math.Log(float64(sum)))
}

// attendRowBack back-propagates attendRow given its output o, its
// log-sum-exp and dout: with p_j = exp(s_j − lse), dp_j = dout·v_j,
// ds_j = p_j (dp_j − dout·o), it adds scale·Σ_j ds_j k_j to dq,
// scale·ds_j·q to dk_j and p_j·dout to dv_j.
func attendRowBack(dq, dk, dv, dout, q, k, v, o []float32, lse float32, stride, n int, scale float32) {
	hd := len(q)
	d := kernel.Dot(dout, o)
	for j := 0; j < n; j++ {
		kj := k[j*stride : j*stride+hd]
		vj := v[j*stride : j*stride+hd]
		p := float32(math.Exp(float64(scale*kernel.Dot(q, kj) - lse)))
		ds := p * (kernel.Dot(dout, vj) - d) * scale
		kernel.Axpy(ds, kj, dq)
		kernel.Axpy(ds, q, dk[j*stride:j*stride+hd])
		kernel.Axpy(p, dout, dv[j*stride:j*stride+hd])
	}
}

// packed describes a batch of sequences laid end to end: sequence s
// occupies rows off[s] … off[s]+len[s]−1 of every activation matrix.
type packed struct {
	off, len []int
}

// attention runs causal self-attention over every packed sequence:
// att[N, H·hd] from q[N, H·hd], k, v [N, KV·hd]; lse[N, H] keeps each row's
// log-sum-exp. Work is split per (sequence, kv head) so that GQA groups
// never share an output.
func (m *Model) attention(att, lse, q, k, v []float32, pk packed) {
	cfg := m.Cfg
	hd, H, KV := cfg.HeadDim(), cfg.Heads, cfg.KVHeads
	group := H / KV
	qw, kw := H*hd, KV*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	maxLen := 0
	for _, l := range pk.len {
		maxLen = max(maxLen, l)
	}
	parallel(len(pk.off)*KV, 1, func(lo, hi int) {
		scores := make([]float32, maxLen)
		for t := lo; t < hi; t++ {
			s, g := t/KV, t%KV
			off := pk.off[s]
			kb, vb := k[off*kw+g*hd:], v[off*kw+g*hd:]
			for h := g * group; h < (g+1)*group; h++ {
				for i := 0; i < pk.len[s]; i++ {
					r := off + i
					lse[r*H+h] = attendRow(att[r*qw+h*hd:r*qw+h*hd+hd], q[r*qw+h*hd:r*qw+h*hd+hd], kb, vb, kw, i+1, scale, scores)
				}
			}
		}
	})
}

// attentionBack computes dq (overwritten), dk and dv (overwritten) from
// datt, with the forward's q, k, v, att and lse.
func (m *Model) attentionBack(dq, dk, dv, datt, q, k, v, att, lse []float32, pk packed) {
	cfg := m.Cfg
	hd, H, KV := cfg.HeadDim(), cfg.Heads, cfg.KVHeads
	group := H / KV
	qw, kw := H*hd, KV*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	clear(dq)
	clear(dk)
	clear(dv)
	parallel(len(pk.off)*KV, 1, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			s, g := t/KV, t%KV
			off := pk.off[s]
			kb, vb := k[off*kw+g*hd:], v[off*kw+g*hd:]
			dkb, dvb := dk[off*kw+g*hd:], dv[off*kw+g*hd:]
			for h := g * group; h < (g+1)*group; h++ {
				for i := 0; i < pk.len[s]; i++ {
					r := off + i
					c := r*qw + h*hd
					attendRowBack(dq[c:c+hd], dkb, dvb, datt[c:c+hd], q[c:c+hd], kb, vb, att[c:c+hd], lse[r*H+h], kw, i+1, scale)
				}
			}
		}
	})
}

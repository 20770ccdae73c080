package model

import (
	"math"
	"sync"

	"github.com/compactrl/compactrl/kernel"
)

// packed describes a batch of sequences laid end to end: sequence s
// occupies rows off[s] … off[s]+len[s]−1 of every activation matrix.
type packed struct {
	off, len []int
}

// attnBlock is the number of query rows whose scores are computed by one
// GEMM in the training attention.
const attnBlock = 64

// attention runs causal self-attention over every packed sequence:
// att[N, H·hd] from q[N, H·hd], k, v [N, KV·hd]; lse[N, H] keeps each row's
// log-sum-exp. For each (sequence, head) and block of query rows,
// S = scale·Q Kᵀ over the keys up to the block's last row is one GEMM, then
// a masked row softmax, then O = P V another GEMM.
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
	cost := func(t int) int { return pk.len[t/H] }
	balanced(len(pk.off)*H, cost, func(next func() (int, bool)) {
		S := getScratch(attnBlock * maxLen)
		defer putScratch(S)
		for t, ok := next(); ok; t, ok = next() {
			s, h := t/H, t%H
			off, L := pk.off[s], pk.len[s]
			g := h / group
			kb, vb := k[off*kw+g*hd:], v[off*kw+g*hd:]
			for i0 := 0; i0 < L; i0 += attnBlock {
				nb := min(attnBlock, L-i0)
				c := (off+i0)*qw + h*hd
				attendBlock(att[c:], q[c:], qw, kb, kw, false, vb, kw, hd, nb, i0, scale, S, lse[(off+i0)*H+h:], H)
			}
		}
	})
}

// attendBlock is causal attention of nb query rows of one head at
// positions start … start+nb−1 over the keys and values of positions
// 0 … start+nb−1: S = scale·Q Kᵀ (one GEMM), row softmax masking key
// j > position, O = P V (one GEMM). Values are rows of hd (stride ldv);
// keys too (stride ldk), or with kT hd rows of keys (key j's component i at
// k[i·ldk + j], the Decoder's cache). Row r's log-sum-exp goes to
// lse[r·ldl] when lse is not nil. S is scratch of nb·(start+nb) floats.
//
// A row's output does not depend on nb or on how far past the row's
// position the keys go: both GEMMs are kernel.GemmRowsSerial, whose sums
// along k do not depend on the other rows (keys stored as rows or
// transposed give the same sums), and the zeros of masked keys add
// nothing to P V. So a prompt fed whole, in chunks or one token at a time,
// and the Scorer's blocks of attnBlock rows, give the same numbers.
func attendBlock(out, q []float32, ldq int, k []float32, ldk int, kT bool, v []float32, ldv, hd, nb, start int, scale float32, S, lse []float32, ldl int) {
	nk := start + nb
	kernel.GemmRowsSerial(false, !kT, nb, nk, hd, scale, q, ldq, k, ldk, 0, S, nk)
	for r := 0; r < nb; r++ {
		row := S[r*nk : r*nk+nk]
		valid := start + r + 1
		mx := kernel.Max(row[:valid])
		sum := kernel.ExpShift(row[:valid], row[:valid], mx)
		kernel.Scale(1/sum, row[:valid])
		clear(row[valid:])
		if lse != nil {
			lse[r*ldl] = mx + float32(math.Log(float64(sum)))
		}
	}
	kernel.GemmRowsSerial(false, false, nb, hd, nk, 1, S, nk, v, ldv, 0, out, ldq)
}

// attentionBack computes dq, dk and dv (all overwritten) from datt, with
// the forward's q, k, v, att and lse. Per block of query rows it rebuilds
// P = exp(S − lse), then dP = dO Vᵀ, dS = P ⊙ (dP − rowsum(dO ⊙ O))·scale,
// dQ = dS K, dK += dSᵀ Q, dV += Pᵀ dO. Work is split per (sequence, kv
// head) so that the heads of a GQA group, which share dK and dV, run on
// one goroutine.
func (m *Model) attentionBack(dq, dk, dv, datt, q, k, v, att, lse []float32, pk packed) {
	cfg := m.Cfg
	hd, H, KV := cfg.HeadDim(), cfg.Heads, cfg.KVHeads
	group := H / KV
	qw, kw := H*hd, KV*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	clear(dk)
	clear(dv)
	maxLen := 0
	for _, l := range pk.len {
		maxLen = max(maxLen, l)
	}
	cost := func(t int) int { return pk.len[t/KV] }
	balanced(len(pk.off)*KV, cost, func(next func() (int, bool)) {
		P, dS := getScratch(attnBlock*maxLen), getScratch(attnBlock*maxLen)
		defer putScratch(P)
		defer putScratch(dS)
		for t, ok := next(); ok; t, ok = next() {
			s, g := t/KV, t%KV
			off, L := pk.off[s], pk.len[s]
			kb, vb := k[off*kw+g*hd:], v[off*kw+g*hd:]
			dkb, dvb := dk[off*kw+g*hd:], dv[off*kw+g*hd:]
			for h := g * group; h < (g+1)*group; h++ {
				for i0 := 0; i0 < L; i0 += attnBlock {
					nb := min(attnBlock, L-i0)
					nk := i0 + nb
					c0 := (off+i0)*qw + h*hd
					qb, ob, dob := q[c0:], att[c0:], datt[c0:]
					kernel.GemmSerial(false, true, nb, nk, hd, scale, qb, qw, kb, kw, 0, P, nk)
					kernel.GemmSerial(false, true, nb, nk, hd, 1, dob, qw, vb, kw, 0, dS, nk)
					for r := 0; r < nb; r++ {
						valid := i0 + r + 1
						pr, dr := P[r*nk:r*nk+nk], dS[r*nk:r*nk+nk]
						l := lse[(off+i0+r)*H+h]
						D := kernel.Dot(dob[r*qw:r*qw+hd], ob[r*qw:r*qw+hd])
						kernel.ExpShift(pr[:valid], pr[:valid], l)
						for j, p := range pr[:valid] {
							dr[j] = p * (dr[j] - D) * scale
						}
						clear(pr[valid:])
						clear(dr[valid:])
					}
					kernel.GemmSerial(false, false, nb, hd, nk, 1, dS, nk, kb, kw, 0, dq[c0:], qw)
					kernel.GemmSerial(true, false, nk, hd, nb, 1, dS, nk, qb, qw, 1, dkb, kw)
					kernel.GemmSerial(true, false, nk, hd, nb, 1, P, nk, dob, qw, 1, dvb, kw)
				}
			}
		}
	})
}

var scratchPool sync.Pool

// getScratch returns a reusable buffer of n floats (contents undefined).
func getScratch(n int) []float32 {
	if b, ok := scratchPool.Get().(*[]float32); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]float32, n)
}

func putScratch(b []float32) { scratchPool.Put(&b) }

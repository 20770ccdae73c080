package model

import (
	"errors"
	"fmt"

	"github.com/compactrl/compactrl/kernel"
)

// Seq is one sequence to score. The targets are the positions
// From … len(Tokens)−1: for each, the model predicts Tokens[t] from
// Tokens[:t]. For a segment, Tokens = prompt ⊕ response and
// From = len(prompt), so outputs align with the response.
type Seq struct {
	Tokens []int
	From   int
}

// Output holds, per sequence, one value per target position t (index t−From).
type Output struct {
	LogProbs [][]float64 // policy: log π(Tokens[t] | Tokens[:t]) at temperature 1
	Entropy  [][]float64 // policy: −Σ_v π(v | Tokens[:t]) log π(v | Tokens[:t])
	Values   [][]float64 // critic: V(Tokens[:t]), read from the hidden state of position t−1
}

type layerActs struct {
	// Normed inputs and the SwiGLU product are recomputed in Backward.
	x, r1, q, k, v, lse, att, x2, r2, g, u, sg []float32
}

// Scorer evaluates a model on batches of sequences and back-propagates
// through its last Forward. Its buffers grow to the largest batch seen and
// are reused. A Scorer is not safe for concurrent use; the model's weights
// must not change between Forward and Backward. Several Scorers of one
// model may run Forward or Score at once, but Backward writes the model's
// gradients: one Backward at a time per model.
//
// Memory: Forward keeps about 4·N·Layers·(2·Dim + 2·(Heads+KVHeads)·HeadDim
// + 3·FFN) bytes of activations for N packed positions, plus 8·M·Vocab for
// the log-probabilities of M targets and their gradient. Split large
// batches: gradients accumulate over successive Forward/Backward pairs.
type Scorer struct {
	m *Model

	n       int // packed positions
	pk      packed
	from    []int
	tokens  []int32
	pos     []int32
	targets []int32 // hidden row predicting each target
	tgtTok  []int32
	ready   bool

	acts       []layerActs
	xf, rf, hf []float32
	hg         []float32 // hidden rows of the targets [M, Dim]
	logp       []float32 // policy: [M, Vocab] log-softmax
	vals       []float32 // critic: [M]

	hbuf, abuf []float32 // normed input / SwiGLU output of the layer in work

	dx, dh, dq, dk, dv, datt, dg, du, da, tmp, dlog, scratch []float32
}

// NewScorer returns a Scorer of m.
func (m *Model) NewScorer() *Scorer { return &Scorer{m: m} }

// Model returns the scored model.
func (s *Scorer) Model() *Model { return s.m }

func (s *Scorer) prepare(seqs []Seq, allRows, keep bool) error {
	cfg := s.m.Cfg
	s.ready = false
	s.n = 0
	s.pk.off, s.pk.len, s.from = s.pk.off[:0], s.pk.len[:0], s.from[:0]
	s.tokens, s.pos, s.targets, s.tgtTok = s.tokens[:0], s.pos[:0], s.targets[:0], s.tgtTok[:0]
	if len(seqs) == 0 {
		return errors.New("score: empty batch")
	}
	for i, q := range seqs {
		switch {
		case len(q.Tokens) == 0:
			return fmt.Errorf("score: sequence %d is empty", i)
		case len(q.Tokens) > cfg.MaxSeq:
			return fmt.Errorf("score: sequence %d has %d tokens, more than max_seq %d", i, len(q.Tokens), cfg.MaxSeq)
		case q.From < 1 || q.From > len(q.Tokens):
			return fmt.Errorf("score: sequence %d: From %d outside [1, %d]", i, q.From, len(q.Tokens))
		}
		s.pk.off = append(s.pk.off, s.n)
		s.pk.len = append(s.pk.len, len(q.Tokens))
		s.from = append(s.from, q.From)
		for t, tok := range q.Tokens {
			if tok < 0 || tok >= cfg.Vocab {
				return fmt.Errorf("score: sequence %d token %d = %d outside vocab [0, %d)", i, t, tok, cfg.Vocab)
			}
			s.tokens = append(s.tokens, int32(tok))
			s.pos = append(s.pos, int32(t))
			if allRows {
				s.targets = append(s.targets, int32(s.n+t))
				s.tgtTok = append(s.tgtTok, 0)
			} else if t >= q.From {
				s.targets = append(s.targets, int32(s.n+t-1))
				s.tgtTok = append(s.tgtTok, int32(tok))
			}
		}
		s.n += len(q.Tokens)
	}
	n, d, F := s.n, cfg.Dim, cfg.FFN
	qw, kw := cfg.Heads*cfg.HeadDim(), cfg.KVHeads*cfg.HeadDim()
	if len(s.acts) != cfg.Layers {
		s.acts = make([]layerActs, cfg.Layers)
	}
	layers := 1 // without Backward to come, every layer reuses one set of buffers
	if keep {
		layers = cfg.Layers
	}
	for l := range s.acts[:layers] {
		a := &s.acts[l]
		a.x, a.r1 = grow(a.x, n*d), grow(a.r1, n)
		a.q, a.k, a.v = grow(a.q, n*qw), grow(a.k, n*kw), grow(a.v, n*kw)
		a.lse, a.att = grow(a.lse, n*cfg.Heads), grow(a.att, n*qw)
		a.x2, a.r2 = grow(a.x2, n*d), grow(a.r2, n)
		a.g, a.u, a.sg = grow(a.g, n*F), grow(a.u, n*F), grow(a.sg, n*F)
	}
	M := len(s.targets)
	s.xf, s.rf, s.hf = grow(s.xf, n*d), grow(s.rf, n), grow(s.hf, n*d)
	s.hg = grow(s.hg, M*d)
	if s.m.Value {
		s.vals = grow(s.vals, M)
	} else {
		s.logp = grow(s.logp, M*cfg.Vocab)
	}
	s.tmp = grow(s.tmp, n*max(d, qw))
	s.hbuf, s.abuf = grow(s.hbuf, n*d), grow(s.abuf, n*F)
	return nil
}

// Forward runs the model on seqs and returns the per-target outputs: log-
// probabilities and entropies for a policy, values for a critic.
func (s *Scorer) Forward(seqs []Seq) (*Output, error) {
	if err := s.prepare(seqs, false, true); err != nil {
		return nil, err
	}
	return s.forward(false, true), nil
}

// Score is Forward without keeping the activations for Backward, in about
// 1/Layers of the memory (scoring rollouts for π_old or values).
func (s *Scorer) Score(seqs []Seq) (*Output, error) {
	if err := s.prepare(seqs, false, false); err != nil {
		return nil, err
	}
	return s.forward(false, false), nil
}

// Logits returns the policy's logits at every position of tokens:
// row t scores the token that would follow tokens[:t+1].
func (s *Scorer) Logits(tokens []int) ([][]float32, error) {
	if s.m.Value {
		return nil, errors.New("logits: model is a critic")
	}
	if err := s.prepare([]Seq{{Tokens: tokens, From: 1}}, true, false); err != nil {
		return nil, err
	}
	s.forward(true, false)
	V := s.m.Cfg.Vocab
	rows := make([][]float32, len(tokens))
	for t := range rows {
		rows[t] = append([]float32(nil), s.logp[t*V:t*V+V]...)
	}
	return rows, nil
}

// forward runs the prepared batch; with raw set it stops at the logits,
// with keep it saves every layer's activations for Backward.
func (s *Scorer) forward(raw, keep bool) *Output {
	m, cfg := s.m, s.m.Cfg
	n, d := s.n, cfg.Dim
	x := s.acts[0].x
	for i, tok := range s.tokens {
		copy(x[i*d:i*d+d], m.Embed.Data[int(tok)*d:int(tok)*d+d])
	}
	for l := range m.Layers {
		w, a := &m.Layers[l], &s.acts[0]
		if keep {
			a = &s.acts[l]
		}
		rmsnorm(s.hbuf, a.r1, a.x, w.AttnNorm.Data, n, d, cfg.NormEps)
		m.linear(a.q, s.hbuf, w.Wq, n)
		m.linear(a.k, s.hbuf, w.Wk, n)
		m.linear(a.v, s.hbuf, w.Wv, n)
		m.rope(a.q, s.pos, cfg.Heads, false)
		m.rope(a.k, s.pos, cfg.KVHeads, false)
		m.attention(a.att, a.lse, a.q, a.k, a.v, s.pk)
		copy(a.x2, a.x)
		m.rows(n, d, w.Wo.Shape[1], a.att, w.Wo.Data, 1, a.x2)
		rmsnorm(s.hbuf, a.r2, a.x2, w.MLPNorm.Data, n, d, cfg.NormEps)
		m.linear(a.g, s.hbuf, w.Wg, n)
		m.linear(a.u, s.hbuf, w.Wu, n)
		swiglu(s.abuf, a.sg, a.g, a.u)
		next := s.xf
		switch {
		case l+1 == len(m.Layers):
		case keep:
			next = s.acts[l+1].x
		default:
			next = a.x // consumed: x2 holds the residual stream now
		}
		copy(next, a.x2)
		m.rows(n, d, cfg.FFN, s.abuf, w.Wd.Data, 1, next)
	}
	rmsnorm(s.hf, s.rf, s.xf, m.Norm.Data, n, d, cfg.NormEps)
	for i, r := range s.targets {
		copy(s.hg[i*d:i*d+d], s.hf[int(r)*d:int(r)*d+d])
	}
	M := len(s.targets)
	out := &Output{}
	if m.Value {
		for i := 0; i < M; i++ {
			s.vals[i] = kernel.Dot(s.hg[i*d:i*d+d], m.Score.Data)
		}
		out.Values = s.split(func(i int) float64 { return float64(s.vals[i]) })
	} else {
		V := cfg.Vocab
		m.rows(M, V, d, s.hg, m.headWeight().Data, 0, s.logp)
		if raw {
			return nil
		}
		ent := make([]float64, M)
		parallel(M, 8, func(lo, hi int) {
			e := getScratch(V)
			defer putScratch(e)
			for i := lo; i < hi; i++ {
				row := s.logp[i*V : i*V+V]
				ent[i] = logSoftmax(row, row, e)
			}
		})
		out.LogProbs = s.split(func(i int) float64 { return float64(s.logp[i*V+int(s.tgtTok[i])]) })
		out.Entropy = s.split(func(i int) float64 { return ent[i] })
	}
	s.ready = keep
	return out
}

// split arranges per-target values by sequence.
func (s *Scorer) split(val func(i int) float64) [][]float64 {
	res := make([][]float64, len(s.pk.off))
	i := 0
	for q := range res {
		res[q] = make([]float64, s.pk.len[q]-s.from[q])
		for t := range res[q] {
			res[q][t] = val(i)
			i++
		}
	}
	return res
}

// Backward accumulates into every Param.Grad the gradient of a loss L
// whose derivative with respect to the last Forward's outputs is dOut
// (dL/d log π per target for a policy, dL/dV per target for a critic;
// same shape as Output.LogProbs / Output.Values).
func (s *Scorer) Backward(dOut [][]float64) error {
	if !s.ready {
		return errors.New("backward: no forward pass to differentiate")
	}
	if len(dOut) != len(s.pk.off) {
		return fmt.Errorf("backward: gradient for %d sequences, forward had %d", len(dOut), len(s.pk.off))
	}
	for q := range dOut {
		if want := s.pk.len[q] - s.from[q]; len(dOut[q]) != want {
			return fmt.Errorf("backward: sequence %d: gradient has %d targets, want %d", q, len(dOut[q]), want)
		}
	}
	m, cfg := s.m, s.m.Cfg
	m.EnsureGrads()
	n, d, F := s.n, cfg.Dim, cfg.FFN
	qw, kw := cfg.Heads*cfg.HeadDim(), cfg.KVHeads*cfg.HeadDim()
	M := len(s.targets)
	s.dx, s.dh = grow(s.dx, n*d), grow(s.dh, n*d)
	s.dq, s.dk, s.dv, s.datt = grow(s.dq, n*qw), grow(s.dk, n*kw), grow(s.dv, n*kw), grow(s.datt, n*qw)
	s.dg, s.du, s.da = grow(s.dg, n*F), grow(s.du, n*F), grow(s.da, n*F)
	s.scratch = grow(s.scratch, ((n+normChunk-1)/normChunk)*d)
	flat := make([]float32, 0, M)
	for _, row := range dOut {
		for _, v := range row {
			flat = append(flat, float32(v))
		}
	}

	// Head: gradient at the gathered hidden rows, in s.tmp [M, d].
	dhg := grow(s.tmp, M*d)
	if m.Value {
		for i := 0; i < M; i++ {
			kernel.Axpy(flat[i], s.hg[i*d:i*d+d], m.Score.Grad)
		}
		for i := 0; i < M; i++ {
			row := dhg[i*d : i*d+d]
			clear(row)
			kernel.Axpy(flat[i], m.Score.Data, row)
		}
	} else {
		// d log p_y / d z_v = [v = y] − p_v.
		V := cfg.Vocab
		s.dlog = grow(s.dlog, M*V)
		parallel(M, 8, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				g, lp, dl := flat[i], s.logp[i*V:i*V+V], s.dlog[i*V:i*V+V]
				kernel.ExpShift(dl, lp, 0)
				kernel.Scale(-g, dl)
				dl[s.tgtTok[i]] += g
			}
		})
		head := m.headWeight()
		m.gemm(true, false, V, d, M, 1, s.dlog, V, s.hg, d, 1, head.Grad, d)
		m.gemm(false, false, M, d, V, 1, s.dlog, V, head.Data, d, 0, dhg, d)
	}
	dhf := s.dh
	clear(dhf)
	for i, r := range s.targets {
		copy(dhf[int(r)*d:int(r)*d+d], dhg[i*d:i*d+d])
	}
	clear(s.dx)
	rmsnormBack(s.dx, dhf, s.xf, s.rf, m.Norm, n, d, s.scratch)

	for l := len(m.Layers) - 1; l >= 0; l-- {
		w, a := &m.Layers[l], &s.acts[l]
		swigluApply(s.abuf, a.sg, a.g, a.u)
		m.linearBack(s.da, s.dx, s.abuf, w.Wd, n, false)
		swigluBack(s.dg, s.du, s.da, a.sg, a.g, a.u)
		normApply(s.hbuf, a.x2, a.r2, w.MLPNorm.Data, n, d)
		m.linearBack(s.dh, s.dg, s.hbuf, w.Wg, n, false)
		m.linearBack(s.dh, s.du, s.hbuf, w.Wu, n, true)
		rmsnormBack(s.dx, s.dh, a.x2, a.r2, w.MLPNorm, n, d, s.scratch)

		m.linearBack(s.datt, s.dx, a.att, w.Wo, n, false)
		m.attentionBack(s.dq, s.dk, s.dv, s.datt, a.q, a.k, a.v, a.att, a.lse, s.pk)
		m.rope(s.dq, s.pos, cfg.Heads, true)
		m.rope(s.dk, s.pos, cfg.KVHeads, true)
		normApply(s.hbuf, a.x, a.r1, w.AttnNorm.Data, n, d)
		m.linearBack(s.dh, s.dq, s.hbuf, w.Wq, n, false)
		m.linearBack(s.dh, s.dk, s.hbuf, w.Wk, n, true)
		m.linearBack(s.dh, s.dv, s.hbuf, w.Wv, n, true)
		rmsnormBack(s.dx, s.dh, a.x, a.r1, w.AttnNorm, n, d, s.scratch)
	}
	for i, tok := range s.tokens {
		kernel.Axpy(1, s.dx[i*d:i*d+d], m.Embed.Grad[int(tok)*d:int(tok)*d+d])
	}
	return nil
}

// CrossEntropy is the supervised (SFT) step: it runs Forward on seqs and
// back-propagates L = −(1/M) Σ log π(target), M the number of targets of
// the whole batch, returning L. It needs a policy model.
func (s *Scorer) CrossEntropy(seqs []Seq) (float64, error) {
	if s.m.Value {
		return 0, errors.New("cross-entropy: model is a critic")
	}
	out, err := s.Forward(seqs)
	if err != nil {
		return 0, err
	}
	M := len(s.targets)
	if M == 0 {
		return 0, errors.New("cross-entropy: batch has no targets")
	}
	var loss float64
	grad := make([][]float64, len(out.LogProbs))
	for q, row := range out.LogProbs {
		grad[q] = make([]float64, len(row))
		for t, lp := range row {
			loss -= lp
			grad[q][t] = -1 / float64(M)
		}
	}
	return loss / float64(M), s.Backward(grad)
}

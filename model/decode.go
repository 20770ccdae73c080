package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"

	"github.com/compactrl/compactrl/infer"
	"github.com/compactrl/compactrl/kernel"
)

// Finished is a completed request of a Decoder.
type Finished struct {
	ID         int
	Completion infer.Completion
}

type decSeq struct {
	id    int
	req   infer.Request
	limit int // tokens it may still produce in total
	// Per layer KV cache for capacity positions: kc holds the keys
	// transposed, [KVHeads·HeadDim, capacity] (component c of position t at
	// c·capacity + t), so that Q·Kᵀ reads them in place; vc the values as
	// rows, [capacity, KVHeads·HeadDim].
	kc, vc   [][]float32
	capacity int
	n        int   // cached positions
	pending  []int // tokens to feed at the next step
	stop     map[int]bool
	rng      *rand.Rand
	out      infer.Completion
}

// Decoder samples continuations of many prompts at once with a KV cache per
// sequence. Each Step feeds, in one batched forward, the whole prompt of
// every sequence added since the last Step (prefill) and the last sampled
// token of every running one (decode), then samples one token for each.
// Sequences may join between Steps and leave when they finish, so a caller
// can run continuous batching on top. Not safe for concurrent use.
//
// Log-probabilities returned are those of the distribution each token was
// drawn from (docs/design.md, "Recorded log-probabilities"): softmax(z/T)
// restricted to the top-p nucleus and renormalised. At Temperature 1 and
// TopP 0 or 1 that is the model's own distribution, computed exactly as
// Scorer.Forward computes π_θ for PPO. Temperature 0 samples greedily (the
// first maximal logit) and returns log softmax(z).
//
// Batch invariance: a sequence's tokens and log-probabilities depend only
// on the model and its request (prompt, sampling settings, Seed), to the
// bit, not on which other sequences share its forwards, how its prompt is
// split into prefill chunks, or whether a prefix came from the cache.
// Every step of the forward is row-local except the products, and those
// run kernels whose rows do not depend on the row count: the projections
// multiply by weights packed once (kernel.GemmPacked), attention uses
// kernel.GemmRowsSerial (attendBlock). The Scorer computes each row the
// same way, so Scorer.Forward gives the sampled tokens the log-
// probabilities the Decoder reported, also to the bit. The cost is a
// packed copy of the weights per Decoder (about their size).
type Decoder struct {
	m      *Model
	nextID int
	active []*decSeq
	layers []packedLayer   // the layers' projections, packed
	head   *kernel.PackedB // the language-model head, packed

	tokens, pos           []int32
	rows                  []int // first packed row of each sequence
	x, h, r, q, k         []float32
	att, tmp, g, u, a, sg []float32
	qkv, gu               []float32 // the fused products' outputs (v is read from qkv's rows)
	last, lastH, lastR    []float32
	logits                []float32
	probs                 [][]float32
	order                 [][]int32

	batch        []*decSeq // sequences fed by the last forward
	feed         []int     // tokens each fed
	prefillChunk int

	threads int // workers of a forward; 0: runtime.GOMAXPROCS (tests set it)

	stats     DecoderStats
	pool      []*prefixEntry // KV caches of finished sequences
	poolBytes int64
	poolLimit int64
	clock     uint64
}

// attnParallelFlops is the decode step's attention work (flops) below which
// its heads run on the calling goroutine.
const attnParallelFlops = 1 << 20

// packedLayer holds one layer's projection weights packed for
// kernel.GemmPacked (y = x·Wᵀ). The products that read the same input
// are one: qkv packs [Wq; Wk; Wv] and gu [Wg; Wu], so a step makes four
// products a layer instead of seven (each a split over the cores, which
// at batch 1 costs as much as a small product's reads). A column of a
// packed product does not depend on the columns beside it, so q, k, v,
// g and u are the same bits as from their own products.
type packedLayer struct {
	qkv, o, gu, d *kernel.PackedB
}

// prefixEntry is the KV cache of a finished sequence: positions
// 0 … len(tokens)−1, laid out as decSeq's (keys transposed with row stride
// capacity).
type prefixEntry struct {
	tokens   []int
	kc, vc   [][]float32
	capacity int
	bytes    int64
	used     uint64
}

// SetPrefixCache keeps the KV caches of finished sequences, up to limit
// bytes (least recently used dropped first; limit ≤ 0 disables and frees
// the cache). A new prompt that starts with a cached sequence's tokens
// copies those positions instead of recomputing them: an agent's next
// turn re-sends its previous context. Keys and values of a position depend
// only on the tokens up to it (bit for bit: see Decoder), so the result is
// the recomputation's.
func (d *Decoder) SetPrefixCache(limit int64) {
	d.poolLimit = limit
	d.evict()
}

// DecoderStats counts a Decoder's work.
type DecoderStats struct {
	Steps     int // forwards run
	Fed       int // positions computed (prefill and decode)
	Reused    int // prompt positions copied from the prefix cache
	Generated int // tokens sampled
}

// Stats returns the counters so far.
func (d *Decoder) Stats() DecoderStats { return d.stats }

// PrefixCacheBytes is the memory held by cached prefixes.
func (d *Decoder) PrefixCacheBytes() int64 { return d.poolBytes }

func (d *Decoder) evict() {
	for len(d.pool) > 0 && (d.poolLimit <= 0 || d.poolBytes > d.poolLimit) {
		old := 0
		for i, e := range d.pool {
			if e.used < d.pool[old].used {
				old = i
			}
		}
		d.poolBytes -= d.pool[old].bytes
		d.pool = slices.Delete(d.pool, old, old+1)
	}
}

// keepPrefix stores a finished sequence's cache. Entries that are
// prefixes of it become redundant and are dropped.
func (d *Decoder) keepPrefix(s *decSeq) {
	if d.poolLimit <= 0 || s.kc == nil || s.n == 0 {
		return
	}
	toks := append(slices.Clone(s.req.Prompt), s.out.Tokens...)[:s.n]
	kw := d.m.Cfg.KVHeads * d.m.Cfg.HeadDim()
	// The buffers were sized for the whole request: count what they hold.
	e := &prefixEntry{tokens: toks, kc: s.kc, vc: s.vc, capacity: s.capacity, bytes: int64(2*len(s.kc)*cap(s.kc[0])) * 4}
	for l := range e.vc {
		e.vc[l] = e.vc[l][: s.n*kw : s.n*kw]
	}
	d.pool = slices.DeleteFunc(d.pool, func(o *prefixEntry) bool {
		if len(o.tokens) <= len(toks) && slices.Equal(o.tokens, toks[:len(o.tokens)]) {
			d.poolBytes -= o.bytes
			return true
		}
		return false
	})
	d.clock++
	e.used = d.clock
	d.pool = append(d.pool, e)
	d.poolBytes += e.bytes
	d.evict()
}

// reusePrefix copies into s's fresh cache the longest cached prefix of its
// prompt (leaving at least one prompt token to feed).
func (d *Decoder) reusePrefix(s *decSeq) {
	p := s.req.Prompt
	var best *prefixEntry
	bestLen := 0
	for _, e := range d.pool {
		n := min(len(e.tokens), len(p)-1)
		l := 0
		for l < n && e.tokens[l] == p[l] {
			l++
		}
		if l > bestLen {
			best, bestLen = e, l
		}
	}
	if best == nil {
		return
	}
	kw := d.m.Cfg.KVHeads * d.m.Cfg.HeadDim()
	for l := range s.kc {
		for c := range kw {
			copy(s.kc[l][c*s.capacity:c*s.capacity+bestLen], best.kc[l][c*best.capacity:c*best.capacity+bestLen])
		}
		copy(s.vc[l], best.vc[l][:bestLen*kw])
	}
	d.clock++
	best.used = d.clock
	s.n = bestLen
	s.pending = append(s.pending[:0], p[bestLen:]...)
	d.stats.Reused += bestLen
}

// NewDecoder returns a Decoder over m. m must be a policy, and its weights
// must not change while the Decoder is in use: it packs the projections
// once, and its prefix cache holds keys and values computed with them.
func (m *Model) NewDecoder() *Decoder {
	d := &Decoder{m: m}
	if m.Value {
		return d // Add refuses every request
	}
	// pack packs the rows of ws, stacked (all of ws[0]'s, then ws[1]'s, …).
	pack := func(ws ...*Param) *kernel.PackedB {
		rows, cols, data := 0, ws[0].Shape[1], ws[0].Data
		for i, w := range ws {
			rows += w.Shape[0]
			if i > 0 {
				data = append(slices.Clip(data), w.Data...)
			}
		}
		if m.BF16 {
			return kernel.PackBBF16(true, rows, cols, data, cols)
		}
		return kernel.PackB(true, rows, cols, data, cols)
	}
	d.layers = make([]packedLayer, len(m.Layers))
	// One task a layer, and the head: packing is a copy, the same whoever does it.
	parallel(len(m.Layers)+1, 1, func(lo, hi int) {
		for l := lo; l < hi; l++ {
			if l == len(m.Layers) {
				d.head = pack(m.headWeight())
				continue
			}
			w := &m.Layers[l]
			d.layers[l] = packedLayer{qkv: pack(w.Wq, w.Wk, w.Wv), o: pack(w.Wo), gu: pack(w.Wg, w.Wu), d: pack(w.Wd)}
		}
	})
	return d
}

// Active is the number of unfinished sequences.
func (d *Decoder) Active() int { return len(d.active) }

// Add queues req and returns its id (reported in Finished). The number of
// tokens is capped so that prompt plus completion fit in MaxSeq.
func (d *Decoder) Add(req infer.Request) (int, error) {
	cfg := d.m.Cfg
	switch {
	case d.m.Value:
		return 0, errors.New("decoder: model is a critic")
	case len(req.Prompt) == 0:
		return 0, errors.New("decoder: empty prompt")
	case len(req.Prompt) >= cfg.MaxSeq:
		return 0, fmt.Errorf("decoder: prompt of %d tokens leaves no room in max_seq %d", len(req.Prompt), cfg.MaxSeq)
	case req.MaxTokens < 0:
		return 0, fmt.Errorf("decoder: max_tokens %d is negative", req.MaxTokens)
	case req.Temperature < 0 || math.IsNaN(req.Temperature):
		return 0, fmt.Errorf("decoder: temperature %g is negative", req.Temperature)
	case req.TopP < 0 || req.TopP > 1 || math.IsNaN(req.TopP):
		return 0, fmt.Errorf("decoder: top_p %g outside [0, 1]", req.TopP)
	}
	for i, t := range req.Prompt {
		if t < 0 || t >= cfg.Vocab {
			return 0, fmt.Errorf("decoder: prompt token %d = %d outside vocab [0, %d)", i, t, cfg.Vocab)
		}
	}
	s := &decSeq{
		id:      d.nextID,
		req:     req,
		limit:   min(req.MaxTokens, cfg.MaxSeq-len(req.Prompt)),
		pending: slices.Clone(req.Prompt),
		stop:    make(map[int]bool, len(req.Stop)),
		rng:     rand.New(rand.NewPCG(uint64(req.Seed), 0x73616d706c6572)),
	}
	for _, t := range req.Stop {
		s.stop[t] = true
	}
	d.nextID++
	d.active = append(d.active, s)
	return s.id, nil
}

// Remove drops an unfinished sequence (e.g. its caller gave up) and
// reports whether it was active.
func (d *Decoder) Remove(id int) bool {
	for i, s := range d.active {
		if s.id == id {
			d.active = slices.Delete(d.active, i, i+1)
			return true
		}
	}
	return false
}

// Model is the model the Decoder samples from.
func (d *Decoder) Model() *Model { return d.m }

// SetPrefillChunk bounds the prompt tokens fed per Step, summed over the
// sequences still prefilling (n ≤ 0: no bound), so that long new prompts
// do not stall the running sequences' decoding: a prompt is then fed over
// several Steps, and samples its first token after the last chunk.
func (d *Decoder) SetPrefillChunk(n int) { d.prefillChunk = n }

// Step advances every active sequence by one token (or one chunk of its
// prompt) and returns those that finished (a stop token or their token
// limit).
func (d *Decoder) Step() []Finished {
	var done []Finished
	// Requests with no room for a token finish without a forward.
	keep := d.active[:0]
	for _, s := range d.active {
		if s.limit <= 0 {
			s.out.FinishReason = infer.FinishLength
			done = append(done, Finished{s.id, s.out})
			continue
		}
		keep = append(keep, s)
	}
	clear(d.active[len(keep):])
	d.active = keep
	if len(d.active) == 0 {
		return done
	}
	d.forward()
	V := d.m.Cfg.Vocab
	for len(d.probs) < len(d.batch) {
		d.probs = append(d.probs, make([]float32, V))
		d.order = append(d.order, make([]int32, V))
	}
	toks := make([]int, len(d.batch))
	lps := make([]float64, len(d.batch))
	parallel(len(d.batch), 4, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			s := d.batch[i]
			if len(s.pending) > 0 {
				continue // prompt not fully fed yet
			}
			toks[i], lps[i] = sampleToken(d.logits[i*V:i*V+V], s.req.Temperature, s.req.TopP, s.rng, d.probs[i], d.order[i])
		}
	})
	finished := false
	for i, s := range d.batch {
		if len(s.pending) > 0 {
			continue
		}
		d.stats.Generated++
		s.out.Tokens = append(s.out.Tokens, toks[i])
		s.out.Logprobs = append(s.out.Logprobs, lps[i])
		switch {
		case s.stop[toks[i]]:
			s.out.FinishReason = infer.FinishStop
		case len(s.out.Tokens) >= s.limit:
			s.out.FinishReason = infer.FinishLength
		default:
			s.pending = append(s.pending[:0], toks[i])
			continue
		}
		d.keepPrefix(s)
		done = append(done, Finished{s.id, s.out})
		finished = true
	}
	if finished {
		keep = d.active[:0]
		for _, s := range d.active {
			if s.out.FinishReason == "" {
				keep = append(keep, s)
			}
		}
		clear(d.active[len(keep):])
		d.active = keep
	}
	return done
}

// Generate runs reqs to completion in one batch and returns their
// completions in order.
func (m *Model) Generate(ctx context.Context, reqs []infer.Request) ([]infer.Completion, error) {
	d := m.NewDecoder()
	idx := make(map[int]int, len(reqs))
	for i, r := range reqs {
		id, err := d.Add(r)
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		idx[id] = i
	}
	out := make([]infer.Completion, len(reqs))
	for len(idx) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, f := range d.Step() {
			out[idx[f.ID]] = f.Completion
			delete(idx, f.ID)
		}
	}
	return out, nil
}

// forward feeds pending tokens through the model — all of them for a
// decoding sequence, up to the prefill chunk for prompts — appending their
// keys and values to the caches. It leaves the sequences fed in d.batch
// and in d.logits the logits after each one's last fed token.
func (d *Decoder) forward() {
	m, cfg := d.m, d.m.Cfg
	dim, hd, F := cfg.Dim, cfg.HeadDim(), cfg.FFN
	qw, kw := cfg.Heads*hd, cfg.KVHeads*hd
	d.tokens, d.pos, d.rows = d.tokens[:0], d.pos[:0], d.rows[:0]
	d.batch, d.feed = d.batch[:0], d.feed[:0]
	budget := d.prefillChunk
	for _, s := range d.active {
		if s.kc == nil {
			// Rounded up to whole units of kernel.InPlaceColumns, so that Q·Kᵀ reads the
			// keys in place (kernel.GemmRowsSerial reads a key row to the end of its unit).
			u := kernel.InPlaceColumns
			s.capacity = (len(s.req.Prompt) + s.limit + u - 1) / u * u
			s.kc, s.vc = make([][]float32, cfg.Layers), make([][]float32, cfg.Layers)
			for l := range s.kc {
				s.kc[l], s.vc[l] = make([]float32, s.capacity*kw), make([]float32, s.capacity*kw)
			}
			d.reusePrefix(s)
		}
		f := len(s.pending)
		if len(s.out.Tokens) == 0 && d.prefillChunk > 0 { // still in its prompt
			if budget <= 0 {
				continue
			}
			f = min(f, budget)
			budget -= f
		}
		d.batch = append(d.batch, s)
		d.feed = append(d.feed, f)
		d.rows = append(d.rows, len(d.tokens))
		for i, t := range s.pending[:f] {
			d.tokens = append(d.tokens, int32(t))
			d.pos = append(d.pos, int32(s.n+i))
		}
	}
	n := len(d.tokens)
	d.stats.Steps++
	d.stats.Fed += n
	d.x, d.h, d.r = grow(d.x, n*dim), grow(d.h, n*dim), grow(d.r, n)
	d.q, d.k, d.att = grow(d.q, n*qw), grow(d.k, n*kw), grow(d.att, n*qw)
	d.g, d.u, d.a, d.sg = grow(d.g, n*F), grow(d.u, n*F), grow(d.a, n*F), grow(d.sg, n*F)
	d.qkv, d.gu = grow(d.qkv, n*(qw+2*kw)), grow(d.gu, n*2*F)
	for i, tok := range d.tokens {
		copy(d.x[i*dim:i*dim+dim], m.Embed.Data[int(tok)*dim:int(tok)*dim+dim])
	}
	B := len(d.batch)
	d.last, d.lastH, d.lastR = grow(d.last, B*dim), grow(d.lastH, B*dim), grow(d.lastR, B)
	d.logits = grow(d.logits, B*cfg.Vocab)
	workers := d.threads
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	groups := d.groups(workers)
	if len(groups) == 1 {
		d.forwardRange(0, B, workers)
		return
	}
	kernel.Parallel(len(groups), func(i int) { d.forwardRange(groups[i][0], groups[i][1], 1) })
}

// groups splits d.batch into at most workers contiguous ranges of
// sequences of about equal work, each then run through the whole forward
// by its own goroutine (one fork and join a step, where splitting every
// product and norm of a decode step would cost one each). When one
// sequence alone holds more than its share of the rows (a long prompt
// being prefilled), it returns the whole batch as one range, whose
// products then split by columns instead. Either way every row is
// computed by the same operations (the kernels' rows do not depend on the
// row count), so the split never changes a result.
func (d *Decoder) groups(workers int) [][2]int {
	B := len(d.batch)
	total, most := 0, 0
	for _, f := range d.feed {
		total += f
		most = max(most, f)
	}
	workers = min(workers, B)
	if workers <= 1 || most*workers > total+total/4 {
		return [][2]int{{0, B}}
	}
	var out [][2]int
	lo, acc := 0, 0
	for i, f := range d.feed {
		acc += f
		// Close the group once it holds its share of the rows seen so far.
		if len(out) < workers-1 && acc*workers >= total*(len(out)+1) {
			out = append(out, [2]int{lo, i + 1})
			lo = i + 1
		}
	}
	if lo < B {
		out = append(out, [2]int{lo, B})
	}
	return out
}

// forwardRange runs sequences lo … hi−1 of d.batch (rows d.rows[lo] on)
// through every layer and the head, on at most workers goroutines: the
// logits of sequence i go to d.logits[i·Vocab:]. Ranges touch disjoint
// rows of the activations, caches and logits, so several may run at once.
func (d *Decoder) forwardRange(lo, hi, workers int) {
	m, cfg := d.m, d.m.Cfg
	dim, hd, F := cfg.Dim, cfg.HeadDim(), cfg.FFN
	qw, kw := cfg.Heads*hd, cfg.KVHeads*hd
	r0 := d.rows[lo]
	r1 := len(d.tokens)
	if hi < len(d.batch) {
		r1 = d.rows[hi]
	}
	n := r1 - r0
	batch, feed := d.batch[lo:hi], d.feed[lo:hi]
	x, h, rr := d.x[r0*dim:r1*dim], d.h[r0*dim:r1*dim], d.r[r0:r1]
	q, k, att := d.q[r0*qw:r1*qw], d.k[r0*kw:r1*kw], d.att[r0*qw:r1*qw]
	gg, u, a, sg := d.g[r0*F:r1*F], d.u[r0*F:r1*F], d.a[r0*F:r1*F], d.sg[r0*F:r1*F]
	QKV := qw + 2*kw
	qkv, gu := d.qkv[r0*QKV:r1*QKV], d.gu[r0*2*F:r1*2*F]
	pos := d.pos[r0:r1]
	gemm := kernel.GemmPacked
	if workers <= 1 {
		gemm = kernel.GemmPackedSerial
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	group := cfg.Heads / cfg.KVHeads
	maxCtx := 0
	for i, s := range batch {
		maxCtx = max(maxCtx, s.n+feed[i])
	}
	H := cfg.Heads
	cost := func(t int) int { return feed[t/H] * (batch[t/H].n + feed[t/H]) }
	// Attention's multiply-adds this step (Q·Kᵀ and P·V, 2·hd a query-key
	// pair): below about 6 µs of one core it stays on this goroutine, as
	// kernel.Gemm's small products do (one sequence's step: 9 heads over
	// 100 positions of SmolLM2 is 0.2 Mflop, less than two goroutines cost).
	attnWorkers, attnFlops := workers, 0
	for t := range len(batch) * H {
		attnFlops += 4 * hd * cost(t)
	}
	if attnFlops < attnParallelFlops {
		attnWorkers = 1
	}
	for l := range m.Layers {
		w, pw := &m.Layers[l], &d.layers[l]
		rmsnormOn(workers, h, rr, x, w.AttnNorm.Data, n, dim, cfg.NormEps)
		gemm(n, 1, h, dim, pw.qkv, 0, qkv, QKV)
		for r := range n {
			row := qkv[r*QKV : (r+1)*QKV]
			copy(q[r*qw:(r+1)*qw], row[:qw])
			copy(k[r*kw:(r+1)*kw], row[qw:qw+kw])
		}
		m.ropeOn(workers, q, pos, H, false)
		m.ropeOn(workers, k, pos, cfg.KVHeads, false)
		for i, s := range batch {
			ri, f := d.rows[lo+i]-r0, feed[i]
			kt := s.kc[l]
			for r := range f {
				for c, val := range k[(ri+r)*kw : (ri+r+1)*kw] {
					kt[c*s.capacity+s.n+r] = val
				}
			}
			for r := range f { // v goes from the product's rows straight into the cache
				copy(s.vc[l][(s.n+r)*kw:(s.n+r+1)*kw], qkv[(ri+r)*QKV+qw+kw:(ri+r+1)*QKV])
			}
		}
		balancedOn(attnWorkers, len(batch)*H, cost, func(next func() (int, bool)) {
			S := getScratch(attnBlock * maxCtx)
			defer putScratch(S)
			for t, ok := next(); ok; t, ok = next() {
				i, hh := t/H, t%H
				s, f := batch[i], feed[i]
				g := hh / group
				kb, vb := s.kc[l][g*hd*s.capacity:], s.vc[l][g*hd:]
				for i0 := 0; i0 < f; i0 += attnBlock {
					nb := min(attnBlock, f-i0)
					c := (d.rows[lo+i]-r0+i0)*qw + hh*hd
					attendBlock(att[c:], q[c:], qw, kb, s.capacity, true, vb, kw, hd, nb, s.n+i0, scale, S, nil, 0)
				}
			}
		})
		gemm(n, 1, att, qw, pw.o, 1, x, dim)
		rmsnormOn(workers, h, rr, x, w.MLPNorm.Data, n, dim, cfg.NormEps)
		gemm(n, 1, h, dim, pw.gu, 0, gu, 2*F)
		for r := range n {
			copy(gg[r*F:(r+1)*F], gu[r*2*F:r*2*F+F])
			copy(u[r*F:(r+1)*F], gu[r*2*F+F:(r+1)*2*F])
		}
		swigluOn(workers, a, sg, gg, u)
		gemm(n, 1, a, F, pw.d, 1, x, dim)
	}
	last, lastH, lastR := d.last[lo*dim:hi*dim], d.lastH[lo*dim:hi*dim], d.lastR[lo:hi]
	for i, s := range batch {
		f := feed[i]
		r := d.rows[lo+i] - r0 + f - 1
		copy(last[i*dim:i*dim+dim], x[r*dim:r*dim+dim])
		s.n += f
		s.pending = s.pending[f:]
	}
	rmsnormOn(workers, lastH, lastR, last, m.Norm.Data, hi-lo, dim, cfg.NormEps)
	V := cfg.Vocab
	gemm(hi-lo, 1, lastH, dim, d.head, 0, d.logits[lo*V:hi*V], V)
}

// sampleToken draws a token from softmax(z/T), truncated to the smallest
// set of most likely tokens whose mass reaches topP when 0 < topP < 1, and
// returns it with its log-probability under softmax(z) (temperature 1,
// untruncated), computed as the Scorer computes it (logSumExp). T = 0
// picks argmax z. probs and order are scratch of len(z).
func sampleToken(z []float32, temp, topP float64, rng *rand.Rand, probs []float32, order []int32) (int, float64) {
	best := 0
	for i, v := range z {
		if v > z[best] {
			best = i
		}
	}
	mx := float64(z[best])
	lse, _ := logSumExp(z, probs)
	if temp == 0 {
		return best, float64(z[best] - lse)
	}
	var total float64
	for i, v := range z {
		p := math.Exp((float64(v) - mx) / temp)
		probs[i] = float32(p)
		total += p
	}
	tok := best   // if rounding leaves u ≥ 0 after the walk
	mass := total // of the distribution the token is drawn from
	nucleus := topP > 0 && topP < 1
	if nucleus {
		for i := range order {
			order[i] = int32(i)
		}
		slices.SortFunc(order, func(a, b int32) int {
			switch {
			case probs[a] > probs[b]:
				return -1
			case probs[a] < probs[b]:
				return 1
			}
			return int(a - b)
		})
		var kept float64
		k := 0
		for k < len(order) {
			kept += float64(probs[order[k]])
			k++
			if kept >= topP*total {
				break
			}
		}
		mass = kept
		u := rng.Float64() * kept
		tok = int(order[k-1])
		for _, i := range order[:k] {
			u -= float64(probs[i])
			if u < 0 {
				tok = int(i)
				break
			}
		}
	} else {
		u := rng.Float64() * total
		for i, p := range probs {
			u -= float64(p)
			if u < 0 {
				tok = i
				break
			}
		}
	}
	if temp == 1 && !nucleus {
		return tok, float64(z[tok] - lse)
	}
	return tok, (float64(z[tok])-mx)/temp - math.Log(mass)
}

package format

import (
	"encoding/binary"
	"fmt"
	"math"
)

// GGML tensor types (ggml.h: GGML_TYPE_*) that ReadGGUF dequantizes.
const (
	GGMLTypeF32  = 0
	GGMLTypeF16  = 1
	GGMLTypeQ4_0 = 2
	GGMLTypeQ4_1 = 3
	GGMLTypeQ5_0 = 6
	GGMLTypeQ5_1 = 7
	GGMLTypeQ8_0 = 8
	GGMLTypeQ4_K = 12
	GGMLTypeQ5_K = 13
	GGMLTypeQ6_K = 14
	GGMLTypeBF16 = 30
)

// qkK is QK_K, the super-block size of the k-quants.
const qkK = 256

// ggmlType is one tensor type's block layout: block values and bytes,
// and the dequantization of one block into out (len block).
type ggmlType struct {
	name       string
	block      int
	blockBytes int
	dequant    func(out []float32, b []byte)
}

var ggmlTypes = map[uint32]ggmlType{
	GGMLTypeF32:  {"F32", 1, 4, func(o []float32, b []byte) { o[0] = math.Float32frombits(binary.LittleEndian.Uint32(b)) }},
	GGMLTypeF16:  {"F16", 1, 2, func(o []float32, b []byte) { o[0] = half(b) }},
	GGMLTypeBF16: {"BF16", 1, 2, func(o []float32, b []byte) { o[0] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16) }},
	GGMLTypeQ4_0: {"Q4_0", 32, 18, dequantQ4_0},
	GGMLTypeQ4_1: {"Q4_1", 32, 20, dequantQ4_1},
	GGMLTypeQ5_0: {"Q5_0", 32, 22, dequantQ5_0},
	GGMLTypeQ5_1: {"Q5_1", 32, 24, dequantQ5_1},
	GGMLTypeQ8_0: {"Q8_0", 32, 34, dequantQ8_0},
	GGMLTypeQ4_K: {"Q4_K", qkK, 144, dequantQ4K},
	GGMLTypeQ5_K: {"Q5_K", qkK, 176, dequantQ5K},
	GGMLTypeQ6_K: {"Q6_K", qkK, 210, dequantQ6K},
}

// GGMLTypeName is the ggml name of tensor type t ("Q4_1"), or "type N"
// for a type this package does not read.
func GGMLTypeName(t uint32) string {
	if g, ok := ggmlTypes[t]; ok {
		return g.name
	}
	return fmt.Sprintf("type %d", t)
}

// ggmlTypeNames lists the readable types, for error messages.
const ggmlTypeNames = "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K"

// GGMLDataSize is the number of bytes n values of type t take, or an
// error when t is not readable or n is not a whole number of blocks.
func GGMLDataSize(t uint32, n uint64) (uint64, error) {
	g, ok := ggmlTypes[t]
	if !ok {
		return 0, fmt.Errorf("ggml type %d unsupported (readable: %s)", t, ggmlTypeNames)
	}
	if n%uint64(g.block) != 0 {
		return 0, fmt.Errorf("%d values of %s: not a multiple of its block of %d", n, g.name, g.block)
	}
	return n / uint64(g.block) * uint64(g.blockBytes), nil
}

// Dequantize converts n values of ggml type t, stored in b, to float32.
// Every type computes in float32 with each product and sum rounded (no
// fused multiply-add), in the order of the gguf Python package's numpy
// dequantization, so the results are bit for bit the same as its
// gguf.quants.dequantize.
func Dequantize(t uint32, b []byte, n int) ([]float32, error) {
	size, err := GGMLDataSize(t, uint64(n))
	if err != nil {
		return nil, err
	}
	if uint64(len(b)) != size {
		return nil, fmt.Errorf("%d values of %s take %d bytes, have %d", n, GGMLTypeName(t), size, len(b))
	}
	g := ggmlTypes[t]
	out := make([]float32, n)
	for i := 0; i < n/g.block; i++ {
		g.dequant(out[i*g.block:(i+1)*g.block], b[i*g.blockBytes:(i+1)*g.blockBytes])
	}
	return out, nil
}

func half(b []byte) float32 { return HalfToFloat32(binary.LittleEndian.Uint16(b)) }

// dequantQ4_0: block {d f16; qs[16]}; value j (< 16) is the low nibble of
// qs[j], value j+16 its high nibble: y = d·(q − 8).
func dequantQ4_0(o []float32, b []byte) {
	d, qs := half(b), b[2:18]
	for j := range 16 {
		o[j] = d * float32(int8(qs[j]&0xf)-8)
		o[j+16] = d * float32(int8(qs[j]>>4)-8)
	}
}

// dequantQ4_1: block {d, m f16; qs[16]}: y = d·q + m.
func dequantQ4_1(o []float32, b []byte) {
	d, m, qs := half(b), half(b[2:]), b[4:20]
	for j := range 16 {
		o[j] = float32(d*float32(qs[j]&0xf)) + m
		o[j+16] = float32(d*float32(qs[j]>>4)) + m
	}
}

// fifth returns the 5-bit values of a Q5 block: nibbles of qs as in Q4,
// bit j of the little-endian uint32 qh as value j's fifth bit.
func fifth(qh, qs []byte, j int) (lo, hi uint8) {
	h := binary.LittleEndian.Uint32(qh)
	lo = qs[j]&0xf | uint8(h>>j&1)<<4
	hi = qs[j]>>4 | uint8(h>>(j+16)&1)<<4
	return lo, hi
}

// dequantQ5_0: block {d f16; qh[4]; qs[16]}: y = d·(q − 16).
func dequantQ5_0(o []float32, b []byte) {
	d := half(b)
	for j := range 16 {
		lo, hi := fifth(b[2:6], b[6:22], j)
		o[j] = d * float32(int8(lo)-16)
		o[j+16] = d * float32(int8(hi)-16)
	}
}

// dequantQ5_1: block {d, m f16; qh[4]; qs[16]}: y = d·q + m.
func dequantQ5_1(o []float32, b []byte) {
	d, m := half(b), half(b[2:])
	for j := range 16 {
		lo, hi := fifth(b[4:8], b[8:24], j)
		o[j] = float32(d*float32(lo)) + m
		o[j+16] = float32(d*float32(hi)) + m
	}
}

// dequantQ8_0: block {d f16; qs[32] int8}: y = q·d.
func dequantQ8_0(o []float32, b []byte) {
	d := half(b)
	for j := range 32 {
		o[j] = float32(int8(b[2+j])) * d
	}
}

// scaleMin unpacks the eight 6-bit scales and mins of a Q4_K/Q5_K
// super-block from its 12 scale bytes s: for sub-block g < 4, scale
// s[g]&63 and min s[g+4]&63; for g ≥ 4, the low nibbles (scale) and high
// nibbles (min) of s[g+4] with the top two bits from s[g−4] and s[g].
func scaleMin(s []byte, g int) (sc, mn uint8) {
	if g < 4 {
		return s[g] & 63, s[g+4] & 63
	}
	return s[g+4]&0xf | (s[g-4]>>2)&0x30, s[g+4]>>4 | (s[g]>>2)&0x30
}

// dequantQ4K: super-block {d, dmin f16; scales[12]; qs[128]} of eight
// sub-blocks of 32; sub-block g takes the low (g even) or high (g odd)
// nibbles of qs[32·⌊g/2⌋ …]: y = (d·sc_g)·q − dmin·m_g.
func dequantQ4K(o []float32, b []byte) {
	d, dmin, s, qs := half(b), half(b[2:]), b[4:16], b[16:144]
	for g := range 8 {
		sc, mn := scaleMin(s, g)
		ds, dm := d*float32(sc), dmin*float32(mn)
		shift := 4 * uint(g%2)
		for j := range 32 {
			o[g*32+j] = float32(ds*float32(qs[g/2*32+j]>>shift&0xf)) - dm
		}
	}
}

// dequantQ5K: super-block {d, dmin f16; scales[12]; qh[32]; qs[128]}: as
// Q4_K, with bit g of qh[j] as the fifth bit of sub-block g's value j.
func dequantQ5K(o []float32, b []byte) {
	d, dmin, s, qh, qs := half(b), half(b[2:]), b[4:16], b[16:48], b[48:176]
	for g := range 8 {
		sc, mn := scaleMin(s, g)
		ds, dm := d*float32(sc), dmin*float32(mn)
		shift := 4 * uint(g%2)
		for j := range 32 {
			q := qs[g/2*32+j]>>shift&0xf | (qh[j]>>g&1)<<4
			o[g*32+j] = float32(ds*float32(q)) - dm
		}
	}
}

// dequantQ6K: super-block {ql[128]; qh[64]; scales[16] int8; d f16} of two
// halves of 128 values; in half h, group k (< 4) of 32 takes nibble ⌊k/2⌋
// of ql[64h + 32(k mod 2) …] and bits 2k, 2k+1 of qh[32h …]:
// y = (d·scale_{i/16})·(q − 32).
func dequantQ6K(o []float32, b []byte) {
	ql, qh, sc, d := b[0:128], b[128:192], b[192:208], half(b[208:])
	for i := range qkK {
		g, j := i/32, i%32
		h, k := g/4, g%4
		lo := ql[64*h+32*(k%2)+j] >> (4 * uint(k/2)) & 0xf
		hi := qh[32*h+j] >> (2 * uint(k)) & 3
		q := int8(lo|hi<<4) - 32
		o[i] = float32(d*float32(int8(sc[i/16]))) * float32(q)
	}
}

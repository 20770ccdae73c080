package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// GGUF value types (gguf.h: GGUF_TYPE_*).
const (
	ggufUint8   = 0
	ggufInt8    = 1
	ggufUint16  = 2
	ggufInt16   = 3
	ggufUint32  = 4
	ggufInt32   = 5
	ggufFloat32 = 6
	ggufBool    = 7
	ggufString  = 8
	ggufArray   = 9
	ggufUint64  = 10
	ggufInt64   = 11
	ggufFloat64 = 12
)

const ggufMagic = "GGUF"

// GGUFTensorInfo describes one tensor of a GGUF file. Shape is row-major
// (the reverse of GGML's ne[] order); Offset is relative to the data section.
type GGUFTensorInfo struct {
	Name   string
	Shape  []int
	Type   uint32
	Offset uint64
}

// GGUFFile is a parsed GGUF header: version, metadata and tensor infos.
// Metadata values are uint8…int64, float32/float64, bool, string, or
// a typed slice of those ([]string, []int32, []float32, …; []any for
// arrays of arrays).
type GGUFFile struct {
	Version    uint32
	Meta       map[string]any
	Keys       []string // metadata keys in file order
	Tensors    []GGUFTensorInfo
	Alignment  uint64
	DataOffset uint64 // absolute file offset of the data section
}

// ReadGGUF reads a GGUF (v2 or v3) file: its metadata and every tensor,
// dequantized to float32 (Dequantize: F32, F16, BF16 and the Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K quantizations; other types are an
// error naming the tensor). Tensor names are GGUF's (blk.N.attn_q.weight, …).
func ReadGGUF(path string) (map[string]any, []Tensor, error) {
	b, f, err := readGGUF(path)
	if err != nil {
		return nil, nil, err
	}
	ts := make([]Tensor, len(f.Tensors))
	for i, ti := range f.Tensors {
		t, err := f.tensorData(b, ti)
		if err != nil {
			return nil, nil, fmt.Errorf("read gguf %s: %w", path, err)
		}
		ts[i] = t
	}
	return f.Meta, ts, nil
}

// readGGUF reads a whole GGUF file and parses its header.
func readGGUF(path string) ([]byte, *GGUFFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read gguf: %w", err)
	}
	f, err := ParseGGUFHeader(b)
	if err != nil {
		return nil, nil, fmt.Errorf("read gguf %s: %w", path, err)
	}
	return b, f, nil
}

// ReadGGUFMeta reads the metadata of a GGUF file and its tensor infos,
// without the tensor data: it parses a prefix of the file, growing it
// until the header fits (the whole file at worst, whose parse then gives
// the error). A header that parses within a prefix parses the same in the
// whole file: ParseGGUFHeader reads nothing past the header and only
// checks that the data section starts within what it was given.
func ReadGGUFMeta(path string) (*GGUFFile, error) {
	return readGGUFMeta(path, 1<<20)
}

// readGGUFMeta is ReadGGUFMeta starting from a prefix of first bytes.
func readGGUFMeta(path string, first int64) (*GGUFFile, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read gguf: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("read gguf: %w", err)
	}
	for n := min(first, st.Size()); ; n = min(4*n, st.Size()) {
		b := make([]byte, n)
		if _, err := io.ReadFull(io.NewSectionReader(fh, 0, n), b); err != nil {
			return nil, fmt.Errorf("read gguf %s: %w", path, err)
		}
		f, err := ParseGGUFHeader(b)
		if err == nil {
			return f, nil
		}
		if n == st.Size() {
			return nil, fmt.Errorf("read gguf %s: %w", path, err)
		}
	}
}

func (f *GGUFFile) tensorData(b []byte, ti GGUFTensorInfo) (Tensor, error) {
	n := uint64(1)
	for _, d := range ti.Shape {
		n *= uint64(d)
	}
	size, err := GGMLDataSize(ti.Type, n)
	if err != nil {
		return Tensor{}, fmt.Errorf("tensor %q: %w", ti.Name, err)
	}
	start := f.DataOffset + ti.Offset
	if start < f.DataOffset || start > uint64(len(b)) || size > uint64(len(b))-start {
		return Tensor{}, fmt.Errorf("tensor %q: data [%d, +%d bytes) beyond end of file (%d bytes)", ti.Name, start, size, len(b))
	}
	data, err := Dequantize(ti.Type, b[start:start+size], int(n))
	if err != nil {
		return Tensor{}, fmt.Errorf("tensor %q: %w", ti.Name, err)
	}
	return Tensor{Name: ti.Name, Shape: append([]int{}, ti.Shape...), Data: data}, nil
}

type ggufReader struct {
	b   []byte
	off uint64
	err error
}

func (r *ggufReader) need(n uint64) bool {
	if r.err != nil {
		return false
	}
	if n > uint64(len(r.b))-r.off {
		r.err = fmt.Errorf("truncated at byte %d (need %d more)", r.off, n)
		return false
	}
	return true
}

func (r *ggufReader) u8() uint8 {
	if !r.need(1) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

// fixed reads a little-endian value of n bytes with get (0 once the
// reader has failed or would run past the end).
func fixed[T uint16 | uint32 | uint64](r *ggufReader, n uint64, get func([]byte) T) T {
	if !r.need(n) {
		return 0
	}
	v := get(r.b[r.off:])
	r.off += n
	return v
}

func (r *ggufReader) u16() uint16 { return fixed(r, 2, binary.LittleEndian.Uint16) }

func (r *ggufReader) u32() uint32 { return fixed(r, 4, binary.LittleEndian.Uint32) }

func (r *ggufReader) u64() uint64 { return fixed(r, 8, binary.LittleEndian.Uint64) }

func (r *ggufReader) str() string {
	n := r.u64()
	if !r.need(n) {
		return ""
	}
	s := string(r.b[r.off : r.off+n])
	r.off += n
	return s
}

// count reads an element count and checks that that many elements of at
// least minSize bytes each can fit in the rest of the file.
func (r *ggufReader) count(minSize uint64) uint64 {
	n := r.u64()
	if r.err == nil && minSize > 0 && n > (uint64(len(r.b))-r.off)/minSize {
		r.err = fmt.Errorf("count %d at byte %d exceeds the file", n, r.off-8)
		return 0
	}
	return n
}

func ggufScalarSize(t uint32) uint64 {
	switch t {
	case ggufUint8, ggufInt8, ggufBool:
		return 1
	case ggufUint16, ggufInt16:
		return 2
	case ggufUint32, ggufInt32, ggufFloat32:
		return 4
	case ggufUint64, ggufInt64, ggufFloat64, ggufString:
		return 8
	case ggufArray:
		return 12
	}
	return 0
}

func (r *ggufReader) value(t uint32, depth int) any {
	switch t {
	case ggufUint8:
		return r.u8()
	case ggufInt8:
		return int8(r.u8())
	case ggufUint16:
		return r.u16()
	case ggufInt16:
		return int16(r.u16())
	case ggufUint32:
		return r.u32()
	case ggufInt32:
		return int32(r.u32())
	case ggufFloat32:
		return math.Float32frombits(r.u32())
	case ggufBool:
		v := r.u8()
		if v > 1 && r.err == nil {
			r.err = fmt.Errorf("bool value %d at byte %d", v, r.off-1)
		}
		return v == 1
	case ggufString:
		return r.str()
	case ggufUint64:
		return r.u64()
	case ggufInt64:
		return int64(r.u64())
	case ggufFloat64:
		return math.Float64frombits(r.u64())
	case ggufArray:
		if depth > 4 {
			r.err = errors.New("arrays nested too deep")
			return nil
		}
		et := r.u32()
		size := ggufScalarSize(et)
		if size == 0 {
			if r.err == nil {
				r.err = fmt.Errorf("array of unknown type %d", et)
			}
			return nil
		}
		n := r.count(size)
		return r.array(et, n, depth)
	}
	if r.err == nil {
		r.err = fmt.Errorf("unknown value type %d", t)
	}
	return nil
}

func readSlice[T any](r *ggufReader, n uint64, et uint32, depth int) []T {
	out := make([]T, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		out = append(out, r.value(et, depth+1).(T))
	}
	return out
}

func (r *ggufReader) array(et uint32, n uint64, depth int) any {
	switch et {
	case ggufUint8:
		return readSlice[uint8](r, n, et, depth)
	case ggufInt8:
		return readSlice[int8](r, n, et, depth)
	case ggufUint16:
		return readSlice[uint16](r, n, et, depth)
	case ggufInt16:
		return readSlice[int16](r, n, et, depth)
	case ggufUint32:
		return readSlice[uint32](r, n, et, depth)
	case ggufInt32:
		return readSlice[int32](r, n, et, depth)
	case ggufFloat32:
		return readSlice[float32](r, n, et, depth)
	case ggufBool:
		return readSlice[bool](r, n, et, depth)
	case ggufString:
		return readSlice[string](r, n, et, depth)
	case ggufUint64:
		return readSlice[uint64](r, n, et, depth)
	case ggufInt64:
		return readSlice[int64](r, n, et, depth)
	case ggufFloat64:
		return readSlice[float64](r, n, et, depth)
	}
	out := make([]any, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		out = append(out, r.value(et, depth+1))
	}
	return out
}

// ParseGGUFHeader parses the header of a GGUF file held in b: magic,
// version, metadata and tensor infos; tensor data is not decoded. Every
// count and offset is checked against len(b).
func ParseGGUFHeader(b []byte) (*GGUFFile, error) {
	if len(b) < 4 || string(b[:4]) != ggufMagic {
		return nil, errors.New("not a GGUF file (bad magic)")
	}
	r := &ggufReader{b: b, off: 4}
	f := &GGUFFile{Meta: map[string]any{}, Alignment: 32}
	f.Version = r.u32()
	if r.err == nil && f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("GGUF version %d unsupported (want 2 or 3)", f.Version)
	}
	nt := r.count(8 + 4 + 4 + 8)
	nkv := r.count(8 + 4)
	for i := uint64(0); i < nkv && r.err == nil; i++ {
		k := r.str()
		t := r.u32()
		v := r.value(t, 0)
		if r.err != nil {
			return nil, fmt.Errorf("metadata %q: %w", k, r.err)
		}
		if _, dup := f.Meta[k]; dup {
			return nil, fmt.Errorf("metadata key %q appears twice", k)
		}
		f.Meta[k] = v
		f.Keys = append(f.Keys, k)
	}
	if r.err != nil {
		return nil, fmt.Errorf("metadata: %w", r.err)
	}
	if a, ok := f.Meta["general.alignment"]; ok {
		av, ok := a.(uint32)
		if !ok || av == 0 || av&(av-1) != 0 {
			return nil, fmt.Errorf("general.alignment %v: want a power-of-two uint32", a)
		}
		f.Alignment = uint64(av)
	}
	seen := map[string]bool{}
	for i := uint64(0); i < nt && r.err == nil; i++ {
		var ti GGUFTensorInfo
		ti.Name = r.str()
		nd := r.u32()
		if r.err == nil && nd > 8 {
			return nil, fmt.Errorf("tensor %q: %d dimensions", ti.Name, nd)
		}
		ne := make([]uint64, nd)
		elems := uint64(1)
		for d := range ne {
			ne[d] = r.u64()
			if ne[d] > 0 && elems > math.MaxInt32*uint64(64)/ne[d] {
				return nil, fmt.Errorf("tensor %q: dimensions %v too large", ti.Name, ne[:d+1])
			}
			elems *= ne[d]
		}
		ti.Type = r.u32()
		ti.Offset = r.u64()
		if r.err != nil {
			return nil, fmt.Errorf("tensor info %d: %w", i, r.err)
		}
		if seen[ti.Name] {
			return nil, fmt.Errorf("tensor %q appears twice", ti.Name)
		}
		seen[ti.Name] = true
		if ti.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("tensor %q: offset %d not aligned to %d", ti.Name, ti.Offset, f.Alignment)
		}
		ti.Shape = make([]int, nd)
		for d := range ne {
			ti.Shape[int(nd)-1-d] = int(ne[d])
		}
		f.Tensors = append(f.Tensors, ti)
	}
	if r.err != nil {
		return nil, fmt.Errorf("tensor infos: %w", r.err)
	}
	f.DataOffset = (r.off + f.Alignment - 1) / f.Alignment * f.Alignment
	if f.DataOffset > uint64(len(b)) && len(f.Tensors) > 0 {
		return nil, fmt.Errorf("data section at %d beyond end of file (%d bytes)", f.DataOffset, len(b))
	}
	return f, nil
}

package format

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// Tensor is a named, row-major float32 array. len(Data) == product(Shape);
// a scalar has an empty Shape and one element.
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// NumElements returns the product of t.Shape (1 for a scalar).
func (t Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

func (t Tensor) validate() error {
	n := 1
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor %q: negative dimension in shape %v", t.Name, t.Shape)
		}
		n *= d
	}
	if n != len(t.Data) {
		return fmt.Errorf("tensor %q: shape %v needs %d elements, has %d", t.Name, t.Shape, n, len(t.Data))
	}
	return nil
}

type stEntry struct {
	Dtype       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// maxHeader bounds the JSON header size that ReadSafetensors accepts
// (the reference implementation uses 100 MB).
const maxHeader = 100 << 20

// WriteSafetensors writes ts as F32 tensors, sorted by name, to path with the
// given __metadata__ (may be nil). The file is written to a temporary name
// and renamed, so a crash never leaves a truncated checkpoint at path.
func WriteSafetensors(path string, ts []Tensor, meta map[string]string) error {
	sorted := append([]Tensor(nil), ts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	var off int64
	for i, t := range sorted {
		if err := t.validate(); err != nil {
			return fmt.Errorf("write safetensors %s: %w", path, err)
		}
		if t.Name == "" || t.Name == "__metadata__" {
			return fmt.Errorf("write safetensors %s: invalid tensor name %q", path, t.Name)
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return fmt.Errorf("write safetensors %s: duplicate tensor %q", path, t.Name)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		end := off + int64(len(t.Data))*4
		header[t.Name] = stEntry{Dtype: "F32", Shape: shape, DataOffsets: [2]int64{off, end}}
		off = end
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("write safetensors %s: header: %w", path, err)
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	return writeAtomic(path, func(w io.Writer) error {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(hj)))
		if _, err := w.Write(n[:]); err != nil {
			return err
		}
		if _, err := w.Write(hj); err != nil {
			return err
		}
		buf := make([]byte, 0, 1<<16)
		for _, t := range sorted {
			for _, v := range t.Data {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
				if len(buf) >= 1<<16 {
					if _, err := w.Write(buf); err != nil {
						return err
					}
					buf = buf[:0]
				}
			}
		}
		_, err := w.Write(buf)
		return err
	})
}

// writeAtomic writes path via a temporary file in the same directory.
func writeAtomic(path string, fill func(w io.Writer) error) (err error) {
	f, err := os.CreateTemp(dirOf(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := newBufWriter(f)
	if err = fill(bw); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ReadSafetensors reads every tensor of a safetensors file, converting
// F32, F16, BF16 and F64 data to float32, in file order of their names
// (sorted). A malformed file is an error naming the file and, where it
// applies, the tensor.
func ReadSafetensors(path string) ([]Tensor, map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read safetensors: %w", err)
	}
	ts, meta, err := ParseSafetensors(b)
	if err != nil {
		return nil, nil, fmt.Errorf("read safetensors %s: %w", path, err)
	}
	return ts, meta, nil
}

// ParseSafetensors decodes a safetensors file held in memory; see ReadSafetensors.
func ParseSafetensors(b []byte) ([]Tensor, map[string]string, error) {
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("file of %d bytes is shorter than the 8-byte header size", len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > maxHeader {
		return nil, nil, fmt.Errorf("header size %d exceeds the %d-byte limit", n, maxHeader)
	}
	if n > uint64(len(b)-8) {
		return nil, nil, fmt.Errorf("header size %d beyond end of file (%d bytes)", n, len(b))
	}
	hb := b[8 : 8+n]
	data := b[8+n:]
	names, entries, meta, err := parseHeader(hb, int64(len(data)))
	if err != nil {
		return nil, nil, err
	}
	ts := make([]Tensor, len(names))
	for i, name := range names {
		e := entries[i]
		src := data[e.DataOffsets[0]:e.DataOffsets[1]]
		shape := append([]int{}, e.Shape...)
		ts[i] = Tensor{Name: name, Shape: shape, Data: decodeFloats(e.Dtype, src)}
	}
	return ts, meta, nil
}

// TensorInfo is one tensor of a safetensors header: what the file holds,
// before any of its data is read.
type TensorInfo struct {
	Name  string
	Dtype string
	Shape []int
}

// ReadSafetensorsHeader reads only the header of a safetensors file (8
// bytes, then at most maxHeader bytes of JSON) and checks it against the
// file's size as ParseSafetensors does; no tensor data is read.
func ReadSafetensorsHeader(path string) ([]TensorInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read safetensors header: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read safetensors header: %w", err)
	}
	wrap := func(err error) error { return fmt.Errorf("read safetensors header %s: %w", path, err) }
	var nb [8]byte
	if _, err := io.ReadFull(f, nb[:]); err != nil {
		return nil, wrap(fmt.Errorf("file of %d bytes is shorter than the 8-byte header size", st.Size()))
	}
	n := binary.LittleEndian.Uint64(nb[:])
	if n > maxHeader {
		return nil, wrap(fmt.Errorf("header size %d exceeds the %d-byte limit", n, maxHeader))
	}
	if n > uint64(st.Size()-8) {
		return nil, wrap(fmt.Errorf("header size %d beyond end of file (%d bytes)", n, st.Size()))
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(f, hb); err != nil {
		return nil, wrap(err)
	}
	names, entries, _, err := parseHeader(hb, st.Size()-8-int64(n))
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]TensorInfo, len(names))
	for i, name := range names {
		out[i] = TensorInfo{Name: name, Dtype: entries[i].Dtype, Shape: append([]int{}, entries[i].Shape...)}
	}
	return out, nil
}

// parseHeader decodes and checks a safetensors JSON header over a data
// buffer of dataLen bytes: dtypes, shapes, offsets in range, sizes matching
// shapes, no overlap. Names are sorted; entries follow them.
func parseHeader(hb []byte, dataLen int64) ([]string, []stEntry, map[string]string, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hb))
	if err := dec.Decode(&raw); err != nil {
		return nil, nil, nil, fmt.Errorf("header JSON: %w", err)
	}
	if raw == nil {
		return nil, nil, nil, errors.New("header JSON is not an object")
	}
	var meta map[string]string
	if m, ok := raw["__metadata__"]; ok {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, nil, nil, fmt.Errorf("__metadata__: %w", err)
		}
		delete(raw, "__metadata__")
	}
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	type span struct {
		name       string
		begin, end int64
	}
	entries := make([]stEntry, len(names))
	spans := make([]span, len(names))
	for i, name := range names {
		var e stEntry
		if err := json.Unmarshal(raw[name], &e); err != nil {
			return nil, nil, nil, fmt.Errorf("tensor %q: header entry: %w", name, err)
		}
		size, ok := dtypeSize(e.Dtype)
		if !ok {
			return nil, nil, nil, fmt.Errorf("tensor %q: unsupported dtype %q", name, e.Dtype)
		}
		count := int64(1)
		for _, d := range e.Shape {
			if d < 0 {
				return nil, nil, nil, fmt.Errorf("tensor %q: negative dimension in shape %v", name, e.Shape)
			}
			if d > 0 && count > dataLen/int64(d) {
				return nil, nil, nil, fmt.Errorf("tensor %q: shape %v larger than the file", name, e.Shape)
			}
			count *= int64(d)
		}
		begin, end := e.DataOffsets[0], e.DataOffsets[1]
		if begin < 0 || end < begin || end > dataLen {
			return nil, nil, nil, fmt.Errorf("tensor %q: data_offsets [%d,%d] out of range of the %d-byte data buffer", name, begin, end, dataLen)
		}
		if end-begin != count*size {
			return nil, nil, nil, fmt.Errorf("tensor %q: data_offsets [%d,%d] hold %d bytes, shape %v of %s needs %d", name, begin, end, end-begin, e.Shape, e.Dtype, count*size)
		}
		entries[i] = e
		spans[i] = span{name, begin, end}
	}
	byBegin := append([]span(nil), spans...)
	sort.Slice(byBegin, func(i, j int) bool {
		if byBegin[i].begin != byBegin[j].begin {
			return byBegin[i].begin < byBegin[j].begin
		}
		return byBegin[i].end < byBegin[j].end
	})
	for i := 1; i < len(byBegin); i++ {
		p, c := byBegin[i-1], byBegin[i]
		if c.begin < p.end {
			return nil, nil, nil, fmt.Errorf("tensor %q: data_offsets [%d,%d] overlap tensor %q [%d,%d]", c.name, c.begin, c.end, p.name, p.begin, p.end)
		}
	}
	return names, entries, meta, nil
}

func dtypeSize(dt string) (int64, bool) {
	switch dt {
	case "F32":
		return 4, true
	case "F16", "BF16":
		return 2, true
	case "F64":
		return 8, true
	}
	return 0, false
}

func decodeFloats(dt string, src []byte) []float32 {
	switch dt {
	case "F32":
		out := make([]float32, len(src)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
		return out
	case "F16":
		out := make([]float32, len(src)/2)
		for i := range out {
			out[i] = HalfToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
		}
		return out
	case "BF16":
		out := make([]float32, len(src)/2)
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		}
		return out
	case "F64":
		out := make([]float32, len(src)/8)
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
		}
		return out
	}
	return nil // unreachable: dtypeSize rejected dt
}

// Float32ToHalf rounds f to the nearest IEEE 754 binary16 value, ties to
// even (what numpy's astype(float16) and llama.cpp's converter do):
// overflow becomes ±Inf, NaN stays NaN, small values become subnormals or
// signed zero.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127
	mant := b & 0x7fffff
	switch {
	case exp == 128: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp > 15:
		return sign | 0x7c00
	case exp >= -14: // normal: 10 of 23 mantissa bits, rounded
		h := uint32(exp+15)<<10 | mant>>13
		rest := mant & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
			h++ // may carry into the exponent, up to Inf: still correct
		}
		return sign | uint16(h)
	case exp >= -25: // subnormal: value = m · 2^-24 with the implicit bit
		m := mant | 0x800000
		shift := uint(-exp - 14 + 13) // 14..25
		h := m >> shift
		rest := m & (1<<shift - 1)
		halfway := uint32(1) << (shift - 1)
		if rest > halfway || (rest == halfway && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	return sign
}

// HalfToFloat32 converts an IEEE 754 binary16 bit pattern to float32 exactly
// (subnormals, infinities and NaN included).
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		// subnormal: value = mant · 2^-24
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

package format

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func sampleTensors() []Tensor {
	return []Tensor{
		{Name: "model.norm.weight", Shape: []int{3}, Data: []float32{1, -2, 3.5}},
		{Name: "a.scalar", Shape: []int{}, Data: []float32{float32(math.Inf(-1))}},
		{Name: "lm_head.weight", Shape: []int{2, 3}, Data: []float32{0.1, 0.2, 0.3, -0.4, 1e-30, 6e30}},
		{Name: "empty", Shape: []int{0, 4}, Data: []float32{}},
	}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	meta := map[string]string{"format": "pt", "step": "12"}
	if err := WriteSafetensors(path, sampleTensors(), meta); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	if (8+n)%8 != 0 {
		t.Errorf("header size %d: data does not start 8-byte aligned", n)
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		t.Fatalf("header is not JSON: %v", err)
	}
	if len(hdr) != 5 {
		t.Errorf("header has %d keys, want 4 tensors + __metadata__", len(hdr))
	}
	var e stEntry
	json.Unmarshal(hdr["lm_head.weight"], &e)
	// names sorted: a.scalar(4B) empty(0) lm_head(24B) model.norm(12B)
	if e.Dtype != "F32" || e.DataOffsets != [2]int64{4, 28} || !reflect.DeepEqual(e.Shape, []int{2, 3}) {
		t.Errorf("lm_head entry %+v", e)
	}
	if uint64(len(b)) != 8+n+40 {
		t.Errorf("file %d bytes, want %d", len(b), 8+n+40)
	}
	ts, gotMeta, err := ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotMeta, meta) {
		t.Errorf("meta %v, want %v", gotMeta, meta)
	}
	want := map[string]Tensor{}
	for _, x := range sampleTensors() {
		want[x.Name] = x
	}
	if len(ts) != len(want) {
		t.Fatalf("%d tensors, want %d", len(ts), len(want))
	}
	for i, x := range ts {
		if i > 0 && ts[i-1].Name >= x.Name {
			t.Errorf("not sorted: %q after %q", x.Name, ts[i-1].Name)
		}
		w := want[x.Name]
		if !reflect.DeepEqual(x.Shape, w.Shape) || !reflect.DeepEqual(x.Data, w.Data) {
			t.Errorf("%s: got %v %v, want %v %v", x.Name, x.Shape, x.Data, w.Shape, w.Data)
		}
	}
}

func TestWriteSafetensorsRejects(t *testing.T) {
	dir := t.TempDir()
	cases := map[string][]Tensor{
		"needs 4 elements":    {{Name: "x", Shape: []int{2, 2}, Data: []float32{1}}},
		"duplicate":           {{Name: "x", Shape: []int{1}, Data: []float32{1}}, {Name: "x", Shape: []int{1}, Data: []float32{2}}},
		"invalid tensor name": {{Name: "", Shape: []int{1}, Data: []float32{1}}},
	}
	for want, ts := range cases {
		t.Run(want, func(t *testing.T) {
			path := filepath.Join(dir, "bad.safetensors")
			err := WriteSafetensors(path, ts, nil)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: err = %v", want, err)
			}
			if _, statErr := os.Stat(path); statErr == nil {
				t.Errorf("%s: a file was left behind", want)
			}
		})
	}
}

// buildST assembles a safetensors file from a raw header and data buffer.
func buildST(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func TestReadHalfPrecision(t *testing.T) {
	// F16: 1.0=0x3c00, -2.0=0xc000, 65504=0x7bff, smallest subnormal 0x0001=2^-24
	f16 := []uint16{0x3c00, 0xc000, 0x7bff, 0x0001}
	// BF16: 1.0=0x3f80, -0.5=0xbf00, 3.140625=0x4049
	bf16 := []uint16{0x3f80, 0xbf00, 0x4049}
	var data []byte
	for _, h := range f16 {
		data = binary.LittleEndian.AppendUint16(data, h)
	}
	for _, h := range bf16 {
		data = binary.LittleEndian.AppendUint16(data, h)
	}
	data = binary.LittleEndian.AppendUint64(data, math.Float64bits(0.25))
	hdr := `{"h":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]},"d":{"dtype":"F64","shape":[1],"data_offsets":[14,22]}}`
	ts, _, err := ParseSafetensors(buildST(hdr, data))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]float32{}
	for _, x := range ts {
		got[x.Name] = x.Data
	}
	if want := []float32{1, -2, 65504, float32(math.Ldexp(1, -24))}; !reflect.DeepEqual(got["h"], want) {
		t.Errorf("F16 %v, want %v", got["h"], want)
	}
	if want := []float32{1, -0.5, 3.140625}; !reflect.DeepEqual(got["b"], want) {
		t.Errorf("BF16 %v, want %v", got["b"], want)
	}
	if want := []float32{0.25}; !reflect.DeepEqual(got["d"], want) {
		t.Errorf("F64 %v, want %v", got["d"], want)
	}
	if v := HalfToFloat32(0x7c00); !math.IsInf(float64(v), 1) {
		t.Errorf("F16 +inf decoded as %v", v)
	}
	if v := HalfToFloat32(0x7e00); !math.IsNaN(float64(v)) {
		t.Errorf("F16 NaN decoded as %v", v)
	}
	if v := HalfToFloat32(0x8000); v != 0 || !math.Signbit(float64(v)) {
		t.Errorf("F16 -0 decoded as %v", v)
	}
}

func TestReadSafetensorsCorrupt(t *testing.T) {
	good := []byte{0, 0, 128, 63, 0, 0, 0, 64} // 1.0, 2.0
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"short", []byte{1, 2, 3}, "shorter than"},
		{"header beyond file", binary.LittleEndian.AppendUint64(nil, 1000), "beyond end of file"},
		{"bad json", buildST(`{"x":`, nil), "header JSON"},
		{"not object", buildST(`[1,2]`, nil), "header JSON"},
		{"bad dtype", buildST(`{"x":{"dtype":"I4","shape":[1],"data_offsets":[0,4]}}`, good), `tensor "x": unsupported dtype`},
		{"out of range", buildST(`{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, good), `tensor "x": data_offsets [0,16] out of range`},
		{"reversed", buildST(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, good), `tensor "x": data_offsets`},
		{"size mismatch", buildST(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}}`, good), `tensor "x": data_offsets [0,8] hold 8 bytes`},
		{"overlap", buildST(`{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, good), "overlap"},
		{"negative dim", buildST(`{"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, good), "negative dimension"},
		{"huge shape", buildST(`{"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, good), "larger than the file"},
		{"bad metadata", buildST(`{"__metadata__":{"a":1}}`, nil), "__metadata__"},
		{"bad entry", buildST(`{"x":{"dtype":"F32","shape":"no","data_offsets":[0,4]}}`, good), `tensor "x": header entry`},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name)
			if err := os.WriteFile(path, c.file, 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err := ReadSafetensors(path)
			if err == nil {
				t.Fatalf("%s: no error", c.name)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: error %q lacks %q or the file name", c.name, err, c.want)
			}
		})
	}
	if _, _, err := ReadSafetensors(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file: no error")
	}
}

func FuzzReadSafetensors(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "seed.safetensors")
	if err := WriteSafetensors(path, sampleTensors(), map[string]string{"k": "v"}); err != nil {
		f.Fatal(err)
	}
	seed, _ := os.ReadFile(path)
	f.Add(seed)
	f.Add(seed[:len(seed)-3])
	f.Add(buildST(`{"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`, []byte{0, 60, 0, 188}))
	f.Add(buildST(`{"x":{"dtype":"BF16","shape":[1,1],"data_offsets":[0,2]},"__metadata__":{}}`, []byte{128, 63}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, _, err := ParseSafetensors(b)
		if err != nil {
			return
		}
		for _, x := range ts {
			if x.NumElements() != len(x.Data) {
				t.Fatalf("tensor %q: shape %v but %d elements", x.Name, x.Shape, len(x.Data))
			}
		}
	})
}

func BenchmarkSafetensorsRoundTrip(b *testing.B) {
	data := make([]float32, 4<<20) // 16 MB
	for i := range data {
		data[i] = float32(i)
	}
	ts := []Tensor{{Name: "w", Shape: []int{4096, 1024}, Data: data}}
	path := filepath.Join(b.TempDir(), "w.safetensors")
	b.SetBytes(int64(4 * len(data)))
	for i := 0; i < b.N; i++ {
		if err := WriteSafetensors(path, ts, nil); err != nil {
			b.Fatal(err)
		}
		if _, _, err := ReadSafetensors(path); err != nil {
			b.Fatal(err)
		}
	}
}

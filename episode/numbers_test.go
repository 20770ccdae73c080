package episode

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

func TestParseFloatsExact(t *testing.T) {
	var got []float64
	in := `[ 0, -0, 1.5e-3, -12, 9007199254740993, 1E2, 0.1 ,2.5e+1]`
	if err := parseFloats([]byte(in), "x", &got); err != nil {
		t.Fatal(err)
	}
	var want []float64
	json.Unmarshal([]byte(in), &want)
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Errorf("element %d: %v, encoding/json %v", i, got[i], want[i])
		}
	}
	if !math.Signbit(got[1]) {
		t.Error("-0 lost its sign")
	}
}

// FuzzNumbers checks the hand-written array decoders against
// encoding/json: whatever they accept, encoding/json accepts with the same
// bits; whatever encoding/json accepts without null elements, they accept.
func FuzzNumbers(f *testing.F) {
	for _, s := range []string{`[]`, `[1,2,3]`, `[-0.5e-7, 1E+300, 0]`, `[1,null]`, `[01]`, `[1,]`, `[1 2]`, `[[1]]`, `["1"]`,
		`[99999999999999999999]`, `[-9223372036854775808]`, `[1e999]`, ` [ 1 ] `, `[1]x`, `[-]`, `[.5]`, `[5.]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || !bytes.HasPrefix(bytes.TrimSpace(data), []byte("[")) {
			// The decoders only ever see valid JSON arrays; on anything
			// else they must just not panic.
			var a []float64
			var b []int
			parseFloats(data, "x", &a)
			parseInts(data, "x", &b)
			return
		}
		var gotF, wantF []float64
		errF := parseFloats(data, "x", &gotF)
		jerrF := json.Unmarshal(data, &wantF)
		var gotI, wantI []int
		errI := parseInts(data, "x", &gotI)
		jerrI := json.Unmarshal(data, &wantI)
		hasNull := bytes.Contains(data, []byte("null"))
		check := func(err, jerr error, eq func() bool, kind string) {
			switch {
			case err == nil && jerr != nil:
				t.Fatalf("%s: accepted %q, encoding/json: %v", kind, data, jerr)
			case err != nil && jerr == nil && !hasNull:
				t.Fatalf("%s: rejected %q (%v), encoding/json accepts", kind, data, err)
			case err == nil && !eq():
				t.Fatalf("%s: %q decoded differently", kind, data)
			}
		}
		check(errF, jerrF, func() bool {
			if len(gotF) != len(wantF) {
				return false
			}
			for i := range gotF {
				if math.Float64bits(gotF[i]) != math.Float64bits(wantF[i]) {
					return false
				}
			}
			return true
		}, "float")
		check(errI, jerrI, func() bool {
			if len(gotI) != len(wantI) {
				return false
			}
			for i := range gotI {
				if gotI[i] != wantI[i] {
					return false
				}
			}
			return true
		}, "int")
	})
}

package tensorboard

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/compactrl/compactrl/internal/testenv"
)

// The masked CRC on the CRC-32C check value: CRC-32C("123456789") =
// 0xE3069283 (RFC 3720 B.4); rotated right by 15 = 0x2506C60D; plus
// 0xa282ead8 = 0xC78AB0E5 (mod 2^32). The empty input has CRC 0.
func TestMaskedCRC(t *testing.T) {
	if got := maskedCRC([]byte("123456789")); got != 0xc78ab0e5 {
		t.Errorf("maskedCRC(123456789) = %#x, want 0xc78ab0e5", got)
	}
	if got := maskedCRC(nil); got != 0xa282ead8 {
		t.Errorf("maskedCRC(empty) = %#x, want 0xa282ead8", got)
	}
}

// One scalar event, byte by byte: the Event message is
// 09 <wall_time double> 10 <step varint> 2a <len> (0a <len> (0a <len> tag 15 <float32>)).
func TestScalarEventBytes(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, time.Unix(10, 0), "h")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Scalars(300, time.Unix(12, 500_000_000), map[string]float64{"a": 1.5, "nan": math.NaN()}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b, err := os.ReadFile(filepath.Join(dir, "events.out.tfevents.10.h.compactrl"))
	if err != nil {
		t.Fatal(err)
	}
	first := 12 + 9 + 15 + 4 // header, wall_time, file_version "brain.Event:2", footer
	rec := b[first:]
	want := []byte{
		0x09, 0, 0, 0, 0, 0, 0, 0x29, 0x40, // wall_time 12.5
		0x10, 0xac, 0x02, // step 300
		0x2a, 0x0a, // summary, 10 bytes
		0x0a, 0x08, // value, 8 bytes
		0x0a, 0x01, 'a', // tag "a"
		0x15, 0, 0, 0xc0, 0x3f, // simple_value 1.5f
	}
	if len(rec) != 12+len(want)+4 {
		t.Fatalf("record of %d bytes, want %d", len(rec), 12+len(want)+4)
	}
	if got := rec[12 : 12+len(want)]; string(got) != string(want) {
		t.Fatalf("event % x\nwant  % x", got, want)
	}
	if rec[0] != byte(len(want)) || maskedCRC(rec[:8]) != leU32(rec[8:12]) || maskedCRC(want) != leU32(rec[12+len(want):]) {
		t.Fatal("bad TFRecord framing")
	}
}

func leU32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// tensorboard's own EventAccumulator reads the file back: every tag, step
// and value (as float32), the wall times, and nothing else.
func TestTensorBoardReadsIt(t *testing.T) {
	py := testenv.MustHaveVerl(t)
	if out, err := exec.Command(py, "-c", "import tensorboard").CombinedOutput(); err != nil {
		testenv.Unavailable(t, "tensorboard not importable by %s: %v %s", py, err, out)
	}
	dir := t.TempDir()
	w, err := Create(dir, time.Unix(1000, 0), "host")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][][2]float64{}
	for step := range 5 {
		vals := map[string]float64{"train/reward": 0.1 * float64(step), "eval/pass1": 1 / float64(step+3), "x": math.Inf(1)}
		if err := w.Scalars(int64(step), time.Unix(1000+int64(step), 0), vals); err != nil {
			t.Fatal(err)
		}
		for k, v := range vals {
			if !math.IsInf(v, 0) {
				want[k] = append(want[k], [2]float64{float64(step), float64(float32(v))})
			}
		}
	}
	w.Close()
	script := `
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1]); acc.Reload()
print(json.dumps({t: [[e.step, e.value, e.wall_time] for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}))
`
	out, err := exec.Command(py, "-c", script, dir).Output()
	if err != nil {
		t.Fatalf("EventAccumulator: %v", err)
	}
	var got map[string][][3]float64
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got) != len(want) {
		t.Fatalf("tags %v, want %v", got, want)
	}
	for tag, evs := range want {
		if len(got[tag]) != len(evs) {
			t.Fatalf("%s: %d events, want %d", tag, len(got[tag]), len(evs))
		}
		for i, e := range evs {
			g := got[tag][i]
			if g[0] != e[0] || float32(g[1]) != float32(e[1]) || g[2] != 1000+e[0] {
				t.Errorf("%s event %d = %v, want step %v value %v wall %v", tag, i, g, e[0], e[1], 1000+e[0])
			}
		}
	}
}

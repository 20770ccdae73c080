// Package tensorboard writes TensorBoard event files, so that a training run
// opens in the tool RL users already watch.
//
// Data flow: the trainer hands each iteration's scalars (name → value) and
// its step to Writer.Scalars, which appends one Event record to
// RUN_DIR/events.out.tfevents.<unix seconds>.<host>[.<n>].compactrl; TensorBoard
// (or tensorboard's EventAccumulator) reads every such file in the directory.
//
// The format: a file is a sequence of TFRecords, each
//
//	uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
//
// (little endian; masked_crc(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 with c
// the CRC-32C of x), whose data is a serialized tensorflow.Event: field 1
// wall_time (double), 2 step (int64), 3 file_version ("brain.Event:2", the
// first record), 5 summary; a Summary holds repeated Value (field 1), each
// with tag (field 1, string) and simple_value (field 2, float).
//
// It is written by hand: the format is a few protobuf fields and a framing,
// and no maintained Go library writes it (the TensorFlow Go bindings need
// libtensorflow). The package's tests read the files back with
// tensorboard's own EventAccumulator.
package tensorboard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Writer appends events to one event file. It is not safe for concurrent use.
type Writer struct {
	f    *os.File
	path string
}

// Create starts a new event file in dir, named for now and host; its first
// record is the file-version event.
func Create(dir string, now time.Time, host string) (*Writer, error) {
	var f *os.File
	var path string
	for n := 0; ; n++ {
		suffix := "compactrl"
		if n > 0 { // a resumed run in the same second: a file of its own
			suffix = fmt.Sprintf("%d.compactrl", n)
		}
		path = filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%d.%s.%s", now.Unix(), host, suffix))
		var err error
		f, err = os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || n >= 1000 {
			return nil, fmt.Errorf("tensorboard: %w", err)
		}
	}
	w := &Writer{f: f, path: path}
	var ev []byte
	ev = appendDouble(ev, 1, seconds(now))
	ev = appendBytes(ev, 3, []byte("brain.Event:2"))
	if err := w.record(ev); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// Scalars appends one event at step with a simple_value for every finite
// entry of values (tags in sorted order; NaN and ±Inf are left out, as gaps)
// and syncs the file, so a killed run loses no written step.
func (w *Writer) Scalars(step int64, wall time.Time, values map[string]float64) error {
	tags := make([]string, 0, len(values))
	for k, v := range values {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			tags = append(tags, k)
		}
	}
	slices.Sort(tags)
	var summary []byte
	for _, tag := range tags {
		var val []byte
		val = appendBytes(val, 1, []byte(tag))
		val = appendFloat(val, 2, float32(values[tag]))
		summary = appendBytes(summary, 1, val)
	}
	var ev []byte
	ev = appendDouble(ev, 1, seconds(wall))
	ev = appendVarintField(ev, 2, uint64(step))
	ev = appendBytes(ev, 5, summary)
	if err := w.record(ev); err != nil {
		return err
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("tensorboard %s: %w", w.path, err)
	}
	return nil
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's masked CRC-32C: ((c >> 15) | (c << 17)) + 0xa282ead8.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

func (w *Writer) record(data []byte) error {
	var head [12]byte
	binary.LittleEndian.PutUint64(head[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(head[8:], maskedCRC(head[:8]))
	rec := append(head[:], data...)
	rec = binary.LittleEndian.AppendUint32(rec, maskedCRC(data))
	if _, err := w.f.Write(rec); err != nil {
		return fmt.Errorf("tensorboard %s: %w", w.path, err)
	}
	return nil
}

// Protobuf wire encoding: a key is field<<3 | wire type (0 varint, 1 64-bit, 2 length-delimited, 5 32-bit).

func appendVarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendVarintField(b []byte, field int, v uint64) []byte {
	return appendVarint(appendVarint(b, uint64(field)<<3), v)
}

func appendDouble(b []byte, field int, v float64) []byte {
	return binary.LittleEndian.AppendUint64(appendVarint(b, uint64(field)<<3|1), math.Float64bits(v))
}

func appendFloat(b []byte, field int, v float32) []byte {
	return binary.LittleEndian.AppendUint32(appendVarint(b, uint64(field)<<3|5), math.Float32bits(v))
}

func appendBytes(b []byte, field int, v []byte) []byte {
	b = appendVarint(appendVarint(b, uint64(field)<<3|2), uint64(len(v)))
	return append(b, v...)
}

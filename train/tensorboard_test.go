package train

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// eventRecords counts the TFRecords of the run's one TensorBoard event file.
func eventRecords(t *testing.T, dir string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if err != nil || len(files) != 1 {
		t.Fatalf("event files in %s: %v %v", dir, files, err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatalf("truncated record header after %d records", n)
		}
		l := int(binary.LittleEndian.Uint64(b))
		if len(b) < 12+l+4 {
			t.Fatalf("truncated record %d", n)
		}
		b = b[12+l+4:]
		n++
	}
	return n
}

func TestScalarTags(t *testing.T) {
	step, vals, err := scalarTags([]byte(`{"iteration":7,"reward":0.5,"eval_pass1_compact":0.25,"time_train_s":3,"note":"x","lambda_mean":0.9}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"train/reward": 0.5, "eval/pass1_compact": 0.25, "time/train_s": 3, "train/lambda_mean": 0.9}
	if step != 7 || len(vals) != len(want) {
		t.Fatalf("step %d, %v; want 7, %v", step, vals, want)
	}
	for k, v := range want {
		if vals[k] != v {
			t.Errorf("%s = %v, want %v", k, vals[k], v)
		}
	}
	if _, _, err := scalarTags([]byte(`{"reward":1}`)); err == nil {
		t.Error("a record without iteration was accepted")
	}
}

// Every metrics record is also one TensorBoard event (after the file-version record).
func TestMetricsWriterTensorBoard(t *testing.T) {
	dir := t.TempDir()
	mw, err := openMetrics(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := mw.withTensorBoard(dir, time.Unix(5, 0)); err != nil {
		t.Fatal(err)
	}
	if err := mw.Write(Metrics{Iteration: 0, Reward: 0.5}); err != nil {
		t.Fatal(err)
	}
	if err := mw.Write(finalRecord(1, EvalResult{Pass1Compact: 0.3}, 2)); err != nil {
		t.Fatal(err)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	if n := eventRecords(t, dir); n != 3 {
		t.Fatalf("%d event records, want 3", n)
	}
}

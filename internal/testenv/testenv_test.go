package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a check stopped the test.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Skip(args ...any)               { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

func TestUnavailableSkipsLocallyFailsInCI(t *testing.T) {
	for _, tc := range []struct {
		name, ci           string
		wantSkip, wantFail bool
	}{
		{"local", "", true, false},
		{"ci", "true", false, true},
		{"ci-other-value", "1", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			r := &recorder{TB: t}
			Unavailable(r, "no %s here", "thing")
			if (r.skipped != "") != tc.wantSkip || (r.failed != "") != tc.wantFail {
				t.Fatalf("skipped %q, failed %q", r.skipped, r.failed)
			}
			if !strings.Contains(r.skipped+r.failed, "no thing here") {
				t.Fatalf("message lost: skipped %q, failed %q", r.skipped, r.failed)
			}
		})
	}
}

func TestMustHaveLlamaReturnsTheDirectory(t *testing.T) {
	t.Setenv(LlamaEnv, "/opt/llama")
	if got := MustHaveLlama(t); got != "/opt/llama" {
		t.Fatalf("MustHaveLlama = %q", got)
	}
	t.Setenv("CI", "")
	t.Setenv(LlamaEnv, "")
	r := &recorder{TB: t}
	MustHaveLlama(r)
	if r.skipped == "" {
		t.Fatal("unset llama dir did not skip")
	}
}

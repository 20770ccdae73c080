package progress

import (
	"os"
	"strings"
	"testing"
)

func TestBarDrawsAndEnds(t *testing.T) {
	var sb strings.Builder
	b := New(&sb, "work", 4)
	b.tty = true // a terminal: redrawn in place
	for i := 1; i <= 4; i++ {
		b.Set(i, 4)
	}
	b.Done()
	out := sb.String()
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "4/4") != 1 || !strings.Contains(out, "[########################]") || !strings.Contains(out, "\r") {
		t.Errorf("bar output %q", out)
	}
	var nilBar *Bar
	nilBar.Set(1, 2) // a nil bar (no writer) draws nothing and must not panic
	nilBar.Done()
	New(nil, "x", 1).Done()
}

func TestBarOnAPipeWritesOnePlainLine(t *testing.T) {
	for _, tc := range []struct {
		name, note, want string
	}{
		{"plain", "", "work: 4/4 in "},
		{"note", "success 0.500", "work: 4/4 in "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sb strings.Builder
			if isTerminal(&sb) {
				t.Fatal("a strings.Builder is no terminal")
			}
			b := New(&sb, "work", 4)
			for i := 1; i <= 4; i++ {
				b.Update(i, 4, tc.note)
			}
			b.Done()
			out := sb.String()
			if strings.Contains(out, "\r") || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, tc.want) || !strings.Contains(out, tc.note) {
				t.Errorf("piped bar output %q; want one plain line", out)
			}
		})
	}
}

// /dev/null is a character device but no terminal: the bar does not
// redraw in place there.
func TestDevNullIsNoTerminal(t *testing.T) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Fatal("/dev/null taken for a terminal")
	}
}

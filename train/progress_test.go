package train

import (
	"strings"
	"testing"
)

func TestBarDrawsAndEnds(t *testing.T) {
	var sb strings.Builder
	b := newBar(&sb, "work", 4)
	b.tty = true // a terminal: redrawn in place
	for i := 1; i <= 4; i++ {
		b.Set(i, 4)
	}
	b.Done()
	out := sb.String()
	if !strings.HasSuffix(out, "\n") || strings.Count(out, "4/4") != 1 || !strings.Contains(out, "[########################]") || !strings.Contains(out, "\r") {
		t.Errorf("bar output %q", out)
	}
	var nilBar *bar
	nilBar.Set(1, 2) // a nil bar (no writer) draws nothing and must not panic
	nilBar.Done()
	newBar(nil, "x", 1).Done()
}

func TestBarOnAPipeWritesOnePlainLine(t *testing.T) {
	var sb strings.Builder
	if IsTerminal(&sb) {
		t.Fatal("a strings.Builder is no terminal")
	}
	b := newBar(&sb, "work", 4)
	for i := 1; i <= 4; i++ {
		b.Set(i, 4)
	}
	b.Done()
	out := sb.String()
	if strings.Contains(out, "\r") || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "work: 4/4 in ") {
		t.Errorf("piped bar output %q; want one plain line", out)
	}
}

package train

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// bar is a one-line progress bar redrawn in place ("\r") on a terminal; on
// any other writer (a pipe, a file) it writes one plain line when it ends;
// a nil writer draws nothing. Safe for concurrent Set calls.
type bar struct {
	w     io.Writer
	label string
	tty   bool // redraw in place
	total int
	start time.Time
	mu    sync.Mutex
	last  time.Time
	done  int
	drawn int // done count of the last drawing
}

func newBar(w io.Writer, label string, total int) *bar {
	b := &bar{w: w, label: label, total: total, start: time.Now(), tty: IsTerminal(w)}
	b.draw(true)
	return b
}

// IsTerminal reports whether w is a character device (a terminal), where
// progress can be redrawn in place.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Set records done of total finished.
func (b *bar) Set(done, total int) {
	if b == nil || b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done, b.total = done, total
	b.drawLocked(done == total)
}

func (b *bar) draw(force bool) {
	if b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.drawLocked(force)
}

func (b *bar) drawLocked(force bool) {
	if !b.tty {
		return
	}
	now := time.Now()
	if !force && now.Sub(b.last) < 200*time.Millisecond {
		return
	}
	b.last, b.drawn = now, b.done
	const width = 24
	fill := 0
	if b.total > 0 {
		fill = min(width, b.done*width/b.total)
	}
	el := now.Sub(b.start).Seconds()
	eta := ""
	if b.done > 0 && b.done < b.total {
		eta = fmt.Sprintf(" eta %.0fs", el/float64(b.done)*float64(b.total-b.done))
	}
	fmt.Fprintf(b.w, "\r%-28s [%s%s] %d/%d %.1fs%s   ", b.label, strings.Repeat("#", fill), strings.Repeat(".", width-fill), b.done, b.total, el, eta)
}

// Done ends the bar's line.
func (b *bar) Done() {
	if b == nil || b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.tty {
		fmt.Fprintf(b.w, "%s: %d/%d in %.1fs\n", b.label, b.done, b.total, time.Since(b.start).Seconds())
		return
	}
	if b.drawn != b.done {
		b.drawLocked(true)
	}
	fmt.Fprintln(b.w)
}

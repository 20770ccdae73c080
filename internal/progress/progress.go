// Package progress draws one-line progress bars for long phases (training
// steps, rollouts, evaluations). A phase makes a Bar with New, reports
// done-of-total with Set (or Update, with a note such as a running success
// rate), and ends it with Done. On a terminal the bar is redrawn in place
// ("\r"); on any other writer (a pipe, a file) it writes one plain line
// when it ends; a nil writer draws nothing.
package progress

import (
	"golang.org/x/term"

	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// redrawEvery is the shortest interval between two drawings of a bar.
const redrawEvery = 200 * time.Millisecond

// Bar is one phase's progress line. Safe for concurrent Set calls.
type Bar struct {
	w     io.Writer
	label string
	tty   bool // redraw in place
	start time.Time

	mu    sync.Mutex
	total int
	last  time.Time
	done  int
	note  string
	drawn int // done count of the last drawing
}

// New starts a bar labelled label over total items on w (nil: draws
// nothing).
func New(w io.Writer, label string, total int) *Bar {
	b := &Bar{w: w, label: label, total: total, start: time.Now(), tty: isTerminal(w)}
	b.Update(0, total, "")
	return b
}

// isTerminal reports whether w is a terminal (term.IsTerminal: the
// terminal ioctl answers), where progress can be redrawn in place. A
// character device is not enough: /dev/null is one.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Set records done of total finished.
func (b *Bar) Set(done, total int) { b.Update(done, total, "") }

// Update records done of total finished, with a note shown after the
// counts (what the items so far measured).
func (b *Bar) Update(done, total int, note string) {
	if b == nil || b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done, b.total, b.note = done, total, note
	b.drawLocked(done == total || done == 0)
}

func (b *Bar) drawLocked(force bool) {
	if !b.tty {
		return
	}
	now := time.Now()
	if !force && now.Sub(b.last) < redrawEvery {
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
	fmt.Fprintf(b.w, "\r%-28s [%s%s] %d/%d %.1fs%s%s   ", b.label, strings.Repeat("#", fill), strings.Repeat(".", width-fill), b.done, b.total, el, eta, b.noteText())
}

func (b *Bar) noteText() string {
	if b.note == "" {
		return ""
	}
	return "  " + b.note
}

// Done ends the bar's line: on a terminal the final drawing and a newline;
// elsewhere the one plain line "label: done/total in Ns".
func (b *Bar) Done() {
	if b == nil || b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.tty {
		fmt.Fprintf(b.w, "%s: %d/%d in %.1fs%s\n", b.label, b.done, b.total, time.Since(b.start).Seconds(), b.noteText())
		return
	}
	if b.drawn != b.done {
		b.drawLocked(true)
	}
	fmt.Fprintln(b.w)
}

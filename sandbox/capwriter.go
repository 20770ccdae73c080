package sandbox

import (
	"errors"
	"sync"
)

// Caps on what the host keeps of a container's output. A container's
// processes can write into any pipe of theirs without end (a daemon can
// reopen another process's stdout through /proc/PID/fd/1), and the host's
// memory is outside every per-episode limit, so no buffer grows past its
// cap: the rest is read and dropped, and counted.
const (
	// MaxExecOutputBytes caps the combined output kept of one command
	// exec'd in a box (Box.Run, Box.RunGuarded).
	MaxExecOutputBytes = 8 << 20
	// MaxEngineOutputBytes caps the standard output kept of one engine
	// CLI call (build logs, inspect, ps); its standard error is capped at
	// MaxEngineErrorBytes.
	MaxEngineOutputBytes = 64 << 20
	MaxEngineErrorBytes  = 1 << 20
)

// ErrOutputCap marks a command whose output passed the host's cap for it.
var ErrOutputCap = errors.New("output past the host's cap")

// capWriter keeps the first max bytes written to it and counts them all;
// writes never fail (the writer keeps draining the pipe). Safe for the
// concurrent writes of exec.Cmd's stdout and stderr copiers.
type capWriter struct {
	mu    sync.Mutex
	max   int
	buf   []byte
	total int64
}

func newCapWriter(max int) *capWriter { return &capWriter{max: max} }

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.total += int64(len(p))
	if room := w.max - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Bytes is what was kept.
func (w *capWriter) Bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf
}

func (w *capWriter) String() string { return string(w.Bytes()) }

// Total counts every byte written, kept or not.
func (w *capWriter) Total() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// Over reports whether more was written than kept.
func (w *capWriter) Over() bool { return w.Total() > int64(w.max) }

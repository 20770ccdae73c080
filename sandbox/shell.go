package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// launcher is what a Runner contributes to a shellSession: how to start a
// process whose stdin is read by a bash inside the sandbox, and how to kill
// everything such a process started.
type launcher interface {
	// command returns an unstarted process; its stdin, stdout and stderr are
	// set by the session.
	command() (*exec.Cmd, error)
	// started is called once cmd has started (or failed to), to release
	// what command kept open for the child.
	started()
	// kill stops cmd and every process it started inside the sandbox, and
	// returns only once they are gone; the error says some could not be
	// confirmed dead (a leaked sandbox).
	kill(cmd *exec.Cmd) error
	// close releases what the launcher holds (e.g. a container).
	close() error
}

// shellSession implements Session over a launcher with the sentinel
// protocol: each command is sent as
//
//	__crl_cmd='<cmd, single-quoted>'
//	eval "$__crl_cmd" </dev/null
//	printf '\n%s_%s %d\n' __COMPACTRL_<nonce> <seq> "$?"
//
// and its output is everything read before "\n__COMPACTRL_<nonce>_<seq> ".
// The sentinel never appears literally in what the shell is sent, so echoing
// or tracing the script cannot fake it, and a syntax error in cmd stays
// inside eval (exit status 2) instead of desynchronising the shell.
type shellSession struct {
	mu     sync.Mutex
	l      launcher
	limits Limits
	nonce  string
	seq    int
	closed bool

	proc    *exec.Cmd
	stdin   io.WriteCloser
	out     chan []byte // chunks of the shell's stdout+stderr; closed at EOF
	waited  chan struct{}
	pending []byte  // bytes read after the last sentinel (background output)
	leaks   []error // kills that could not confirm every process dead
}

func newShellSession(l launcher, limits Limits) (*shellSession, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("sandbox: sentinel nonce: %w", err)
	}
	s := &shellSession{l: l, limits: limits.withDefaults(), nonce: hex.EncodeToString(b[:])}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *shellSession) start() error {
	cmd, err := s.l.command()
	if err != nil {
		return err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("sandbox: shell stdin: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("sandbox: shell output pipe: %w", err)
	}
	cmd.Stdout = pw
	cmd.Stderr = pw
	err = cmd.Start()
	s.l.started()
	if err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("sandbox: start shell %s: %w", cmd.Path, err)
	}
	pw.Close()
	out := make(chan []byte, 64)
	waited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(waited)
	}()
	go func() {
		defer close(out)
		defer pr.Close()
		for {
			buf := make([]byte, 32<<10)
			n, err := pr.Read(buf)
			if n > 0 {
				out <- buf[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	s.proc, s.stdin, s.out, s.waited, s.pending = cmd, stdin, out, waited, nil
	return nil
}

// stop kills the current shell and everything it started, and forgets it.
// A kill that cannot confirm every process dead is kept for Close.
func (s *shellSession) stop() {
	if s.proc == nil {
		return
	}
	s.stdin.Close()
	if err := s.l.kill(s.proc); err != nil {
		s.leaks = append(s.leaks, err)
	}
	out := s.out
	go func() {
		for range out {
		}
	}()
	select {
	case <-s.waited:
	case <-time.After(5 * time.Second):
	}
	s.proc, s.stdin, s.out, s.waited, s.pending = nil, nil, nil, nil, nil
}

// Exec implements Session.
func (s *shellSession) Exec(ctx context.Context, cmd string, timeout time.Duration) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Result{}, errors.New("sandbox: exec on a closed session")
	}
	if s.proc == nil {
		if err := s.start(); err != nil {
			return Result{}, err
		}
	}
	s.seq++
	begin := time.Now()
	prefix := fmt.Sprintf("__COMPACTRL_%s", s.nonce)
	marker := []byte(fmt.Sprintf("\n%s_%d ", prefix, s.seq))
	script := "__crl_cmd=" + ShellQuote(cmd) + "\n" +
		"eval \"$__crl_cmd\" </dev/null\n" +
		fmt.Sprintf("printf '\\n%%s_%%s %%d\\n' %s %d \"$?\"\n", prefix, s.seq)
	if _, err := io.WriteString(s.stdin, script); err != nil {
		// The shell is gone (e.g. the previous command ran `exit`): restart once.
		s.stop()
		if err := s.start(); err != nil {
			return Result{}, err
		}
		if _, err := io.WriteString(s.stdin, script); err != nil {
			return Result{}, fmt.Errorf("sandbox: write command to shell: %w", err)
		}
	}

	capt := newCapture(s.limits.OutputBytes)
	hold := len(marker) + 24
	var buf []byte
	feed := func(chunk []byte) (done bool, code int) {
		buf = append(buf, chunk...)
		if i := bytes.Index(buf, marker); i >= 0 {
			rest := buf[i+len(marker):]
			if j := bytes.IndexByte(rest, '\n'); j >= 0 {
				c, err := strconv.Atoi(string(rest[:j]))
				if err == nil {
					capt.write(buf[:i])
					s.pending = append([]byte(nil), rest[j+1:]...)
					return true, c
				}
			} else {
				return false, 0 // the status line is still arriving
			}
		}
		if len(buf) > hold {
			capt.write(buf[:len(buf)-hold])
			buf = append(buf[:0], buf[len(buf)-hold:]...)
		}
		return false, 0
	}
	finish := func(r Result) Result {
		r.Output, r.Truncated = capt.String()
		r.Duration = time.Since(begin)
		return r
	}

	if len(s.pending) > 0 {
		p := s.pending
		s.pending = nil
		if done, code := feed(p); done {
			return finish(Result{ExitCode: code}), nil
		}
	}
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	for {
		select {
		case chunk, ok := <-s.out:
			if !ok {
				capt.write(buf)
				s.stop()
				return finish(Result{ExitCode: -1, Restarted: true}), nil
			}
			if done, code := feed(chunk); done {
				return finish(Result{ExitCode: code}), nil
			}
		case <-timer:
			s.drainInto(capt, &buf)
			s.stop()
			return finish(Result{ExitCode: -1, TimedOut: true, Restarted: true}), nil
		case <-ctx.Done():
			s.stop()
			return finish(Result{ExitCode: -1}), ctx.Err()
		}
	}
}

// drainInto moves output already read (but not yet consumed) into capt.
func (s *shellSession) drainInto(capt *capture, buf *[]byte) {
	for {
		select {
		case chunk, ok := <-s.out:
			if !ok {
				capt.write(*buf)
				*buf = nil
				return
			}
			*buf = append(*buf, chunk...)
		default:
			capt.write(*buf)
			*buf = nil
			return
		}
	}
}

// Close implements Session.
func (s *shellSession) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if _, ok := s.l.(releaser); ok && s.proc != nil {
		// End the shell by closing its input, as a finished `exec` would
		// end; what its commands detached or left in the background runs on.
		s.stdin.Close()
		select {
		case <-s.waited:
			s.proc = nil
		case <-time.After(5 * time.Second):
		}
	}
	s.stop()
	return errors.Join(append(s.leaks, s.l.close())...)
}

// releaser marks a launcher whose Close ends the shell without killing
// what it left behind (a container's shell: the container outlives it).
type releaser interface {
	release()
}

// ShellQuote returns s as one single-quoted POSIX shell word.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// capture keeps the first and last halves of a byte stream of unbounded
// length: head ⊕ "[... n bytes omitted ...]" ⊕ tail once it exceeds max.
type capture struct {
	max   int
	head  []byte
	tail  []byte
	total int
}

func newCapture(max int) *capture { return &capture{max: max} }

func (c *capture) write(b []byte) {
	c.total += len(b)
	h := c.max / 2
	if len(c.head) < h {
		n := min(h-len(c.head), len(b))
		c.head = append(c.head, b[:n]...)
		b = b[n:]
	}
	t := c.max - h
	c.tail = append(c.tail, b...)
	if len(c.tail) > 2*t+1024 {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-t:]...)
	}
}

// String returns the kept output and whether the middle was cut. Cuts are
// moved to UTF-8 rune boundaries.
func (c *capture) String() (string, bool) {
	t := c.max - c.max/2
	if c.total <= c.max {
		return string(c.head) + string(c.tail), false
	}
	head := trimBrokenTail(c.head)
	tail := c.tail
	if len(tail) > t {
		tail = tail[len(tail)-t:]
	}
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	omitted := c.total - len(head) - len(tail)
	return fmt.Sprintf("%s\n[... %d bytes omitted ...]\n%s", head, omitted, tail), true
}

// trimBrokenTail drops an incomplete multi-byte rune at the end of b.
func trimBrokenTail(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-4; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			return b
		}
	}
	return b
}

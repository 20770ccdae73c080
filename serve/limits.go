package serve

import (
	"net"
	"sync"
)

// limitConns returns a listener that has at most n connections of ln
// open at once: Accept waits (the kernel queues new connections) until one
// of them is closed. n ≤ 0 leaves ln unlimited.
func limitConns(ln net.Listener, n int) net.Listener {
	if n <= 0 {
		return ln
	}
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// FilesPerEpisode is what OpenFilesNeeded counts for one episode in flight:
// its sandbox's pipes and cgroup files, its engine connections and the
// files its environment copies, with room to spare.
const FilesPerEpisode = 32

// baseFiles is the process's own: binaries, logs, the listener, the
// tokenizer, the task files read at start.
const baseFiles = 128

// OpenFilesNeeded is the open-file limit the configured concurrency needs:
// every connection MaxConns allows, FilesPerEpisode for each of the
// MaxInFlight episodes, and the process's own.
func (s *Server) OpenFilesNeeded() uint64 {
	return uint64(s.cfg.MaxConns) + uint64(s.cfg.MaxInFlight)*FilesPerEpisode + baseFiles
}

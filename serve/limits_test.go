package serve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/internal/testenv"
)

// startServe runs s.Serve on a real listener on 127.0.0.1 and returns its
// address; the server is drained when the test ends.
func startServe(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	f := &testFactory{eng: &fakeEngine{n: 4}}
	if cfg.Agent.Context == 0 {
		cfg.Agent = testAgentConfig()
	}
	s, err := New(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	f.m = s.Metrics()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, 5*time.Second) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-served:
		case <-time.After(testenv.Deadline(t, 10*time.Second)):
			t.Error("Serve did not return")
		}
	})
	return s, ln.Addr().String()
}

// dial opens a raw connection whose reads give up after 10 s.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// A client that trickles its body (one byte every 50 ms of a 4 KiB body)
// is answered 408 once BodyTimeout has passed and its connection closed;
// before, nothing bounded the body and such clients held the server's
// connections and file descriptors for as long as they liked.
func TestServeSlowBodyCutOff(t *testing.T) {
	s, addr := startServe(t, Config{MaxInFlight: 1, BodyTimeout: 300 * time.Millisecond})
	c := dial(t, addr)
	fmt.Fprintf(c, "POST /v1/rollouts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n")
	start := time.Now()
	stopTrickle := make(chan struct{})
	defer close(stopTrickle)
	go func() {
		for {
			select {
			case <-stopTrickle:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body after %v: %v", time.Since(start), err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "not received within 300ms") {
		t.Fatalf("trickled body: %d %s", resp.StatusCode, b)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("cut off after %v, body timeout 300ms", d)
	}
	var m strings.Builder
	s.m.WriteText(&m)
	if !strings.Contains(m.String(), `compactrl_requests_rejected_total{reason="body_timeout"} 1`) {
		t.Fatalf("metrics:\n%s", m.String())
	}
}

// Headers trickled past ReadHeaderTimeout, and a keep-alive connection
// idle past IdleTimeout, lose their connection.
func TestServeHeaderAndIdleDeadlines(t *testing.T) {
	_, addr := startServe(t, Config{MaxInFlight: 1, ReadHeaderTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	c := dial(t, addr)
	start := time.Now()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n") // never finished
	if _, err := io.ReadAll(c); err != nil || time.Since(start) > 3*time.Second {
		t.Fatalf("slow headers: connection open %v (%v)", time.Since(start), err)
	}

	c = dial(t, addr)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	io.ReadAll(resp.Body)
	start = time.Now()
	if _, err := br.ReadByte(); err != io.EOF || time.Since(start) > 3*time.Second {
		t.Fatalf("idle connection: open %v (%v)", time.Since(start), err)
	}
}

// A body over MaxBodyBytes gets 413 (before: 400, after reading 1 MiB of
// it whatever the configuration), and the connection is closed.
func TestServeOversizedBody413(t *testing.T) {
	s, addr := startServe(t, Config{MaxInFlight: 1, MaxBodyBytes: 1000})
	big := body("count", 1)
	big = big[:len(big)-1] + `,"pad":"` + strings.Repeat("x", 2000) + `"}`
	resp, err := http.Post("http://"+addr+"/v1/rollouts", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "larger than 1000 bytes") {
		t.Fatalf("oversized body: %d %s", resp.StatusCode, b)
	}
	// The default bound is DefaultMaxBodyBytes.
	if d, _ := New(Config{MaxInFlight: 1}, s.f); d.cfg.MaxBodyBytes != DefaultMaxBodyBytes {
		t.Fatalf("default max body %d", d.cfg.MaxBodyBytes)
	}
}

// Past MaxConns open connections, a new one is not served until one of
// them closes; then it is.
func TestServeConnectionCap(t *testing.T) {
	_, addr := startServe(t, Config{MaxInFlight: 1, MaxConns: 2, ReadHeaderTimeout: 20 * time.Second})
	held := []net.Conn{dial(t, addr), dial(t, addr)}
	for _, c := range held { // make sure both are accepted and held
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("held connection: %v %v", resp, err)
		}
	}
	client := &http.Client{Timeout: 400 * time.Millisecond}
	if resp, err := client.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("a third connection was served with MaxConns 2: %d", resp.StatusCode)
	}
	held[0].Close()
	client.Timeout = 5 * time.Second
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a held connection closed: %v %v", resp, err)
	}
	resp.Body.Close()
	if s, _ := New(Config{MaxInFlight: 3, MaxQueue: 5}, &testFactory{}); s.cfg.MaxConns != 3+5+ConnHeadroom {
		t.Fatalf("default MaxConns %d", s.cfg.MaxConns)
	}
}

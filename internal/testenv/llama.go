package testenv

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// LlamaThreads is the thread count of the tests' llama-servers (-t): one.
// llama.cpp's threads meet at spinning barriers after every operation, so
// a server with more threads than it has free cores waits at each barrier
// for a thread the kernel has descheduled: beside a training run or
// another test package, a 2-thread server decoded 1–2 tokens/s and one
// test's eight episodes took over 15 minutes. One thread never waits for
// another.
const LlamaThreads = "1"

// LlamaServer starts llama-server of the installation in $LlamaEnv on the
// GGUF model with LlamaThreads threads and args (slots, context, cache types…),
// stops it when t ends, and returns its URL once /health answers 200.
func LlamaServer(t testing.TB, model string, args ...string) string {
	t.Helper()
	dir := MustHaveLlama(t)
	run := filepath.Join(dir, "run")
	server := filepath.Join(dir, "root/usr/bin/llama-server")
	for _, p := range []string{run, server} {
		if _, err := os.Stat(p); err != nil {
			Unavailable(t, "llama.cpp installation: %v", err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	logPath := filepath.Join(t.TempDir(), "llama-server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(run, append([]string{server, "-m", model, "--host", "127.0.0.1", "--port", fmt.Sprint(port),
		"-t", LlamaThreads, "--no-webui"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := StartGroup(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		KillGroup(cmd)
		logf.Close()
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return url
			}
		}
	}
	b, _ := os.ReadFile(logPath)
	t.Fatalf("llama-server on %s not healthy after 90 s:\n%s", model, b)
	return ""
}

package remote

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/compactrl/compactrl/internal/testenv"
)

// The real-engine tests share one llama-server (random-weight llama model
// from test-llama-archs, vocab 128, context 256 per slot, 4 slots) started
// by TestMain on 127.0.0.1 when COMPACTRL_LLAMA_DIR names an installation.

var (
	llamaURL    string // empty when no server runs
	llamaSkip   string // why not
	llamaNSlots = 4
	llamaCtx    = 256
)

func TestMain(m *testing.M) {
	stop, err := startLlamaServer()
	if err != nil {
		llamaSkip = err.Error()
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	os.Exit(code)
}

// needLlama skips (locally) or fails (CI=true) a test without the server.
func needLlama(t *testing.T) string {
	t.Helper()
	if llamaURL == "" {
		testenv.Unavailable(t, "llama-server unavailable: %s", llamaSkip)
	}
	return llamaURL
}

func startLlamaServer() (stop func(), err error) {
	dir := os.Getenv("COMPACTRL_LLAMA_DIR")
	if dir == "" {
		return nil, fmt.Errorf("COMPACTRL_LLAMA_DIR is not set")
	}
	run := filepath.Join(dir, "run")
	server := filepath.Join(dir, "root/usr/bin/llama-server")
	archs := filepath.Join(dir, "root/usr/libexec/x86_64-linux-gnu/llama.cpp-tests/test-llama-archs")
	for _, p := range []string{run, server, archs} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("llama.cpp installation: %w", err)
		}
	}
	tmp, err := os.MkdirTemp("", "compactrl-llama-")
	if err != nil {
		return nil, err
	}
	cleanup := func() { os.RemoveAll(tmp) }
	out, err := exec.Command(run, archs, "-a", "^llama$", "-s", "42", "-o", tmp).CombinedOutput()
	model := filepath.Join(tmp, "llama-dense.gguf")
	if _, serr := os.Stat(model); err != nil || serr != nil {
		cleanup()
		return nil, fmt.Errorf("make model: %v %v: %s", err, serr, out)
	}
	port, err := freePort()
	if err != nil {
		cleanup()
		return nil, err
	}
	cmd := exec.Command(run, server, "-m", model, "--host", "127.0.0.1", "--port", fmt.Sprint(port),
		"-t", testenv.LlamaThreads, "--no-webui", "-np", fmt.Sprint(llamaNSlots), "-c", fmt.Sprint(llamaNSlots*llamaCtx))
	logf, err := os.Create(filepath.Join(tmp, "server.log"))
	if err != nil {
		cleanup()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := testenv.StartGroup(cmd); err != nil {
		cleanup()
		return nil, fmt.Errorf("start llama-server: %w", err)
	}
	stop = func() {
		testenv.KillGroup(cmd)
		logf.Close()
		cleanup()
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				llamaURL = url
				return stop, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(tmp, "server.log"))
	stop()
	return nil, fmt.Errorf("llama-server did not become healthy: %s", log)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

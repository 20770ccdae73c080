package serve

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactrl/compactrl/netallow"
)

const testKey = "0123456789abcdef0123"

func authPost(t *testing.T, url, auth, b string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/rollouts", strings.NewReader(b))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), resp.Header
}

// With an API key, requests without it or with a wrong one get 401 (the
// episode is never played); /healthz stays open for load balancers;
// /metrics needs the key.
func TestServeAPIKey(t *testing.T) {
	_, f, hs := newTestServer(t, Config{MaxInFlight: 2, APIKey: testKey}, &fakeEngine{n: 6})
	for _, auth := range []string{"", "Bearer", "Bearer " + testKey[:len(testKey)-1], "Bearer " + testKey + "x", "Basic " + testKey, "bearer " + testKey} {
		code, out, h := authPost(t, hs.URL, auth, body("count", 1))
		if code != http.StatusUnauthorized || !strings.Contains(out, "API key") || h.Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: %d %s", auth, code, out)
		}
	}
	if n := f.runs.Load(); n != 0 {
		t.Fatalf("%d runners built for refused requests", n)
	}
	if code, out, _ := authPost(t, hs.URL, "Bearer "+testKey, body("count", 2)); code != http.StatusOK {
		t.Fatalf("with the key: %d %s", code, out)
	}
	resp, err := http.Get(hs.URL + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", err, resp)
	}
	resp.Body.Close()
	resp, err = http.Get(hs.URL + "/metrics")
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("metrics without the key: %v %v", err, resp)
	}
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics with the key: %v %v", err, resp)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), `reason="unauthorized"`) {
		t.Fatalf("metrics do not count the 401s:\n%s", m)
	}
	if _, err := New(Config{MaxInFlight: 1, APIKey: "short"}, f); err == nil {
		t.Fatal("a 5-byte key was accepted")
	}
}

// A request naming an engine outside the allowlist gets 403 naming
// engine.url, before any runner is built; loopback is the default.
func TestServeEngineAllowlist(t *testing.T) {
	_, f, hs := newTestServer(t, Config{MaxInFlight: 2}, &fakeEngine{n: 6})
	for _, u := range []string{"http://169.254.169.254", "http://10.0.0.5:8000", "http://[::ffff:169.254.169.254]:80", "http://0.0.0.0:1"} {
		b := strings.Replace(body("count", 3), "http://127.0.0.1:1", u, 1)
		code, out, _ := authPost(t, hs.URL, "", b)
		if code != http.StatusForbidden || !strings.Contains(out, `"field":"engine.url"`) {
			t.Errorf("engine %s: %d %s", u, code, out)
		}
	}
	if n := f.runs.Load(); n != 0 {
		t.Fatalf("%d runners built for refused engines", n)
	}
	if code, out, _ := authPost(t, hs.URL, "", body("count", 4)); code != http.StatusOK {
		t.Fatalf("loopback engine: %d %s", code, out)
	}
	allow, err := netallow.Parse("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	_, _, hs2 := newTestServer(t, Config{MaxInFlight: 2, EngineAllow: allow}, &fakeEngine{n: 6})
	if code, out, _ := authPost(t, hs2.URL, "", strings.Replace(body("count", 5), "http://127.0.0.1:1", "http://10.0.0.5:8000", 1)); code != http.StatusOK {
		t.Fatalf("allowed engine: %d %s", code, out)
	}
	if code, _, _ := authPost(t, hs2.URL, "", body("count", 6)); code != http.StatusForbidden {
		t.Fatalf("loopback outside an explicit list: %d", code)
	}
}

// With a certificate, Serve answers HTTPS (and plain HTTP gets no episode).
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	_, addr := startServe(t, Config{MaxInFlight: 1, TLSCertFile: cert, TLSKeyFile: key, APIKey: testKey})
	pem, _ := os.ReadFile(cert)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest(http.MethodPost, "https://"+addr+"/v1/rollouts", strings.NewReader(body("count", 7)))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("https: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	if resp, err := http.Post("http://"+addr+"/v1/rollouts", "application/json", strings.NewReader(body("count", 8))); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP played an episode on a TLS server")
		}
	}
	if _, err := New(Config{MaxInFlight: 1, TLSCertFile: cert}, &testFactory{}); err == nil {
		t.Fatal("a certificate without its key was accepted")
	}
}

func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "compactrl test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

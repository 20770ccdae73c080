package netallow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// fakeResolver answers from a table (names not in it fail).
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	ips, ok := f[host]
	if !ok {
		return nil, fmt.Errorf("no such host %s", host)
	}
	var out []netip.Addr
	for _, s := range ips {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

func TestParseRefusesMalformedEntries(t *testing.T) {
	for _, spec := range []string{"", "a,,b", "10.0.0.0/33", "host:0", "host:70000", "host:x", "bad host", "a..b", "[::1"} {
		if _, err := Parse(spec); err == nil {
			t.Errorf("Parse(%q) accepted", spec)
		}
	}
}

func TestAllowsAddr(t *testing.T) {
	l, err := Parse("engine.internal:8000, 10.1.0.0/16, 192.168.5.7:30000, [fd12::1]:8000, 169.254.10.0/24")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, ip string
		port     uint16
		want     bool
	}{
		{"engine.internal", "10.9.9.9", 8000, true},         // by name
		{"ENGINE.internal.", "10.9.9.9", 8000, true},        // case and root dot
		{"engine.internal", "10.9.9.9", 8001, false},        // other port
		{"other.internal", "10.9.9.9", 8000, false},         // other name, address outside
		{"other.internal", "10.1.2.3", 1234, true},          // any name, address inside the CIDR
		{"", "10.1.2.3", 80, true},                          // literal inside the CIDR
		{"", "10.2.0.1", 80, false},                         // outside
		{"", "192.168.5.7", 30000, true},                    // one address, one port
		{"", "192.168.5.7", 30001, false},                   //
		{"", "::ffff:10.1.0.5", 80, true},                   // IPv4-mapped IPv6 is the IPv4 address
		{"", "fd12::1", 8000, true},                         //
		{"", "fd12::2", 8000, false},                        //
		{"engine.internal", "169.254.169.254", 8000, false}, // a name never admits a guarded address
		{"", "169.254.169.254", 80, false},                  // guarded, not named
		{"", "169.254.10.9", 80, true},                      // guarded, named by a /24 inside link-local
		{"", "127.0.0.1", 80, false},                        // loopback is not in this list
	} {
		if got := l.AllowsAddr(c.name, netip.MustParseAddr(c.ip), c.port); got != c.want {
			t.Errorf("AllowsAddr(%q, %s, %d) = %v, want %v", c.name, c.ip, c.port, got, c.want)
		}
	}
}

func TestWildcardKeepsGuardedAddressesOut(t *testing.T) {
	for _, spec := range []string{"*", "0.0.0.0/0,::/0", "169.0.0.0/8"} {
		l, err := Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, ip := range []string{"169.254.169.254", "fe80::1", "0.0.0.0", "::", "fd00:ec2::254", "100.100.100.200", "168.63.129.16"} {
			if l.AllowsAddr("", netip.MustParseAddr(ip), 80) {
				t.Errorf("%q admits guarded %s", spec, ip)
			}
		}
		if spec != "169.0.0.0/8" && !l.AllowsAddr("", netip.MustParseAddr("8.8.8.8"), 443) {
			t.Errorf("%q refuses a public address", spec)
		}
	}
	l, _ := Parse("169.254.169.254,0.0.0.0")
	for _, ip := range []string{"169.254.169.254", "0.0.0.0"} {
		if !l.AllowsAddr("", netip.MustParseAddr(ip), 80) {
			t.Errorf("%s named exactly and still refused", ip)
		}
	}
}

func TestCheckURL(t *testing.T) {
	l, err := Parse("engine.internal,10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	r := fakeResolver{"engine.internal": {"203.0.113.5"}, "rebind.example": {"10.0.0.1", "169.254.169.254"}, "inside.example": {"10.3.3.3"}}
	ok := []string{"http://engine.internal:8000", "https://engine.internal/v1", "http://10.2.3.4:30000", "http://inside.example:1"}
	bad := map[string]string{
		"http://169.254.169.254/latest/meta-data": "not in the allowed",
		"http://rebind.example:80":                "not in the allowed", // one of its addresses is outside
		"http://127.0.0.1:8000":                   "not in the allowed",
		"ftp://engine.internal":                   "scheme",
		"http://user:pw@engine.internal":          "credentials",
		"http://nowhere.example":                  "resolve",
		"http:///x":                               "no host",
		"http://[fe80::1%25eth0]:8000":            "zoned",
	}
	for _, u := range ok {
		if err := l.CheckURL(context.Background(), r, u); err != nil {
			t.Errorf("CheckURL(%q): %v", u, err)
		}
	}
	for u, want := range bad {
		err := l.CheckURL(context.Background(), r, u)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckURL(%q) = %v, want an error containing %q", u, err, want)
		}
	}
}

// TestClientDialsOnlyAdmittedAddresses: the guarded client reaches a
// server on an admitted address, is refused at connect time for one
// outside the list (however the URL named it), and does not follow a
// redirect out of the list.
func TestClientDialsOnlyAdmittedAddresses(t *testing.T) {
	inside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "engine") }))
	defer inside.Close()
	_, port, _ := net.SplitHostPort(inside.Listener.Addr().String())
	l, err := Parse("127.0.0.1:" + port)
	if err != nil {
		t.Fatal(err)
	}
	c := l.Client()
	resp, err := c.Get(inside.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "engine" {
		t.Fatalf("body %q", b)
	}
	outside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "secret") }))
	defer outside.Close()
	if _, err := c.Get(outside.URL); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("outside server: %v, want ErrNotAllowed", err)
	}
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, outside.URL, http.StatusFound)
	}))
	defer redirect.Close()
	_, rport, _ := net.SplitHostPort(redirect.Listener.Addr().String())
	l2, _ := Parse("127.0.0.1:" + rport)
	if _, err := l2.Client().Get(redirect.URL); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("redirect out of the list: %v, want ErrNotAllowed", err)
	}
	// A name resolving to a refused address is refused at dial time too.
	d := &Dialer{List: l, Resolver: fakeResolver{"engine.example": {"169.254.169.254"}}}
	if _, err := d.DialContext(context.Background(), "tcp", "engine.example:"+port); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("dial through a name: %v", err)
	}
}

func TestLoopback(t *testing.T) {
	l := Loopback()
	for ip, want := range map[string]bool{"127.0.0.1": true, "127.5.5.5": true, "::1": true, "10.0.0.1": false, "0.0.0.0": false} {
		if got := l.AllowsAddr("", netip.MustParseAddr(ip), 8000); got != want {
			t.Errorf("Loopback admits %s: %v", ip, got)
		}
	}
	if !l.AllowsAddr("localhost", netip.MustParseAddr("127.0.0.1"), 1) {
		t.Error("localhost refused")
	}
}

func TestLoopbackOnly(t *testing.T) {
	for listen, want := range map[string]bool{"127.0.0.1:8090": true, "[::1]:1": true, "localhost:0": true,
		"0.0.0.0:8090": false, ":8090": false, "[::]:1": false, "10.0.0.7:80": false, "[::ffff:127.0.0.1]:1": true} {
		got, err := LoopbackOnly(context.Background(), listen)
		if err != nil || got != want {
			t.Errorf("%s: %v %v, want %v", listen, got, err, want)
		}
	}
	if _, err := LoopbackOnly(context.Background(), "no-port"); err == nil || !strings.Contains(err.Error(), "--listen") {
		t.Errorf("no port: %v", err)
	}
}

// Package netallow decides which network addresses a service may call on a
// request's behalf. `compactrl serve` calls the inference engine a
// request names (engine.url); without a list of allowed destinations any
// client could make the service call any address it can reach — a cloud
// metadata service, an internal API — a server-side request forgery.
//
// Data flow: the operator's --engine-allow text → Parse → *List. A
// request's URL is checked before anything is built (List.CheckURL: an
// error names the host), and every connection the engine client then
// opens goes through List.Dialer, which checks the address it actually
// connects to (after DNS resolution, on every redirect), so a name that
// resolves elsewhere later (DNS rebinding) or a redirect cannot leave the
// list. The client made by List.Client uses no proxy: a proxy would make
// the dialled address the proxy's, not the engine's.
//
// Link-local addresses (169.254.0.0/16, fe80::/10, where cloud metadata
// services answer), the unspecified addresses and the known metadata
// addresses outside link-local (fd00:ec2::254, 100.100.100.200,
// 168.63.129.16) are refused unless an entry names them specifically: an
// IP, or a CIDR no wider than their own range. "0.0.0.0/0" does not
// admit 169.254.169.254; "169.254.169.254" does.
//
// Written by hand: the standard library has the parts (net/netip, a
// net.Dialer) and no allowlist; the SSRF-guard libraries for Go either
// filter only private ranges (the opposite of an allowlist) or are
// unmaintained.
package netallow

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ErrNotAllowed marks a destination outside the list.
var ErrNotAllowed = errors.New("not in the allowed engine addresses")

// List is a set of allowed destinations. The zero List allows nothing.
type List struct {
	entries []entry
	text    string
}

// entry is one destination: a DNS name or an address prefix, with one
// port or any (0).
type entry struct {
	name   string // lower case, no trailing dot; "" for a prefix entry
	prefix netip.Prefix
	port   uint16
}

// LoopbackSpec is the default list: the local machine only.
const LoopbackSpec = "localhost,127.0.0.0/8,::1"

// Loopback returns the list of LoopbackSpec.
func Loopback() *List {
	l, err := Parse(LoopbackSpec)
	if err != nil {
		panic(err) // a constant
	}
	return l
}

// Parse reads a comma-separated list of destinations, each one of
//
//	HOST           a DNS name or an IP address, any port
//	HOST:PORT      one port ([IPv6]:PORT for an IPv6 address)
//	ADDR/BITS      an address prefix (CIDR), any port
//	*              any host except the link-local, unspecified and metadata addresses
//
// An empty entry, a malformed one or a port outside 1–65535 is an error
// naming the entry.
func Parse(spec string) (*List, error) {
	l := &List{text: spec}
	for _, raw := range strings.Split(spec, ",") {
		s := strings.TrimSpace(raw)
		if s == "" {
			return nil, fmt.Errorf("engine allowlist %q: empty entry", spec)
		}
		e, err := parseEntry(s)
		if err != nil {
			return nil, fmt.Errorf("engine allowlist entry %q: %w", s, err)
		}
		l.entries = append(l.entries, e...)
	}
	return l, nil
}

func parseEntry(s string) ([]entry, error) {
	if s == "*" {
		return []entry{{prefix: netip.MustParsePrefix("0.0.0.0/0")}, {prefix: netip.MustParsePrefix("::/0")}}, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		return []entry{{prefix: p.Masked()}}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil { // an IP (IPv6 without brackets), any port
		return []entry{{prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())}}, nil
	}
	host, port := s, uint16(0)
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("port %q: want 1–65535", p)
		}
		host, port = h, uint16(n)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return []entry{{prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), port: port}}, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if !validName(name) {
		return nil, fmt.Errorf("%q is neither an IP address, a CIDR nor a DNS name", host)
	}
	return []entry{{name: name, port: port}}, nil
}

// validName reports whether s is a DNS name (letters, digits, '-', '_'
// and dots, labels of 1–63 characters).
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// String is the list as given.
func (l *List) String() string { return l.text }

// guarded are the ranges refused unless named within them: link-local
// (metadata services), unspecified (0.0.0.0 reaches the local machine) and
// metadata addresses outside link-local.
var guarded = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("0.0.0.0/32"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS (IPv6)
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud
	netip.MustParsePrefix("168.63.129.16/32"),   // Azure wire server
}

// guard is the guarded range holding a, if any.
func guard(a netip.Addr) (netip.Prefix, bool) {
	for _, g := range guarded {
		if g.Contains(a) {
			return g, true
		}
	}
	return netip.Prefix{}, false
}

// AllowsAddr reports whether the list admits a connection to a:port made
// for host name (the URL's host; "" when the URL gave an IP). A name
// entry admits the addresses its name resolves to, prefix entries the
// addresses they contain; a guarded address needs a prefix entry no wider
// than its guarded range.
func (l *List) AllowsAddr(name string, a netip.Addr, port uint16) bool {
	a = a.Unmap()
	g, isGuarded := guard(a)
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	for _, e := range l.entries {
		if e.port != 0 && e.port != port {
			continue
		}
		if e.name != "" {
			if name == e.name && !isGuarded {
				return true
			}
			continue
		}
		if e.prefix.Contains(a) && (!isGuarded || e.prefix.Bits() >= g.Bits() && g.Addr().Is4() == e.prefix.Addr().Is4()) {
			return true
		}
	}
	return false
}

// Resolver looks names up (net.DefaultResolver in production).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL checks an engine URL before it is used: scheme http or https,
// a host, and every address the host resolves to (r) admitted. A URL
// holding credentials is refused too (they would be sent to the engine
// and logged).
func (l *List) CheckURL(ctx context.Context, r Resolver, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("engine URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("engine URL %q: scheme %q (want http or https)", raw, u.Scheme)
	}
	if u.User != nil {
		return fmt.Errorf("engine URL %q: credentials in the URL are not accepted", raw)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("engine URL %q: no host", raw)
	}
	port := uint16(80)
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("engine URL %q: port %q", raw, p)
		}
		port = uint16(n)
	}
	addrs, name, err := l.resolve(ctx, r, host)
	if err != nil {
		return fmt.Errorf("engine URL %q: %w", raw, err)
	}
	for _, a := range addrs {
		if !l.AllowsAddr(name, a, port) {
			return fmt.Errorf("engine URL %q: %s port %d %w (allowed: %s)", raw, a, port, ErrNotAllowed, l.text)
		}
	}
	return nil
}

// resolve gives host's addresses and the name they were resolved from
// ("" for an IP literal).
func (l *List) resolve(ctx context.Context, r Resolver, host string) ([]netip.Addr, string, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if a.Zone() != "" {
			return nil, "", fmt.Errorf("address %s: zoned addresses are not accepted", host)
		}
		return []netip.Addr{a}, "", nil
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, "", fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, "", fmt.Errorf("resolve %s: no address", host)
	}
	return addrs, host, nil
}

// Dialer opens connections only to admitted addresses.
type Dialer struct {
	List     *List
	Resolver Resolver    // nil: net.DefaultResolver
	Dial     *net.Dialer // nil: a net.Dialer with a 30 s timeout
}

// DialContext resolves addr's host itself and connects to the first of
// its addresses the list admits; none admitted is ErrNotAllowed. (It is
// http.Transport's DialContext.)
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dial %s: port %q", addr, p)
	}
	var r Resolver = net.DefaultResolver
	if d.Resolver != nil {
		r = d.Resolver
	}
	addrs, name, err := d.List.resolve(ctx, r, host)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	nd := d.Dial
	if nd == nil {
		nd = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	}
	var firstErr error
	for _, a := range addrs {
		if !d.List.AllowsAddr(name, a, uint16(n)) {
			if firstErr == nil {
				firstErr = fmt.Errorf("dial %s: %s %w (allowed: %s)", addr, a, ErrNotAllowed, d.List.text)
			}
			continue
		}
		c, err := nd.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), p))
		if err == nil {
			return c, nil
		}
		if firstErr == nil || errors.Is(firstErr, ErrNotAllowed) {
			firstErr = err
		}
	}
	return nil, firstErr
}

// Client returns an HTTP client whose every connection (redirects
// included) goes through a Dialer over l, with no proxy.
func (l *List) Client() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = (&Dialer{List: l}).DialContext
	t.MaxIdleConnsPerHost = 256 // many episodes share one engine
	return &http.Client{Transport: t}
}

// LoopbackOnly reports whether listen (host:port) binds loopback
// addresses only: an empty host or an unspecified address binds every
// interface; a name counts as loopback when every address it resolves to
// is.
func LoopbackOnly(ctx context.Context, listen string) (bool, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false, fmt.Errorf("--listen %q: %w", listen, err)
	}
	if host == "" {
		return false, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().IsLoopback(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return false, fmt.Errorf("--listen %q: %w", listen, err)
	}
	for _, a := range addrs {
		if !a.Unmap().IsLoopback() {
			return false, nil
		}
	}
	return len(addrs) > 0, nil
}

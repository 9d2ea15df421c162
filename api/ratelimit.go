package api

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bae-go/bae-go/internal/lib/httpstatus"
)

// authLimiter slows down key guessing: each client address may fail
// authentication a limited number of times per window, after which its
// requests get 429 until the window passes. Keys carry 192 random bits, so
// this is about noise and log volume more than brute force. The count is
// across replicas: a failure is counted in PostgreSQL (shared), and the
// count it returns blocks the address here; a request that passes costs
// no round trip, as the block is checked in this replica's memory. An
// address is therefore blocked everywhere after the limit plus at most one
// more failure per replica (the one that tells a replica the count).
type authLimiter struct {
	mu       sync.Mutex
	max      int
	window   time.Duration
	now      func() time.Time
	failures map[string]*failWindow
	// shared counts a failure of addr across replicas and returns the
	// count in its window and what is left of the window (nil: this
	// replica's count only).
	shared func(ctx context.Context, addr string) (int, time.Duration, error)
}

// sharedCountWait bounds the shared count's round trip; past it (the
// database is slow or away) the failure counts on this replica only.
const sharedCountWait = time.Second

type failWindow struct {
	start time.Time
	count int
}

func newAuthLimiter(max int, window time.Duration) *authLimiter {
	return &authLimiter{max: max, window: window, now: time.Now, failures: map[string]*failWindow{}}
}

// clientAddr is the address failures are counted against. A request from
// a trusted proxy is attributed to the rightmost X-Forwarded-For hop that is
// not itself a trusted proxy: hops to its left were written by the client
// and prove nothing. With no trusted proxies the header is ignored.
func clientAddr(r *http.Request, trusted []netip.Prefix) string {
	peer, ok := parseHop(r.RemoteAddr)
	if !ok {
		return r.RemoteAddr
	}
	if !isTrusted(peer, trusted) {
		return peer.String()
	}
	var hops []string
	for _, line := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(line, ",")...)
	}
	addr := peer
	for i := len(hops) - 1; i >= 0; i-- {
		hop, ok := parseHop(hops[i])
		if !ok {
			break // an unparsable hop: trust nothing further left
		}
		addr = hop
		if !isTrusted(hop, trusted) {
			break
		}
	}
	return addr.String()
}

// parseHop reads an address with or without a port.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// blocked reports whether addr exhausted its failures, and for how long.
func (l *authLimiter) blocked(addr string) (bool, time.Duration) {
	if l == nil {
		return false, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.failures[addr]
	if w == nil {
		return false, 0
	}
	elapsed := l.now().Sub(w.start)
	if elapsed >= l.window {
		delete(l.failures, addr)
		return false, 0
	}
	return w.count >= l.max, l.window - elapsed
}

func (l *authLimiter) fail(ctx context.Context, addr string) {
	if l == nil {
		return
	}
	if l.shared != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedCountWait)
		n, left, err := l.shared(sctx, addr)
		cancel()
		if err == nil {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.failures[addr] = &failWindow{start: l.now().Add(left - l.window), count: n}
			return
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	w := l.failures[addr]
	if w == nil || now.Sub(w.start) >= l.window {
		// Bound memory: drop expired windows when the table grows.
		if len(l.failures) > 10000 {
			for k, v := range l.failures {
				if now.Sub(v.start) >= l.window {
					delete(l.failures, k)
				}
			}
		}
		w = &failWindow{start: now}
		l.failures[addr] = w
	}
	w.count++
}

func rateLimited(w http.ResponseWriter, retry time.Duration) {
	secs := int(retry.Seconds()) + 1
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeProblem(w, problem(http.StatusTooManyRequests, "rate_limited", "too many failed authentication attempts; retry later"))
}

// limitAuthFailures answers 429 to addresses that failed authentication
// too often, and counts every 401 the wrapped handler writes. Each port has
// its own limiter, so failures on one never lock anyone out of the other.
func limitAuthFailures(l *authLimiter, trusted []netip.Prefix) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
				next.ServeHTTP(w, r)
				return
			}
			addr := clientAddr(r, trusted)
			if blocked, retry := l.blocked(addr); blocked {
				rateLimited(w, retry)
				return
			}
			sw := httpstatus.Wrap(w)
			next.ServeHTTP(sw, r)
			if sw.Status == http.StatusUnauthorized {
				l.fail(r.Context(), addr)
			}
		})
	}
}

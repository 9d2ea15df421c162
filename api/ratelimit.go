package api

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// authLimiter slows down key guessing: each client address may fail
// authentication a limited number of times per window, after which its
// requests get 429 until the window passes. Keys carry 192 random bits, so
// this is about noise and log volume more than brute force. The count is
// per replica.
type authLimiter struct {
	mu       sync.Mutex
	max      int
	window   time.Duration
	now      func() time.Time
	failures map[string]*failWindow
}

type failWindow struct {
	start time.Time
	count int
}

func newAuthLimiter(max int, window time.Duration) *authLimiter {
	return &authLimiter{max: max, window: window, now: time.Now, failures: map[string]*failWindow{}}
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
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

func (l *authLimiter) fail(addr string) {
	if l == nil {
		return
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
// too often, and counts every 401 the wrapped handler writes.
func limitAuthFailures(l *authLimiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
				next.ServeHTTP(w, r)
				return
			}
			addr := clientAddr(r)
			if blocked, retry := l.blocked(addr); blocked {
				rateLimited(w, retry)
				return
			}
			sw := &statusWriter{ResponseWriter: w}
			next.ServeHTTP(sw, r)
			if sw.status == http.StatusUnauthorized {
				l.fail(addr)
			}
		})
	}
}

// statusWriter records the status code and keeps streaming (Flush) working.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

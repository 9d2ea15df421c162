package benchstack

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// TimedFake serves a fake provider on a loopback port and sums the time
// spent in its handler, so a bench that drives one turn at a time can take
// what the fake served during a turn out of the turn's latency
// (server-added time). bench/turns attributes the time per turn instead
// (its timedFake).
type TimedFake struct {
	// URL is where it listens: http://127.0.0.1:<port>.
	URL   string
	inner http.Handler
	seen  func(body []byte)
	ns    atomic.Int64
	srv   *http.Server
}

// ServeTimed starts serving inner; seen, when set, gets each request's body
// once inner has answered it.
func ServeTimed(inner http.Handler, seen func(body []byte)) (*TimedFake, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the fake provider: %w", err)
	}
	f := &TimedFake{URL: "http://" + ln.Addr().String(), inner: inner, seen: seen}
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go f.srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed on Close
	return f, nil
}

func (f *TimedFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var body []byte
	if f.seen != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	f.inner.ServeHTTP(w, r)
	f.ns.Add(int64(time.Since(start)))
	if f.seen != nil {
		f.seen(body)
	}
}

// Served is the time spent in the handler so far.
func (f *TimedFake) Served() time.Duration { return time.Duration(f.ns.Load()) }

// Close stops serving.
func (f *TimedFake) Close() { _ = f.srv.Close() }

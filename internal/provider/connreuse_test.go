package provider_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// countingProvider serves the fake provider, counting the connections
// opened to it; after each answer it runs after (nil: nothing), before
// net/http ends the response.
func countingProvider(t *testing.T, after func(r *http.Request)) (url string, conns *atomic.Int32) {
	f := fakeprovider.NewHandler()
	conns = &atomic.Int32{}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.ServeHTTP(w, r)
		if after != nil {
			after(r)
		}
	}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	t.Cleanup(f.Close)
	return ts.URL, conns
}

var hello = json.RawMessage(`[{"role":"user","content":[{"type":"text","text":"hi"}]}]`)

// TestCallsReuseTheirConnection: calls made one after the other share one
// HTTP/1.1 connection, streamed or not, also when the stream's end reaches
// the client after its last event (as over a real network). A stream
// closed before its end was read closes its connection, and with a real
// provider the next call pays a TLS handshake.
func TestCallsReuseTheirConnection(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "whole", true: "stream"}[stream], func(t *testing.T) {
			// The end of the response leaves the provider a little after
			// its last event.
			url, conns := countingProvider(t, func(*http.Request) { time.Sleep(20 * time.Millisecond) })
			c := &provider.Client{HTTP: &http.Client{Transport: &http.Transport{}}}
			ep := provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: url, Model: "m", MaxTokens: 100, AuthToken: "t"}
			for range 5 {
				var err error
				if stream {
					_, err = c.CallStreaming(context.Background(), ep, hello, nil, nil)
				} else {
					_, err = c.Call(context.Background(), ep, hello, nil)
				}
				require.NoError(t, err)
			}
			assert.Equal(t, int32(1), conns.Load(), "connections opened for 5 calls one after the other")
		})
	}
}

// TestStreamThatDoesNotEndStillAnswers: a provider that keeps the stream
// open after the answer's last event does not hold the call.
func TestStreamThatDoesNotEndStillAnswers(t *testing.T) {
	url, _ := countingProvider(t, func(r *http.Request) { <-r.Context().Done() })
	c := &provider.Client{HTTP: &http.Client{Transport: &http.Transport{}}}
	ep := provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: url, Model: "m", MaxTokens: 100, AuthToken: "t"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.CallStreaming(ctx, ep, hello, nil, nil)
	require.NoError(t, err)
	assert.Contains(t, string(resp.Canonical.Content), "echo: hi")
	require.NoError(t, ctx.Err(), "the call waited for the stream's end until its own deadline")
}

// TestConcurrentCallsKeepTheirConnections: calls made together keep their
// connections for the next ones (http.DefaultTransport keeps two per host
// and closes the others).
func TestConcurrentCallsKeepTheirConnections(t *testing.T) {
	const n = 8
	var arrived atomic.Int32
	all := make(chan struct{}) // closed when the round's n calls have all arrived
	rounds := []chan struct{}{all, make(chan struct{})}
	var round atomic.Int32
	f := fakeprovider.NewHandler()
	var conns atomic.Int32
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every call of a round is in flight before any is answered, so
		// each needs a connection of its own.
		ch := rounds[round.Load()]
		if arrived.Add(1) == n {
			close(ch)
		}
		<-ch
		f.ServeHTTP(w, r)
	}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	t.Cleanup(f.Close)
	c := &provider.Client{HTTP: provider.NewHTTPClient()}
	ep := provider.Endpoint{Kind: provider.KindAnthropic, BaseURL: ts.URL, Model: "m", MaxTokens: 100, AuthToken: "t"}
	for r := range 2 {
		round.Store(int32(r))
		arrived.Store(0)
		errs := make(chan error, n)
		for range n {
			go func() {
				_, err := c.CallStreaming(context.Background(), ep, hello, nil, nil)
				errs <- err
			}()
		}
		for range n {
			require.NoError(t, <-errs)
		}
	}
	assert.Equal(t, int32(n), conns.Load(), "connections opened for two rounds of %d calls at once", n)
}

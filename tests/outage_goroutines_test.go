package tests

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// serverGoroutines counts this process's goroutines running the server's
// own code (the API, the store, the app's loops), not the test's clients.
func serverGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("bae-go/bae-go/tests.")) {
			continue
		}
		for _, pkg := range []string{"bae-go/bae-go/api.", "bae-go/bae-go/store.", "bae-go/bae-go/internal/app."} {
			if bytes.Contains(g, []byte(pkg)) {
				n++
				break
			}
		}
	}
	return n
}

// TestStreamsAcrossAnOutageLeaveNoGoroutines: streams open when
// PostgreSQL goes away, and clients that keep reconnecting and giving up
// through the outage, leave the server's goroutines where they were once
// the database is back and the clients are gone (the chaos campaign's
// growth check: a replica's goroutines follow its clients, not its faults).
func TestStreamsAcrossAnOutageLeaveNoGoroutines(t *testing.T) {
	e := newEdgeEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	subscribe := func(ctx context.Context) {
		st := e.srv.RPCStream(t, ctx, e.sid, e.sk, map[string]any{"jsonrpc": "2.0", "id": 9, "method": "session.subscribe", "params": map[string]any{"since_event_id": "evt_none"}})
		defer st.Close()
		st.Next(time.Second)
	}
	http.DefaultClient.CloseIdleConnections()
	require.Eventually(t, func() bool { return serverGoroutines() < 1000 }, 10*time.Second, 50*time.Millisecond)
	before := serverGoroutines()

	// Streams open through the outage.
	const n = 8
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	for range n {
		st := e.srv.RPCStream(t, sctx, e.sid, e.sk, map[string]any{"jsonrpc": "2.0", "id": 9, "method": "session.subscribe", "params": map[string]any{"since_event_id": "evt_none"}})
		defer st.Close()
		require.NotNil(t, st.Next(30*time.Second), "the stream replays the log")
	}
	require.GreaterOrEqual(t, serverGoroutines(), before+n, "each open stream holds the server's goroutines")
	e.proxy.Down()
	// Clients that come and give up meanwhile, sends and subscriptions.
	for round := range 3 {
		for i := range n {
			cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
			if i%2 == 0 {
				subscribe(cctx)
			} else {
				st := e.srv.RPCStream(t, cctx, e.sid, e.sk, sendReq(100*round+i, "during the outage"))
				st.Next(time.Second)
				st.Close()
			}
			ccancel()
		}
	}
	e.proxy.Up()
	stop()
	http.DefaultClient.CloseIdleConnections()
	require.Eventually(t, func() bool { return serverGoroutines() <= before+4 }, 30*time.Second, 100*time.Millisecond,
		"the server's goroutines back to %d after the outage and its clients", before)
}

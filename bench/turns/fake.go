package main

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// reqHeader tags each provider request so the fake's OnRequest hook (which
// sees the parsed body, hence the turn's token) and the timing wrapper
// (which sees the whole handler call) can be joined.
const reqHeader = "X-Bench-Request"

// rotateEvery bounds the fake's memory: fakeprovider records every request
// (headers, raw and parsed body, growing with history) and has no reset, so
// over a long run its log would show up as heap growth that is not the
// server's. Every rotateEvery requests a fresh generation takes over; the
// old one is garbage once its in-flight requests finish.
const rotateEvery = 100

// timedFake serves the echoing fakeprovider and measures, per turn, the time
// spent inside its handler: the same interval fakeprovider.ServedTime sums,
// but attributed to the turn whose user message the request answers.
//
// Why this is sound: each turn's user message is a unique token, and the
// echo fake answers the request whose last user text is that token. The
// wrapper's timer stops when the inner handler returns, which is before
// net/http flushes the response to baesrv, so a turn's provider time is
// recorded before baesrv can even see the reply, let alone finish the turn.
// Retries (a second request for the same turn) add up.
type timedFake struct {
	cur      atomic.Pointer[fakeprovider.Server]
	seq      atomic.Int64
	requests atomic.Int64
	servedNs atomic.Int64
	// conns counts the connections opened to the fake: one per provider
	// call means baesrv's client could not reuse its connections.
	conns atomic.Int64

	tokens  sync.Map // request id -> token (written by the OnRequest hook)
	perTurn sync.Map // token -> *fakeTurn
}

type fakeTurn struct {
	ns       atomic.Int64
	bytes    atomic.Int64 // request bodies
	requests atomic.Int32
	first    atomic.Int64 // unix ns the first request entered the handler
	last     atomic.Int64 // unix ns the last request left it
}

func newTimedFake() *timedFake {
	f := &timedFake{}
	f.cur.Store(f.generation())
	return f
}

func (f *timedFake) generation() *fakeprovider.Server {
	g := fakeprovider.NewHandler() // default reply: zero-latency echo
	g.OnRequest(func(rec fakeprovider.Recorded) {
		f.tokens.Store(rec.Header.Get(reqHeader), rec.LastUserText())
	})
	return g
}

func (f *timedFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := strconv.FormatInt(f.seq.Add(1), 10)
	r.Header.Set(reqHeader, id)
	g := f.cur.Load()
	start := time.Now()
	g.ServeHTTP(w, r)
	d := time.Since(start)

	f.servedNs.Add(int64(d))
	if n := f.requests.Add(1); n%rotateEvery == 0 {
		f.cur.Store(f.generation())
	}
	tok, ok := f.tokens.LoadAndDelete(id)
	if !ok {
		return // not a provider call (bad route/body): nothing to attribute
	}
	v, _ := f.perTurn.LoadOrStore(tok.(string), &fakeTurn{})
	ft := v.(*fakeTurn)
	ft.ns.Add(int64(d))
	ft.bytes.Add(r.ContentLength)
	ft.requests.Add(1)
	ft.first.CompareAndSwap(0, start.UnixNano())
	ft.last.Store(start.Add(d).UnixNano())
}

// fakeTime is what the fake spent on one turn.
type fakeTime struct {
	Total       time.Duration
	Requests    int
	Bytes       int64     // request bodies, the provider body bae-go built
	First, Last time.Time // wall clock, for the server timeline
}

// take returns and forgets the provider time recorded for token.
func (f *timedFake) take(token string) (fakeTime, bool) {
	v, ok := f.perTurn.LoadAndDelete(token)
	if !ok {
		return fakeTime{}, false
	}
	ft := v.(*fakeTurn)
	return fakeTime{
		Total: time.Duration(ft.ns.Load()), Requests: int(ft.requests.Load()), Bytes: ft.bytes.Load(),
		First: time.Unix(0, ft.first.Load()), Last: time.Unix(0, ft.last.Load()),
	}, true
}

// Served is the total handler time across all generations.
func (f *timedFake) Served() time.Duration { return time.Duration(f.servedNs.Load()) }

// Requests is the number of requests served.
func (f *timedFake) Requests() int64 { return f.requests.Load() }

// connState is the fake server's http.Server.ConnState.
func (f *timedFake) connState(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		f.conns.Add(1)
	}
}

// Conns is how many connections were opened to the fake so far.
func (f *timedFake) Conns() int64 { return f.conns.Load() }

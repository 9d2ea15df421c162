package api

import (
	"context"
	"sync"
	"time"

	"github.com/bae-go/bae-go/store"
)

// streamWatch counts the live session.subscribe streams of this replica,
// per session and per client key, and re-checks their authorization once
// per session, not once per stream: each watched session has one checker,
// woken by the hub's re-check announcements (a revocation, a session end)
// and by a slow fallback poll. However many streams a session has, its
// checks cost the database the same.
type streamWatch struct {
	c *clientAPI

	mu       sync.Mutex
	sessions map[string]*sessionWatch
	perKey   map[string]int // live streams per client key
}

// sessionWatch is one session's shared checker and its latest verdict.
type sessionWatch struct {
	id      string
	streams int
	keys    map[string]int // live streams per session key
	// gen counts completed checks; changed closes when the next completes.
	gen     uint64
	changed chan struct{}
	verdict map[string]*RPCError // by session key; nil entry: authorized
	stop    context.CancelFunc
}

func newStreamWatch(c *clientAPI) *streamWatch {
	return &streamWatch{c: c, sessions: map[string]*sessionWatch{}, perKey: map[string]int{}}
}

// streamTicket is one stream's place in the watch.
type streamTicket struct {
	w        *streamWatch
	s        *sessionWatch
	keyID    string // the session key
	clientID string // the client key behind it
	seen     uint64
	once     sync.Once
}

// join admits a stream of call's session, or refuses it with the cap it
// would exceed.
func (w *streamWatch) join(call *rpcCall) (*streamTicket, *store.QuotaError) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.sessions[call.sess.ID]
	if n := w.c.MaxStreamsPerSession; n > 0 && s != nil && s.streams >= n {
		return nil, &store.QuotaError{Scope: store.ScopeSession, Resource: store.ResourceStreams, Limit: n}
	}
	if n := w.c.MaxStreamsPerKey; n > 0 && w.perKey[call.clientID] >= n {
		return nil, &store.QuotaError{Scope: store.ScopeClientKey, Resource: store.ResourceStreams, Limit: n}
	}
	if s == nil {
		s = &sessionWatch{id: call.sess.ID, keys: map[string]int{}, changed: make(chan struct{}), verdict: map[string]*RPCError{}}
		// The hub's waiter is attached before join returns, so an
		// announcement after the stream's own first check is not missed.
		waiter := w.c.Hub.Watch(s.id)
		ctx, cancel := context.WithCancel(context.Background())
		s.stop = cancel
		w.sessions[s.id] = s
		go w.run(ctx, s, waiter.Recheck(), waiter.Close)
	}
	s.streams++
	s.keys[call.keyID]++
	w.perKey[call.clientID]++
	return &streamTicket{w: w, s: s, keyID: call.keyID, clientID: call.clientID, seen: s.gen}, nil
}

// leave gives the stream's place back; the last stream of a session stops
// its checker.
func (t *streamTicket) leave() {
	t.once.Do(func() {
		w := t.w
		w.mu.Lock()
		defer w.mu.Unlock()
		s := t.s
		s.streams--
		if s.keys[t.keyID]--; s.keys[t.keyID] == 0 {
			delete(s.keys, t.keyID)
		}
		if w.perKey[t.clientID]--; w.perKey[t.clientID] == 0 {
			delete(w.perKey, t.clientID)
		}
		if s.streams == 0 {
			s.stop()
			delete(w.sessions, s.id)
		}
	})
}

// closedChan is an always-ready channel: a check completed that the
// stream has not looked at yet.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// checked fires when a check completed since the stream last read its
// verdict.
func (t *streamTicket) checked() <-chan struct{} {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	if t.seen != t.s.gen {
		return closedChan
	}
	return t.s.changed
}

// verdict is the latest check's answer for the stream: nil while it is
// still authorized.
func (t *streamTicket) verdict() *RPCError {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	t.seen = t.s.gen
	return t.s.verdict[t.keyID]
}

// run is a session's checker: one read of the session's access facts per
// announcement or poll, shared by all its streams.
func (w *streamWatch) run(ctx context.Context, s *sessionWatch, recheck <-chan struct{}, done func()) {
	defer done()
	poll := time.NewTicker(w.c.recheckInterval())
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		case <-recheck:
		}
		w.mu.Lock()
		keys := make([]string, 0, len(s.keys))
		for k := range s.keys {
			keys = append(keys, k)
		}
		w.mu.Unlock()
		w.c.accessReads.Add(1)
		a, err := w.c.Store.SessionAccess(ctx, s.id, keys)
		if err != nil {
			// A database blip is not a revocation; the next check decides.
			if ctx.Err() == nil {
				w.c.Log.Warn("stream authorization re-check failed", "session_id", s.id, "err", err)
			}
			continue
		}
		verdict := make(map[string]*RPCError, len(keys))
		for _, k := range keys {
			verdict[k] = accessVerdict(a.Found && a.LiveKeys[k], a.ProfileLive, a.State, false)
		}
		w.mu.Lock()
		s.verdict = verdict
		s.gen++
		close(s.changed)
		s.changed = make(chan struct{})
		w.mu.Unlock()
	}
}

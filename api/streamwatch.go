package api

import (
	"context"
	"sync"
	"time"

	"github.com/bae-go/bae-go/store"
)

// streamWatch counts the live streams of this replica (session.subscribe
// streams and session.sendMessage relays), per session and per client key,
// and re-checks their authorization once per session, not once per
// stream: each watched session has one checker, woken by the hub's
// re-check announcements (a revocation, a session end) and by a slow
// fallback poll. However many streams a session has, its checks cost the
// database the same.
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
	turns   map[string]int // live relays per turn
	// gen counts completed checks; changed closes when the next completes.
	gen     uint64
	changed chan struct{}
	// access is the latest check's facts (nil before the first), for the
	// session keys and relayed turns it asked about.
	access     *store.SessionAccess
	askedKeys  map[string]bool
	askedTurns map[string]bool
	stop       context.CancelFunc
}

func newStreamWatch(c *clientAPI) *streamWatch {
	w := &streamWatch{c: c, sessions: map[string]*sessionWatch{}, perKey: map[string]int{}}
	c.StreamCounts.attach(w.counts)
	return w
}

// counts is this replica's live streams by session and client key, for
// the other replicas' caps (StreamCounts).
func (w *streamWatch) counts() map[store.StreamSubject]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[store.StreamSubject]int, len(w.sessions)+len(w.perKey))
	for id, s := range w.sessions {
		out[store.StreamSubject{Scope: store.ScopeSession, Subject: id}] = s.streams
	}
	for id, n := range w.perKey {
		out[store.StreamSubject{Scope: store.ScopeClientKey, Subject: id}] = n
	}
	return out
}

// streamTicket is one stream's place in the watch.
type streamTicket struct {
	w        *streamWatch
	s        *sessionWatch
	keyID    string // the session key
	clientID string // the client key behind it
	turnID   string // a sendMessage relay's turn ("" for a subscribe stream)
	seen     uint64
	once     sync.Once
}

// join admits a stream of call's session (a relay of turnID, or a
// subscribe stream when turnID is ""), or refuses it with the cap it would
// exceed, counting the other replicas' streams as last read.
func (w *streamWatch) join(call *rpcCall, turnID string) (*streamTicket, *store.QuotaError) {
	sc := w.c.StreamCounts
	elsewhereSession := sc.elsewhere(store.ScopeSession, call.sess.ID)
	elsewhereKey := sc.elsewhere(store.ScopeClientKey, call.clientID)
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.sessions[call.sess.ID]
	here := 0
	if s != nil {
		here = s.streams
	}
	if n := w.c.MaxStreamsPerSession; n > 0 && here+elsewhereSession >= n {
		return nil, &store.QuotaError{Scope: store.ScopeSession, Resource: store.ResourceStreams, Limit: n}
	}
	if n := w.c.MaxStreamsPerKey; n > 0 && w.perKey[call.clientID]+elsewhereKey >= n {
		return nil, &store.QuotaError{Scope: store.ScopeClientKey, Resource: store.ResourceStreams, Limit: n}
	}
	if s == nil {
		s = &sessionWatch{id: call.sess.ID, keys: map[string]int{}, turns: map[string]int{}, changed: make(chan struct{})}
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
	if turnID != "" {
		s.turns[turnID]++
	}
	w.perKey[call.clientID]++
	return &streamTicket{w: w, s: s, keyID: call.keyID, clientID: call.clientID, turnID: turnID, seen: s.gen}, nil
}

// relay makes a relay's ticket the relay of turnID (a send that found
// its message stored by a concurrent request relays that one's turn).
func (t *streamTicket) relay(turnID string) {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	s := t.s
	if t.turnID == turnID {
		return
	}
	if t.turnID != "" {
		if s.turns[t.turnID]--; s.turns[t.turnID] == 0 {
			delete(s.turns, t.turnID)
		}
	}
	t.turnID = turnID
	if turnID != "" {
		s.turns[turnID]++
	}
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
		if t.turnID != "" {
			if s.turns[t.turnID]--; s.turns[t.turnID] == 0 {
				delete(s.turns, t.turnID)
			}
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
// still authorized, or while no check has asked about it yet.
func (t *streamTicket) verdict() *RPCError {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	t.seen = t.s.gen
	a := t.s.access
	if a == nil || !t.s.askedKeys[t.keyID] {
		return nil
	}
	if t.turnID != "" && !t.s.askedTurns[t.turnID] && a.State != store.StateOpen {
		// Whether the relay's own turn ended the session (it then still
		// gets its result) is the next check's to say.
		return nil
	}
	return accessVerdict(a.Found && a.LiveKeys[t.keyID], a.ProfileLive, a.State, t.turnID != "" && a.EndedTurns[t.turnID])
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
		turns := make([]string, 0, len(s.turns))
		for id := range s.turns {
			turns = append(turns, id)
		}
		w.mu.Unlock()
		w.c.accessReads.Add(1)
		a, err := w.c.Store.SessionAccess(ctx, s.id, keys, turns)
		if err != nil {
			// A database blip is not a revocation; the next check decides.
			if ctx.Err() == nil {
				w.c.Log.Warn("stream authorization re-check failed", "session_id", s.id, "err", err)
			}
			continue
		}
		asked := func(ids []string) map[string]bool {
			m := make(map[string]bool, len(ids))
			for _, id := range ids {
				m[id] = true
			}
			return m
		}
		askedKeys, askedTurns := asked(keys), asked(turns)
		w.mu.Lock()
		s.access, s.askedKeys, s.askedTurns = &a, askedKeys, askedTurns
		s.gen++
		close(s.changed)
		s.changed = make(chan struct{})
		w.mu.Unlock()
	}
}

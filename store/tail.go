package store

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bae-go/bae-go/internal/lib/ids"
)

// Limits of the event tail (see eventTail).
const (
	tailEventsPerSession = 64
	tailBytesPerSession  = 1 << 20
	tailBytes            = 32 << 20
	tailSessions         = 4096
)

// eventTail keeps, per session, the latest events this process appended,
// so a local reader following the log (a sendMessage relay, a subscriber)
// gets them without a query. It answers a read only when it holds every
// event after the reader's position that anyone announced: the highest
// sequence seen in another process's notice (or in an append this process
// could not account for) is not beyond what it holds. Otherwise the reader
// goes to the table, as it always did.
//
// Followers read after a wake-up, so a notice that reaches this process
// after the read just means one more read; one-shot reads (GET /events, a
// replay) never use the tail.
//
// Only sessions someone follows in this process are kept: a follower's
// first read creates the entry, which then collects the appends.
type eventTail struct {
	mu       sync.Mutex
	sessions map[string]*sessionTail
	bytes    int
}

type sessionTail struct {
	evs   []Event // contiguous sequence numbers, ascending
	bytes int
	known int64 // highest sequence announced for the session
	used  time.Time
}

func newEventTail() *eventTail { return &eventTail{sessions: map[string]*sessionTail{}} }

// follow returns the session's entry, creating it for a new follower.
func (t *eventTail) follow(sessionID string) *sessionTail {
	st := t.sessions[sessionID]
	if st == nil {
		for len(t.sessions) >= tailSessions {
			t.evictOldest("")
		}
		st = &sessionTail{}
		t.sessions[sessionID] = st
	}
	st.used = time.Now()
	return st
}

func (t *eventTail) evictOldest(keep string) bool {
	var oldest string
	var at time.Time
	for id, st := range t.sessions {
		if id != keep && (oldest == "" || st.used.Before(at)) {
			oldest, at = id, st.used
		}
	}
	if oldest == "" {
		return false
	}
	t.bytes -= t.sessions[oldest].bytes
	delete(t.sessions, oldest)
	return true
}

func eventSize(e Event) int { return len(e.Payload) + 256 }

// add records committed events of one followed session, in order.
func (t *eventTail) add(sessionID string, evs []Event) {
	if len(evs) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.sessions[sessionID]
	if st == nil {
		return // nobody follows it here
	}
	before := st.bytes
	for _, e := range evs {
		switch last := st.last(); {
		case last != 0 && e.Seq <= last:
			continue
		case last != 0 && e.Seq != last+1:
			// Someone else appended in between: start again from here.
			st.evs, st.bytes = nil, 0
		}
		st.evs = append(st.evs, e)
		st.bytes += eventSize(e)
		st.known = max(st.known, e.Seq)
	}
	for len(st.evs) > 1 && (len(st.evs) > tailEventsPerSession || st.bytes > tailBytesPerSession) {
		st.bytes -= eventSize(st.evs[0])
		st.evs = st.evs[1:]
	}
	t.bytes += st.bytes - before
	for t.bytes > tailBytes && t.evictOldest(sessionID) {
	}
}

func (st *sessionTail) last() int64 {
	if len(st.evs) == 0 {
		return 0
	}
	return st.evs[len(st.evs)-1].Seq
}

// announced records that the session's log reaches seq.
func (t *eventTail) announced(sessionID string, seq int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.sessions[sessionID]; st != nil {
		st.known = max(st.known, seq)
	}
}

// forget drops what is held for a session (nil: every session).
func (t *eventTail) forget(sessionIDs ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(sessionIDs) == 0 {
		clear(t.sessions)
		t.bytes = 0
		return
	}
	for _, id := range sessionIDs {
		if st := t.sessions[id]; st != nil {
			t.bytes -= st.bytes
			delete(t.sessions, id)
		}
	}
}

// after answers a follower's read from memory when it can.
func (t *eventTail) after(sessionID string, after int64, limit int) ([]Event, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.follow(sessionID)
	if len(st.evs) == 0 || st.known > st.last() || after < st.evs[0].Seq-1 {
		return nil, false
	}
	if after >= st.last() {
		return nil, true
	}
	i := int(after - st.evs[0].Seq + 1)
	j := min(len(st.evs), i+limit)
	return append([]Event(nil), st.evs[i:j]...), true
}

// settle hands a finished transaction's events to the tail and wakes the
// local followers. After a failure it cannot tell whether the commit
// reached the database, so it forgets those sessions' tails and wakes the
// followers to read the table.
func (s *Store) settle(t *trackedTx, err error) {
	for sid, evs := range t.appended {
		if err != nil {
			s.tail.forget(sid)
		} else {
			s.tail.add(sid, evs)
		}
		if fn := s.onLocalAppend; fn != nil {
			fn(sid)
		}
	}
}

// OnLocalAppend sets the function called with a session id after this
// process committed events for it (set once, before serving).
func (s *Store) OnLocalAppend(fn func(sessionID string)) { s.onLocalAppend = fn }

// eventsNotice is the NOTIFY payload of an append: "<session>/<seq>", plus
// "/<origin>" when the appending process accounts for the events itself.
func eventsNotice(sessionID string, seq int64, origin string) string {
	n := sessionID + "/" + strconv.FormatInt(seq, 10)
	if origin != "" {
		n += "/" + origin
	}
	return n
}

// Announced reads an EventsChannel notice. It returns the session and
// whether its local followers should be woken: not for this process's own
// tracked appends, whose followers were woken when they committed.
func (s *Store) Announced(payload string) (sessionID string, wake bool) {
	sid, rest, _ := strings.Cut(payload, "/")
	seqStr, origin, _ := strings.Cut(rest, "/")
	if origin != "" && origin == s.origin {
		return sid, false
	}
	if seq, err := strconv.ParseInt(seqStr, 10, 64); err == nil {
		s.tail.announced(sid, seq)
	} else {
		s.tail.forget(sid)
	}
	return sid, true
}

// MissedNotices is called when notices may have been lost (the listening
// connection was down): nothing held in memory can be trusted to be
// complete any more.
func (s *Store) MissedNotices() { s.tail.forget() }

// FollowEvents is EventsAfter for a follower that reads again on every
// wake-up: events this process appended come from memory.
func (s *Store) FollowEvents(ctx context.Context, sessionID string, after int64, limit int) ([]Event, error) {
	if evs, ok := s.tail.after(sessionID, after, limit); ok {
		if err := s.materialize(ctx, s.Pool, sessionID, evs); err != nil {
			return nil, err
		}
		return evs, nil
	}
	return s.EventsAfter(ctx, sessionID, after, limit)
}

func newOrigin() string { return ids.New("")[:12] }

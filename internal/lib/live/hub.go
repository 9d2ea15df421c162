// Package live wakes local listeners when a session's event log grows, on
// any replica. Appends NOTIFY a PostgreSQL channel naming the session and
// its new head; each process keeps one LISTEN connection and fans wake-ups
// out to its local waiters, which then read new rows by sequence (from
// memory for this process's own appends, see store.FollowEvents). Wake-ups
// carry no events, so a missed or coalesced one loses nothing: readers
// always catch up from the table.
package live

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bae-go/bae-go/store"
)

// ControlChannel carries cross-replica control messages: "unsubscribe:<sid>"
// ends every subscribe stream of a session; "closed:<sid>" announces a
// session ended so replicas drop its live resources; "auth:<id>" says a key
// or profile was revoked, so every stream re-checks its authorization;
// "stop:<sid>/<turn>" asks the replica running that turn's provider call to
// stop it now (an interrupt's fast path, see StopTurn).
const ControlChannel = "bae_control"

// StopTurn is the control message asking whichever replica runs turnID's
// provider call to stop it at once: the Interrupt update that follows
// reaches the workflow only when the workflow task running that call
// ends, so without it an interrupt waits for the task's next heartbeat.
func StopTurn(sessionID, turnID string) string { return "stop:" + sessionID + "/" + turnID }

// AuthChanged is the control message announcing that key or profile id was
// revoked or deleted.
func AuthChanged(id string) string { return "auth:" + id }

// Waiter is one local listener on one session.
type Waiter struct {
	hub       *Hub
	sessionID string
	wake      chan struct{}
	recheck   chan struct{}
	unsub     chan struct{}
	once      sync.Once
}

// Wake fires (coalesced) whenever new events may exist.
func (w *Waiter) Wake() <-chan struct{} { return w.wake }

// Recheck fires (coalesced) when the stream's authorization may have
// changed: a key or profile was revoked, or the session ended.
func (w *Waiter) Recheck() <-chan struct{} { return w.recheck }

// Unsubscribed closes when session.unsubscribe was called for the session.
func (w *Waiter) Unsubscribed() <-chan struct{} { return w.unsub }

// Close detaches the waiter.
func (w *Waiter) Close() {
	w.once.Do(func() {
		w.hub.mu.Lock()
		defer w.hub.mu.Unlock()
		set := w.hub.waiters[w.sessionID]
		delete(set, w)
		if len(set) == 0 {
			delete(w.hub.waiters, w.sessionID)
		}
	})
}

// Notices reads event notices for the hub: the session a notice is about
// and whether its local waiters need waking (not for this process's own
// appends, whose waiters the store woke when they committed), and learns
// when notices may have been missed.
type Notices interface {
	Announced(payload string) (sessionID string, wake bool)
	MissedNotices()
}

// Hub is the per-process fan-out.
type Hub struct {
	pool    *pgxpool.Pool
	notices Notices
	log     *slog.Logger
	mu      sync.Mutex
	waiters map[string]map[*Waiter]struct{}
	onClose []func(sessionID string)
	onStop  []func(sessionID, turnID string)
	ready   chan struct{}
	readyMu sync.Once
	deltas  *Deltas
	// connected is set once the first LISTEN was established: a later
	// one may have missed deltas.
	connected bool
	// turns are the local waiters for turn results, by turn id.
	turns map[string]map[chan []byte]struct{}
}

// New creates a hub; call Run to start listening.
func New(pool *pgxpool.Pool, log *slog.Logger) *Hub {
	h := &Hub{pool: pool, log: log, waiters: map[string]map[*Waiter]struct{}{}, turns: map[string]map[chan []byte]struct{}{}, ready: make(chan struct{}), deltas: newDeltas(pool)}
	if log != nil {
		h.deltas.log = log
	}
	return h
}

// Deltas is the process's side channel for live deltas.
func (h *Hub) Deltas() *Deltas { return h.deltas }

// UseNotices makes the hub read event notices through n (set before Run).
// Without it a notice's payload is the session id.
func (h *Hub) UseNotices(n Notices) { h.notices = n }

// Wake wakes the local waiters of a session.
func (h *Hub) Wake(sessionID string) { h.wake(sessionID) }

// WatchTurn returns a channel that fires when turnID's result may have been
// recorded, on any replica, carrying the result when the notice held it
// (nil: read it from the store), and the function that detaches it. After
// a reconnect every turn waiter fires with nil, since notices may have been
// missed.
func (h *Hub) WatchTurn(turnID string) (<-chan []byte, func()) {
	ch := make(chan []byte, 1)
	h.mu.Lock()
	set := h.turns[turnID]
	if set == nil {
		set = map[chan []byte]struct{}{}
		h.turns[turnID] = set
	}
	set[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.turns[turnID], ch)
		if len(h.turns[turnID]) == 0 {
			delete(h.turns, turnID)
		}
	}
}

// TurnDone wakes the local waiters of turnID with its result (nil when
// they should read it). The store calls it after this process recorded a
// result; notices from other replicas call it too.
func (h *Hub) TurnDone(turnID string, result []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.turns[turnID] {
		select {
		case ch <- result:
		default:
			// A wake-up is pending: make sure it does not hide a result.
			if result != nil {
				select {
				case <-ch:
				default:
				}
				ch <- result
			}
		}
	}
}

func (h *Hub) wakeAllTurns() {
	h.mu.Lock()
	ids := make([]string, 0, len(h.turns))
	for id := range h.turns {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.TurnDone(id, nil)
	}
}

// Ready closes once the first LISTEN is established.
func (h *Hub) Ready() <-chan struct{} { return h.ready }

// OnSessionClosed registers a callback run (on every replica) when a session
// is announced closed.
func (h *Hub) OnSessionClosed(fn func(sessionID string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onClose = append(h.onClose, fn)
}

// OnStopTurn registers a callback run (on every replica) when a StopTurn
// message arrives.
func (h *Hub) OnStopTurn(fn func(sessionID, turnID string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onStop = append(h.onStop, fn)
}

// Watch attaches a waiter to sessionID. Callers must Close it.
func (h *Hub) Watch(sessionID string) *Waiter {
	w := &Waiter{hub: h, sessionID: sessionID, wake: make(chan struct{}, 1), recheck: make(chan struct{}, 1), unsub: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.waiters[sessionID]
	if set == nil {
		set = map[*Waiter]struct{}{}
		h.waiters[sessionID] = set
	}
	set[w] = struct{}{}
	return w
}

func (h *Hub) wake(sessionID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters[sessionID] {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (h *Hub) wakeAll() {
	h.mu.Lock()
	ids := make([]string, 0, len(h.waiters))
	for id := range h.waiters {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.wake(id)
	}
}

// recheck signals the waiters of sessionID, or of every session when
// sessionID is "": revocations name a key, not its sessions, and are rare.
func (h *Hub) recheck(sessionID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	signal := func(set map[*Waiter]struct{}) {
		for w := range set {
			select {
			case w.recheck <- struct{}{}:
			default:
			}
		}
	}
	if sessionID != "" {
		signal(h.waiters[sessionID])
		return
	}
	for _, set := range h.waiters {
		signal(set)
	}
}

func (h *Hub) unsubscribe(sessionID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters[sessionID] {
		select {
		case <-w.unsub:
		default:
			close(w.unsub)
		}
	}
}

// Publish sends a control message to every replica.
func Publish(ctx context.Context, pool *pgxpool.Pool, msg string) error {
	_, err := pool.Exec(ctx, `SELECT pg_notify($1, $2)`, ControlChannel, msg)
	return err
}

// Run listens until ctx ends, reconnecting after failures. After each
// (re)connect every waiter is woken, since notifications may have been
// missed while disconnected.
func (h *Hub) Run(ctx context.Context) {
	go h.deltas.run(ctx)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := h.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		h.log.Warn("event listener disconnected; reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

func (h *Hub) listen(ctx context.Context) error {
	pooled, err := h.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection stays in LISTEN state, so it never returns to the pool.
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck
	if h.deltas.interest {
		// Named before it listens: other replicas count the listeners
		// without this name as not announcing interests (DeltasChannel).
		if _, err := conn.Exec(ctx, "SET application_name = '"+InterestListener+"'"); err != nil {
			return err
		}
	}
	for _, ch := range []string{store.EventsChannel, ControlChannel, DeltasChannel, store.TurnsChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	// Before this replica is ready: a replica of an earlier version
	// already listening gets its deltas from the first turn on.
	if err := h.deltas.checkLegacy(ctx); err != nil {
		h.log.Warn("deltas: could not count the replicas that do not announce interests", "err", err)
	}
	h.readyMu.Do(func() { close(h.ready) })
	if h.connected {
		h.deltas.missed()
	}
	h.connected = true
	h.deltas.connected()
	// Notifications may have been missed while disconnected.
	if h.notices != nil {
		h.notices.MissedNotices()
	}
	h.wakeAll()
	h.wakeAllTurns()
	h.recheck("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		switch n.Channel {
		case store.EventsChannel:
			if h.notices == nil {
				sid, _, _ := strings.Cut(n.Payload, "/")
				h.wake(sid)
			} else if sid, wake := h.notices.Announced(n.Payload); wake {
				h.wake(sid)
			}
		case ControlChannel:
			h.control(n.Payload)
		case DeltasChannel:
			h.deltas.received(n.Payload)
		case store.TurnsChannel:
			h.TurnDone(store.TurnNotice(n.Payload))
		}
	}
}

func (h *Hub) control(msg string) {
	kind, sid, ok := strings.Cut(msg, ":")
	if !ok {
		return
	}
	switch kind {
	case "unsubscribe":
		h.unsubscribe(sid)
	case "auth":
		h.recheck("")
	case "stop":
		sessionID, turnID, ok := strings.Cut(sid, "/")
		if !ok || turnID == "" {
			return
		}
		h.mu.Lock()
		fns := append([]func(string, string){}, h.onStop...)
		h.mu.Unlock()
		for _, fn := range fns {
			fn(sessionID, turnID)
		}
	case "closed":
		h.mu.Lock()
		fns := append([]func(string){}, h.onClose...)
		h.mu.Unlock()
		for _, fn := range fns {
			fn(sid)
		}
		h.wake(sid)
		h.recheck(sid)
	}
}

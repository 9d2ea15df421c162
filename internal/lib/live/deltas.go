package live

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bae-go/bae-go/internal/lib/ids"
)

// DeltasChannel carries live deltas between replicas. Deltas are never
// stored: a notification holds a batch of them, at most notifyBudget bytes,
// and every replica keeps the recent deltas of each running turn it sees in
// memory (turnBuffer) for streams that resume.
//
// A replica sends a session's deltas through PostgreSQL only while another
// replica has announced interest in that session (it holds an opted-in
// stream on it, or held one within interestLinger): with every stream on
// the replica running the turn, as with one replica, a delta costs no
// notification. A notification's payload is "<origin>\n" and then one of
// "[<delta>,…]" (a batch), "+<sid> <sid>…" (interest, announced when a
// replica's first stream on a session opens and every announceEvery),
// "-<sid>…" (interest ended) or "?" (a replica (re)connected: announce
// again). A replica learning of a new interest sends the deltas it kept of
// that session's turns, so a stream that opened before its interest
// arrived misses nothing; receivers drop a delta they already hold.
//
// Replicas of a version before interest announcements send every delta
// and never announce, so a replica that sent only what was announced
// would leave their streams without deltas during a rolling upgrade. A
// replica that announces says so in its listening connection's
// application_name (InterestListener); every legacyCheckEvery it counts
// the connections of its database listening without it (pg_stat_activity,
// the same role sees their statements), and while there is one it sends
// every delta, as those replicas do, starting with the deltas it kept.
const DeltasChannel = "bae_deltas"

// InterestListener is the application_name of the listening connection of
// a replica that announces its interests (see DeltasChannel).
const InterestListener = "bae-listener interest/1"

// Delta kinds beyond the provider's (block_start, text_delta,
// input_json_delta).
const (
	// DeltaSuperseded: the deltas of the turn's current iteration sent so
	// far are void (the attempt failed mid-answer or was run again); the
	// deltas that follow replace them.
	DeltaSuperseded = "superseded"
	// DeltaReset: this stream missed some of the turn's deltas; the
	// turn's events are the answer.
	DeltaReset = "reset"
)

// RunSpan is how far apart the sequence numbers of two runs of a turn's
// provider calls are: run r numbers its deltas r*RunSpan+1, +2, …, so a
// turn's sequence only increases, across retries and fallbacks too.
const RunSpan = 1_000_000

// Delta is one piece of a turn's answer on its way to clients.
type Delta struct {
	SessionID string          `json:"s"`
	TurnID    string          `json:"t"`
	Iteration int             `json:"i"`
	Attempt   int             `json:"a"`
	Seq       int64           `json:"q"`
	Type      string          `json:"y"`
	Index     int             `json:"x,omitempty"`
	Text      string          `json:"d,omitempty"`
	Block     json.RawMessage `json:"b,omitempty"`
	// own: published by this process (a new remote interest gets these
	// again).
	own bool
	// notified: an own delta that went out on the channel (to every
	// listener, announcing or not).
	notified bool
	// line is the delta's encoded notification, shared by every stream it
	// is delivered to (set by deliver).
	line *lineCache
}

type lineCache struct {
	once sync.Once
	b    []byte
}

// Line is the delta's notification as enc encodes it: encoded once for
// every local stream it goes to, which all send the same bytes. The result
// must not be modified.
func (x Delta) Line(enc func(Delta) []byte) []byte {
	if x.line == nil {
		return enc(x)
	}
	x.line.once.Do(func() { x.line.b = enc(x) })
	return x.line.b
}

const (
	// notifyBudget bounds a notification's payload (PostgreSQL's limit is
	// 8000 bytes).
	notifyBudget = 7000
	// turnBufferLen is how many deltas of a turn a replica keeps for
	// resuming streams.
	turnBufferLen = 4096
	// turnBufferIdle drops a turn's buffer once no delta came for so long:
	// a stream resuming later relies on the turn's events. Every replica
	// keeps every running turn's deltas, so the window bounds memory (at
	// 8000 deltas/s, about 20 s × 8000 × 250 bytes).
	turnBufferIdle = 20 * time.Second
	// subQueueLen bounds what one slow stream may have pending; beyond it
	// the stream gets a reset marker instead.
	subQueueLen = 8192
	// announceEvery: a replica repeats its interests this often, so a
	// replica that missed them (started later, reconnected) learns them.
	announceEvery = 30 * time.Second
	// interestTTL forgets a replica's interest it did not repeat (the
	// replica died without saying so).
	interestTTL = 3*announceEvery + 10*time.Second
	// interestLinger keeps a session's interest after its last stream
	// closed, so that a client reconnecting to resume finds this
	// replica's buffer of the running turn whole.
	interestLinger = turnBufferIdle
	// legacyCheckEvery: how often a replica looks for listeners that do
	// not announce interests (replicas of an earlier version).
	legacyCheckEvery = 5 * time.Second
)

// Deltas is the per-process side channel: it publishes this process's
// deltas to local streams at once and to other replicas by NOTIFY, and
// delivers other replicas' deltas to local streams.
type Deltas struct {
	pool   *pgxpool.Pool
	origin string
	log    *slog.Logger
	// interest: this replica takes part in interest announcements (the
	// default); without, it announces nothing and sends every delta, as a
	// replica of a version before them does (WithoutInterest).
	interest bool

	mu   sync.Mutex
	subs map[string]map[*DeltaSub]struct{}
	// buffers are keyed by session and turn: a turn id is known to every
	// observer of its session, and must not open another session's turn.
	buffers map[turnKey]*turnBuffer
	// interested: sessions this replica announced interest in, with the
	// time their last local stream closed (zero while one is open).
	interested map[string]time.Time
	// remote: the other replicas interested in a session, by origin, with
	// when they last said so.
	remote map[string]map[string]time.Time
	// legacy: listeners on the database that do not announce interests,
	// at the last check; while there are any every delta is sent.
	legacy int
	// waiters: resuming streams waiting for a turn's deltas (AwaitBacklog),
	// woken by the next delta of the turn.
	waiters map[turnKey][]chan struct{}

	// inbound, when set, takes other replicas' delta batches in place of
	// their delivery (InterceptInbound).
	inbound atomic.Pointer[func([]Delta, func())]

	outMu   sync.Mutex
	out     []Delta  // deltas waiting for a notification
	ctl     []string // interest messages waiting
	queued  uint64
	sent    uint64
	kick    chan struct{}
	sentSig chan struct{} // closed and replaced after each send
}

func newDeltas(pool *pgxpool.Pool) *Deltas {
	return &Deltas{
		pool: pool, origin: ids.New("rep_"), log: slog.New(slog.DiscardHandler), interest: true,
		subs: map[string]map[*DeltaSub]struct{}{}, buffers: map[turnKey]*turnBuffer{},
		interested: map[string]time.Time{}, remote: map[string]map[string]time.Time{},
		waiters: map[turnKey][]chan struct{}{},
		kick:    make(chan struct{}, 1), sentSig: make(chan struct{}),
	}
}

// turnKey names a turn within its session.
type turnKey struct{ sessionID, turnID string }

// turnBuffer is the recent deltas of one turn.
type turnBuffer struct {
	sessionID string
	deltas    []Delta
	// complete: the buffer holds every delta of the turn's latest run from
	// its first, none evicted and no notification missed since.
	complete bool
	// evictedUpTo is the highest sequence evicted.
	evictedUpTo int64
	touched     time.Time
}

// DeltaSub is one stream's subscription to a session's deltas.
type DeltaSub struct {
	d         *Deltas
	sessionID string
	ready     chan struct{}
	mu        sync.Mutex
	queue     []Delta
	lost      bool
}

// Ready fires (coalesced) when deltas are pending.
func (s *DeltaSub) Ready() <-chan struct{} { return s.ready }

// Take returns the pending deltas, and whether some were lost because the
// stream fell behind.
func (s *DeltaSub) Take() ([]Delta, bool) { return s.TakeInto(nil) }

// TakeInto is Take that hands back buf, the slice an earlier call
// returned and the caller is done with, for the next deltas: a stream
// then allocates nothing per delta.
func (s *DeltaSub) TakeInto(buf []Delta) ([]Delta, bool) {
	clear(buf)
	s.mu.Lock()
	defer s.mu.Unlock()
	q, lost := s.queue, s.lost
	s.queue, s.lost = buf[:0], false
	return q, lost
}

// Close ends the subscription.
func (s *DeltaSub) Close() {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	set, ok := s.d.subs[s.sessionID]
	if _, in := set[s]; !ok || !in {
		return
	}
	delete(set, s)
	if len(set) == 0 {
		delete(s.d.subs, s.sessionID)
		// Interest lingers (see interestLinger); sweep ends it.
		s.d.interested[s.sessionID] = time.Now()
	}
}

func (s *DeltaSub) push(d Delta) {
	s.mu.Lock()
	if len(s.queue) >= subQueueLen {
		s.lost = true
	} else {
		s.queue = append(s.queue, d)
	}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Subscribe attaches a stream to a session's deltas. Callers must Close it.
func (d *Deltas) Subscribe(sessionID string) *DeltaSub {
	s := &DeltaSub{d: d, sessionID: sessionID, ready: make(chan struct{}, 1)}
	d.mu.Lock()
	defer d.mu.Unlock()
	set := d.subs[sessionID]
	if set == nil {
		set = map[*DeltaSub]struct{}{}
		d.subs[sessionID] = set
	}
	set[s] = struct{}{}
	if _, known := d.interested[sessionID]; !known && d.interest {
		d.enqueueCtl("+" + sessionID)
	}
	d.interested[sessionID] = time.Time{}
	return s
}

// Backlog is what this replica holds of a session's turn's deltas after
// sequence after, and whether that is all of them (false: some were not
// kept, or the turn is unknown here or not the session's, so a stream
// resuming must rely on the turn's events).
func (d *Deltas) Backlog(sessionID, turnID string, after int64) ([]Delta, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.backlogLocked(turnKey{sessionID, turnID}, after)
}

// AwaitBacklog is Backlog for a stream that subscribed to the session
// just now: while what this replica holds is not all of the turn's deltas
// after after, it waits up to wait for more of them. A replica whose
// first stream on a session opens announces its interest, and the replica
// running the turn answers by sending what it kept of the session's
// turns, so a resume on a replica that had no stream on the session is
// served whole within a notification round trip while the turn's text is
// still kept somewhere.
func (d *Deltas) AwaitBacklog(ctx context.Context, sessionID, turnID string, after int64, wait time.Duration) ([]Delta, bool) {
	k := turnKey{sessionID, turnID}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		d.mu.Lock()
		out, complete := d.backlogLocked(k, after)
		if complete {
			d.mu.Unlock()
			return out, true
		}
		ch := make(chan struct{})
		d.waiters[k] = append(d.waiters[k], ch)
		d.mu.Unlock()
		select {
		case <-ch:
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		d.mu.Lock()
		ws := d.waiters[k]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(d.waiters, k)
		} else {
			d.waiters[k] = ws
		}
		out, complete = d.backlogLocked(k, after)
		d.mu.Unlock()
		return out, complete
	}
}

func (d *Deltas) backlogLocked(k turnKey, after int64) ([]Delta, bool) {
	b := d.buffers[k]
	if b == nil {
		return nil, false
	}
	var out []Delta
	for _, x := range b.deltas {
		if x.Seq > after {
			out = append(out, x)
		}
	}
	complete := b.evictedUpTo <= after && (b.complete || len(b.deltas) > 0 && b.deltas[0].Seq <= after+1)
	return out, complete
}

// Publish delivers a delta of this process: to local streams now, and to
// other replicas with the next notification when one of them is
// interested in its session.
func (d *Deltas) Publish(x Delta) {
	x.own = true
	d.mu.Lock()
	// Under d.mu: a delta published before a new interest is handled is
	// sent by its replay (remoteInterest), one after it here.
	x.notified = !d.interest || d.legacy > 0 || len(d.remote[x.SessionID]) > 0
	x = d.deliverLocked(x)
	if x.notified {
		d.enqueue(x)
	}
	d.mu.Unlock()
}

// enqueue queues deltas for the next notification (d.mu held, so the
// queue keeps the order they were delivered in).
func (d *Deltas) enqueue(xs ...Delta) {
	d.outMu.Lock()
	d.out = append(d.out, xs...)
	d.queued++
	d.outMu.Unlock()
	d.wakeSender()
}

// enqueueCtl queues an interest message.
func (d *Deltas) enqueueCtl(msg string) {
	d.outMu.Lock()
	d.ctl = append(d.ctl, msg)
	d.queued++
	d.outMu.Unlock()
	d.wakeSender()
}

func (d *Deltas) wakeSender() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Flush waits until every delta published so far was notified to the
// other replicas (or ctx ends), so that a turn's events, stored next,
// never overtake its deltas on their way there.
func (d *Deltas) Flush(ctx context.Context) {
	d.outMu.Lock()
	target := d.queued
	for d.sent < target {
		sig := d.sentSig
		d.outMu.Unlock()
		select {
		case <-sig:
		case <-ctx.Done():
			return
		}
		d.outMu.Lock()
	}
	d.outMu.Unlock()
}

// deliver hands a delta to the local streams of its session and keeps it
// in its turn's buffer.
func (d *Deltas) deliver(x Delta) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deliverLocked(x)
}

// deliverLocked is deliver with d.mu held; it returns the delta as kept.
// A delta the buffer already holds (sent again for a replica that became
// interested) is dropped, and a hole in a run's numbering marks the
// buffer incomplete up to it.
func (d *Deltas) deliverLocked(x Delta) Delta {
	x.line = &lineCache{}
	now := time.Now()
	k := turnKey{x.SessionID, x.TurnID}
	b := d.buffers[k]
	if b == nil {
		b = &turnBuffer{sessionID: x.SessionID}
		d.buffers[k] = b
	}
	if n := len(b.deltas); n > 0 {
		last := b.deltas[n-1].Seq
		if x.Seq <= last {
			return x
		}
		if x.Seq/RunSpan == last/RunSpan && x.Seq != last+1 {
			b.evictedUpTo = max(b.evictedUpTo, x.Seq-1)
		}
	}
	if x.Seq%RunSpan == 1 {
		// A run's first delta: from here on the buffer has the run whole.
		b.complete = true
	}
	b.touched = now
	if len(b.deltas) >= turnBufferLen {
		b.evictedUpTo = max(b.evictedUpTo, b.deltas[0].Seq)
		b.deltas = append(b.deltas[:0], b.deltas[1:]...)
	}
	b.deltas = append(b.deltas, x)
	for s := range d.subs[x.SessionID] {
		s.push(x)
	}
	if len(d.waiters) > 0 {
		for _, w := range d.waiters[k] {
			close(w)
		}
		delete(d.waiters, k)
	}
	return x
}

// connected runs on every (re)connect of the listener: interests sent
// while it was away may have been missed, so every replica is asked to
// announce its own again, and this one announces its.
func (d *Deltas) connected() {
	if !d.interest {
		return
	}
	d.enqueueCtl("?")
	d.announce()
}

// announce queues every interest of this replica.
func (d *Deltas) announce() {
	if !d.interest {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]string, 0, len(d.interested))
	for sid := range d.interested {
		ids = append(ids, sid)
	}
	for _, msg := range packIDs("+", ids, notifyBudget-len(d.origin)-8) {
		d.enqueueCtl(msg)
	}
}

// remoteInterest records that replica origin wants the deltas of
// sessions; one it did not know wants them gets this replica's kept
// deltas of their turns, in order, before any published from now on.
func (d *Deltas) remoteInterest(origin string, sessions []string, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fresh := map[string]bool{}
	for _, sid := range sessions {
		set := d.remote[sid]
		if set == nil {
			set = map[string]time.Time{}
			d.remote[sid] = set
		}
		if _, known := set[origin]; !known {
			fresh[sid] = true
		}
		set[origin] = now
	}
	if len(fresh) == 0 {
		return
	}
	// One pass over the buffers however many sessions were announced.
	var replay []Delta
	for _, b := range d.buffers {
		if !fresh[b.sessionID] {
			continue
		}
		for i := range b.deltas {
			if x := &b.deltas[i]; x.own {
				x.notified = true
				replay = append(replay, *x)
			}
		}
	}
	if len(replay) > 0 {
		d.enqueue(replay...)
	}
}

// remoteGone forgets replica origin's interest in sessions.
func (d *Deltas) remoteGone(origin string, sessions []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, sid := range sessions {
		delete(d.remote[sid], origin)
		if len(d.remote[sid]) == 0 {
			delete(d.remote, sid)
		}
	}
}

// missed marks every buffer incomplete and tells every stream it lost
// deltas: notifications may have been missed while the listener was
// away.
func (d *Deltas) missed() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range d.buffers {
		b.complete = false
		if n := len(b.deltas); n > 0 {
			b.evictedUpTo = max(b.evictedUpTo, b.deltas[n-1].Seq)
		}
	}
	for _, set := range d.subs {
		for s := range set {
			s.mu.Lock()
			s.lost = true
			s.mu.Unlock()
			select {
			case s.ready <- struct{}{}:
			default:
			}
		}
	}
}

// received handles a notification: another replica's batch or interest.
func (d *Deltas) received(payload string) {
	origin, body, ok := strings.Cut(payload, "\n")
	if !ok || origin == d.origin || body == "" {
		return
	}
	if !d.interest && body[0] != '[' {
		// As a replica before announcements: they are not deltas.
		return
	}
	switch body[0] {
	case '+':
		d.remoteInterest(origin, strings.Fields(body[1:]), time.Now())
		return
	case '-':
		d.remoteGone(origin, strings.Fields(body[1:]))
		return
	case '?':
		d.announce()
		return
	}
	var xs []Delta
	if json.Unmarshal([]byte(body), &xs) != nil {
		return
	}
	deliver := func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, x := range xs {
			x.own = false
			d.deliverLocked(x)
		}
	}
	if fn := d.inbound.Load(); fn != nil {
		(*fn)(xs, deliver)
		return
	}
	deliver()
}

// InterceptInbound hands every batch of deltas another replica sends to
// fn instead of delivering it; fn delivers it by calling deliver (later,
// from any goroutine, in the order the batches came, or never). It makes
// the path between replicas slow or lossy on purpose, for tests of what a
// stream does when a turn's events overtake its deltas. nil restores
// delivery.
func (d *Deltas) InterceptInbound(fn func(batch []Delta, deliver func())) {
	if fn == nil {
		d.inbound.Store(nil)
		return
	}
	d.inbound.Store(&fn)
}

// sweep drops the buffers of turns idle for turnBufferIdle, ends the
// interests whose streams all closed interestLinger ago (this replica's
// buffers of those sessions may miss deltas from then on) and forgets
// other replicas' interests they did not repeat.
func (d *Deltas) sweep(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, b := range d.buffers {
		if now.Sub(b.touched) > turnBufferIdle {
			delete(d.buffers, id)
		}
	}
	var gone []string
	for sid, closed := range d.interested {
		if !closed.IsZero() && now.Sub(closed) > interestLinger {
			delete(d.interested, sid)
			gone = append(gone, sid)
		}
	}
	if len(gone) > 0 {
		ended := map[string]bool{}
		for _, sid := range gone {
			ended[sid] = true
		}
		for _, b := range d.buffers {
			if ended[b.sessionID] {
				b.complete = false
				if n := len(b.deltas); n > 0 {
					b.evictedUpTo = max(b.evictedUpTo, b.deltas[n-1].Seq)
				}
			}
		}
		for _, msg := range packIDs("-", gone, notifyBudget-len(d.origin)-8) {
			if d.interest {
				d.enqueueCtl(msg)
			}
		}
	}
	for sid, set := range d.remote {
		for origin, at := range set {
			if now.Sub(at) > interestTTL {
				delete(set, origin)
			}
		}
		if len(set) == 0 {
			delete(d.remote, sid)
		}
	}
}

// packIDs joins ids after prefix into messages of at most budget bytes.
func packIDs(prefix string, ids []string, budget int) []string {
	var out []string
	var b strings.Builder
	for _, id := range ids {
		if b.Len() > 0 && b.Len()+len(id)+1 > budget {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteString(prefix)
		} else {
			b.WriteByte(' ')
		}
		b.WriteString(id)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// run sends queued deltas until ctx ends: whatever queued while one
// notification was on its way goes in the next, so a fast stream costs a
// few notifications per round trip, not one per delta.
func (d *Deltas) run(ctx context.Context) {
	sweep := time.NewTicker(turnBufferIdle / 4)
	defer sweep.Stop()
	announce := time.NewTicker(announceEvery)
	defer announce.Stop()
	legacy := time.NewTicker(legacyCheckEvery)
	defer legacy.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-sweep.C:
			d.sweep(now)
		case <-announce.C:
			d.announce()
		case <-legacy.C:
			if err := d.checkLegacy(ctx); err != nil && ctx.Err() == nil {
				d.log.Debug("deltas: listeners not counted", "err", err)
			}
		case <-d.kick:
		}
		for {
			d.outMu.Lock()
			batch, ctl, upto := d.out, d.ctl, d.queued
			d.out, d.ctl = nil, nil
			d.outMu.Unlock()
			if len(batch) == 0 && len(ctl) == 0 {
				break
			}
			for _, msg := range ctl {
				_, _ = d.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, DeltasChannel, d.origin+"\n"+msg)
			}
			for _, payload := range d.payloads(batch) {
				// A failed notification loses deltas for other replicas
				// only: their streams are told by the reset marker when
				// they notice the gap, and the events carry the answer.
				_, _ = d.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, DeltasChannel, payload)
			}
			d.outMu.Lock()
			d.sent = upto
			close(d.sentSig)
			d.sentSig = make(chan struct{})
			d.outMu.Unlock()
		}
	}
}

// payloads encodes deltas into notification payloads of at most
// notifyBudget bytes: "<origin>\n[<delta>,…]".
func (d *Deltas) payloads(deltas []Delta) []string {
	batch := make([]string, 0, len(deltas))
	for _, x := range deltas {
		if enc, err := json.Marshal(x); err == nil {
			batch = append(batch, string(enc))
		}
	}
	var out []string
	var b strings.Builder
	start := func() {
		b.Reset()
		b.WriteString(d.origin)
		b.WriteString("\n[")
	}
	start()
	n := 0
	for _, enc := range batch {
		if n > 0 && b.Len()+len(enc)+2 > notifyBudget {
			b.WriteByte(']')
			out = append(out, b.String())
			start()
			n = 0
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(enc)
		n++
	}
	if n > 0 {
		b.WriteByte(']')
		out = append(out, b.String())
	}
	return out
}

// WithoutInterest makes this replica take no part in interest
// announcements, as a replica of a version before them: it announces
// nothing, ignores announcements, sends every delta to every replica and
// its listener is counted as legacy by the others. Call before Run.
func (d *Deltas) WithoutInterest() { d.interest = false }

// legacyListenersSQL counts the connections of this database listening
// for notifications without InterestListener: a listener's last
// statement stays its LISTEN, and a replica that announces names its
// listening connection before it listens.
const legacyListenersSQL = `SELECT count(*) FROM pg_stat_activity
	WHERE datname = current_database() AND query ~* '^\s*LISTEN\s'
	AND application_name IS DISTINCT FROM $1`

// checkLegacy counts the listeners that do not announce interests. When
// the first appears, every delta is sent from then on, beginning with the
// deltas this replica kept that never went out, so a stream opened on
// such a replica before the check misses nothing kept.
func (d *Deltas) checkLegacy(ctx context.Context) error {
	if !d.interest || d.pool == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, legacyCheckEvery)
	defer cancel()
	var n int
	if err := d.pool.QueryRow(ctx, legacyListenersSQL, InterestListener).Scan(&n); err != nil {
		return fmt.Errorf("count legacy listeners: %w", err)
	}
	d.setLegacy(n)
	return nil
}

// setLegacy records n listeners that do not announce interests.
func (d *Deltas) setLegacy(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	was := d.legacy
	d.legacy = n
	switch {
	case was == 0 && n > 0:
		d.log.Warn("deltas: replicas that do not announce interests are listening (an earlier version); sending every delta to every replica", "listeners", n)
		// Only what never went out: such replicas keep a duplicate.
		var replay []Delta
		for _, b := range d.buffers {
			for i := range b.deltas {
				if x := &b.deltas[i]; x.own && !x.notified {
					x.notified = true
					replay = append(replay, *x)
				}
			}
		}
		if len(replay) > 0 {
			d.enqueue(replay...)
		}
	case was > 0 && n == 0:
		d.log.Info("deltas: every listening replica announces its interests; sending deltas only where announced")
	}
}

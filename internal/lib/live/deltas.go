package live

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bae-go/bae-go/internal/lib/ids"
)

// DeltasChannel carries live deltas between replicas. Deltas are never
// stored: a notification holds a batch of them, at most notifyBudget bytes,
// and every replica keeps the recent deltas of each running turn in memory
// (turnBuffer) for streams that resume.
const DeltasChannel = "bae_deltas"

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
)

// Deltas is the per-process side channel: it publishes this process's
// deltas to local streams at once and to other replicas by NOTIFY, and
// delivers other replicas' deltas to local streams.
type Deltas struct {
	pool   *pgxpool.Pool
	origin string

	mu      sync.Mutex
	subs    map[string]map[*DeltaSub]struct{}
	buffers map[string]*turnBuffer

	outMu   sync.Mutex
	out     []string // encoded deltas waiting for a notification
	queued  uint64
	sent    uint64
	kick    chan struct{}
	sentSig chan struct{} // closed and replaced after each send
}

func newDeltas(pool *pgxpool.Pool) *Deltas {
	return &Deltas{
		pool: pool, origin: ids.New("rep_"),
		subs: map[string]map[*DeltaSub]struct{}{}, buffers: map[string]*turnBuffer{},
		kick: make(chan struct{}, 1), sentSig: make(chan struct{}),
	}
}

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
func (s *DeltaSub) Take() ([]Delta, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, lost := s.queue, s.lost
	s.queue, s.lost = nil, false
	return q, lost
}

// Close ends the subscription.
func (s *DeltaSub) Close() {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	set := s.d.subs[s.sessionID]
	delete(set, s)
	if len(set) == 0 {
		delete(s.d.subs, s.sessionID)
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
	return s
}

// Backlog is what this replica holds of a turn's deltas after sequence
// after, and whether that is all of them (false: some were not kept, or
// the turn is unknown here, so a stream resuming must rely on the turn's
// events).
func (d *Deltas) Backlog(turnID string, after int64) ([]Delta, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.buffers[turnID]
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

// Publish delivers a delta of this process: to local streams now, to
// other replicas with the next notification.
func (d *Deltas) Publish(x Delta) {
	d.deliver(x)
	enc, err := json.Marshal(x)
	if err != nil {
		return
	}
	d.outMu.Lock()
	d.out = append(d.out, string(enc))
	d.queued++
	d.outMu.Unlock()
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
	x.line = &lineCache{}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	b := d.buffers[x.TurnID]
	if b == nil {
		b = &turnBuffer{sessionID: x.SessionID}
		d.buffers[x.TurnID] = b
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

// received handles a notification: another replica's batch.
func (d *Deltas) received(payload string) {
	origin, batch, ok := strings.Cut(payload, "\n")
	if !ok || origin == d.origin {
		return
	}
	var xs []Delta
	if json.Unmarshal([]byte(batch), &xs) != nil {
		return
	}
	for _, x := range xs {
		d.deliver(x)
	}
}

// sweep drops the buffers of turns idle for turnBufferIdle.
func (d *Deltas) sweep(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, b := range d.buffers {
		if now.Sub(b.touched) > turnBufferIdle {
			delete(d.buffers, id)
		}
	}
}

// run sends queued deltas until ctx ends: whatever queued while one
// notification was on its way goes in the next, so a fast stream costs a
// few notifications per round trip, not one per delta.
func (d *Deltas) run(ctx context.Context) {
	sweep := time.NewTicker(turnBufferIdle / 4)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-sweep.C:
			d.sweep(now)
			continue
		case <-d.kick:
		}
		for {
			d.outMu.Lock()
			batch, upto := d.out, d.queued
			d.out = nil
			d.outMu.Unlock()
			if len(batch) == 0 {
				break
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

// payloads packs encoded deltas into notification payloads of at most
// notifyBudget bytes: "<origin>\n[<delta>,…]".
func (d *Deltas) payloads(batch []string) []string {
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

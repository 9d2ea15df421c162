package api

import (
	"context"
	"sync"
	"time"

	"github.com/bae-go/bae-go/internal/lib/live"
)

// One writer per session sends the session's deltas to all of its
// opted-in streams on this replica. Waking a goroutine per stream per
// delta (a select over its channels, the scheduler, the queue's lock) cost
// about as much as the write itself: with 100 observers that was most of
// a streamed turn's CPU. The writer takes the session's deltas once,
// queues them on every stream and writes each stream's queue with one
// flush, the delta's encoded line shared by all. Deltas that come within
// deltaHold of the writer's last batch wait for the next one, so a socket
// is flushed at most once per deltaHold; a delta after a quiet spell goes
// out at once.
//
// A stream whose socket blocks (its client stopped reading) must not hold
// back the others: the watchdog gives a stream that has kept the writer
// waiting for writeStall a goroutine of its own, and the session a new
// writer.
const (
	// deltaHold bounds what batching adds to a delta's delivery.
	deltaHold = 2 * time.Millisecond
	// writeStall is how long one stream's write may hold up the session's
	// other streams.
	writeStall = 100 * time.Millisecond
	// pendingLimit bounds what one stream may have queued; beyond it the
	// stream gets a reset marker instead.
	pendingLimit = 8192
)

// deltaWriters is this replica's session writers.
type deltaWriters struct {
	mu       sync.Mutex
	sessions map[string]*sessionWriter
	watching bool // the stall watchdog runs (while a writer exists)
	// hold is deltaHold (tests turn batching off with 0).
	hold  time.Duration
	stall time.Duration
}

func newDeltaWriters() *deltaWriters {
	return &deltaWriters{sessions: map[string]*sessionWriter{}, hold: deltaHold, stall: writeStall}
}

// sessionWriter writes one session's deltas to its streams.
type sessionWriter struct {
	ws   *deltaWriters
	sid  string
	sub  *live.DeltaSub
	kick chan struct{} // a stream's drain queued deltas for the others
	quit chan struct{} // the session's last stream left

	mu      sync.Mutex
	streams []*deltaStream
	// gen is the running writer goroutine's; one the watchdog replaced
	// exits when its stalled write returns.
	gen int
	// writing is the stream being written by the writer, since when.
	writing *deltaStream
	since   time.Time
	taken   []live.Delta

	// ends is where provider responses' deltas end (store.DeltaEnd), read
	// once for all of the session's streams here: each settles the same
	// response, and the value is written once, with the response.
	endMu sync.Mutex
	ends  map[endKey]*endRead
}

type endKey struct{ turnID, idemKey string }

type endRead struct {
	done chan struct{}
	end  int64
	err  error
}

// endsKept bounds the responses a writer remembers the deltas' end of.
const endsKept = 64

// deltaEnd is where the deltas of a turn's response end, read once for
// the session's streams (read reads it from the store).
func (w *sessionWriter) deltaEnd(ctx context.Context, turnID, idemKey string, read func(context.Context) (int64, error)) (int64, error) {
	k := endKey{turnID, idemKey}
	w.endMu.Lock()
	r := w.ends[k]
	if r == nil {
		if w.ends == nil || len(w.ends) >= endsKept {
			w.ends = map[endKey]*endRead{}
		}
		r = &endRead{done: make(chan struct{})}
		w.ends[k] = r
		w.endMu.Unlock()
		r.end, r.err = read(ctx)
		if r.err != nil {
			w.endMu.Lock()
			if w.ends[k] == r {
				delete(w.ends, k)
			}
			w.endMu.Unlock()
		}
		close(r.done)
		return r.end, r.err
	}
	w.endMu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if r.err != nil {
		// The first reader's failure (its stream may have gone): our own.
		return read(ctx)
	}
	return r.end, nil
}

// attach adds a stream to its session's writer, starting one for the
// session's first stream.
func (ws *deltaWriters) attach(deltas *live.Deltas, d *deltaStream, sid string) {
	ws.mu.Lock()
	w := ws.sessions[sid]
	if w == nil {
		w = &sessionWriter{ws: ws, sid: sid, sub: deltas.Subscribe(sid), kick: make(chan struct{}, 1), quit: make(chan struct{})}
		ws.sessions[sid] = w
		go w.run(0)
		if !ws.watching {
			ws.watching = true
			go ws.watch()
		}
	}
	w.mu.Lock()
	w.streams = append(w.streams, d)
	w.mu.Unlock()
	ws.mu.Unlock()
	d.w = w
}

// detach removes a stream; it returns once no write to it is under way.
// The session's last stream stops the writer.
func (ws *deltaWriters) detach(d *deltaStream) {
	w := d.w
	ws.mu.Lock()
	w.mu.Lock()
	for i, s := range w.streams {
		if s == d {
			w.streams = append(w.streams[:i], w.streams[i+1:]...)
			break
		}
	}
	last := len(w.streams) == 0
	if d.gone != nil {
		close(d.gone)
	}
	w.mu.Unlock()
	if last {
		delete(ws.sessions, w.sid)
		close(w.quit)
		w.sub.Close()
	}
	ws.mu.Unlock()
	// The writer may be writing to it: the response must not be written
	// once its handler returned.
	d.wmu.Lock()
	d.closed = true
	d.wmu.Unlock()
}

// takeLocked moves the session's new deltas to every stream's queue
// (w.mu held); it reports whether there were any.
func (w *sessionWriter) takeLocked() bool {
	xs, lost := w.sub.TakeInto(w.taken)
	w.taken = xs
	if len(xs) == 0 && !lost {
		return false
	}
	for _, d := range w.streams {
		d.lost = d.lost || lost
		if n := min(len(xs), pendingLimit-len(d.pending)); n < len(xs) {
			d.lost = true
			d.pending = append(d.pending, xs[:max(n, 0)]...)
		} else {
			d.pending = append(d.pending, xs...)
		}
		if d.alone {
			select {
			case d.own <- struct{}{}:
			default:
			}
		}
	}
	return true
}

func (w *sessionWriter) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// run is the writer: on news, it waits out what is left of deltaHold
// since its last batch, then writes every stream's queue, one flush each.
func (w *sessionWriter) run(gen int) {
	var hold *time.Timer
	var batched time.Time
	var due []*deltaStream // this goroutine's own: a replaced one still reads it
	for {
		select {
		case <-w.sub.Ready():
		case <-w.kick:
		case <-w.quit:
			return
		}
		if wait := w.ws.hold - time.Since(batched); wait > 0 {
			// One timer per batch of the session, not per delta or stream.
			if hold == nil {
				hold = time.NewTimer(wait)
			} else {
				hold.Reset(wait)
			}
			select {
			case <-hold.C:
			case <-w.quit:
				return
			}
		}
		batched = time.Now()
		w.mu.Lock()
		if w.gen != gen {
			w.mu.Unlock()
			return
		}
		w.takeLocked()
		due = due[:0]
		for _, d := range w.streams {
			if d.started && !d.alone && (len(d.pending) > 0 || d.lost) {
				due = append(due, d)
			}
		}
		w.mu.Unlock()
		for _, d := range due {
			w.mu.Lock()
			if w.gen != gen {
				w.mu.Unlock()
				return
			}
			w.writing, w.since = d, time.Now()
			w.mu.Unlock()
			_ = d.writePending()
		}
		w.mu.Lock()
		if w.gen == gen {
			w.writing = nil
		}
		w.mu.Unlock()
		clear(due)
	}
}

// watch is the stall watchdog of every session writer of the replica; it
// ends with the last writer.
func (ws *deltaWriters) watch() {
	t := time.NewTicker(ws.stall / 2)
	defer t.Stop()
	var list []*sessionWriter
	for now := range t.C {
		ws.mu.Lock()
		if len(ws.sessions) == 0 {
			ws.watching = false
			ws.mu.Unlock()
			return
		}
		list = list[:0]
		for _, w := range ws.sessions {
			list = append(list, w)
		}
		ws.mu.Unlock()
		for _, w := range list {
			w.unstall(now, ws.stall)
		}
		clear(list)
	}
}

// unstall gives the stream whose write has held the writer for stall a
// goroutine of its own, and the session's other streams a new writer.
func (w *sessionWriter) unstall(now time.Time, stall time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.writing
	if d == nil || now.Sub(w.since) < stall {
		return
	}
	w.writing = nil
	d.alone = true
	d.own = make(chan struct{}, 1)
	go d.writeAlone(d.own, d.gone)
	w.gen++
	go w.run(w.gen)
	w.poke()
}

package api

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/provider"
)

// deltaStream is a stream's opt-in to live deltas: its place in its
// session's writer (deltawriter.go), and the turn it follows (a
// sendMessage relay's own; "" for every turn of the session).
type deltaStream struct {
	call   *rpcCall
	w      *sessionWriter
	turnID string
	// seenTurn's deltas up to seenSeq were seen by a resuming client: a
	// replica that starts receiving the turn again (its publisher sends
	// what it kept) does not send them twice.
	seenTurn string
	seenSeq  int64
	// thinking: the stream opted in to thinking deltas as well.
	thinking bool
	gone     chan struct{} // closed when the stream leaves

	// Under w.mu: the deltas queued for the stream and whether some were
	// lost (it fell behind); started once the stream drained (its resume
	// is written: the writer's deltas come after it); alone once its
	// socket stalled the writer (written by writeAlone from then on).
	pending []live.Delta
	lost    bool
	started bool
	alone   bool
	own     chan struct{}

	// wmu is held while deltas are written to the stream, by the session's
	// writer or the stream itself: the queue's order is the socket's.
	wmu    sync.Mutex
	closed bool
	batch  []live.Delta
	lines  [][]byte
	// Under wmu once the stream started: what the stream got of the
	// deltas of the turns it follows (see settle in deltaend.go); progress
	// is signalled when a delta of one was taken, for settle's wait.
	turns    []*turnDeltas
	progress chan struct{}
}

// openDeltas subscribes a stream that asked for deltas (DeltasHeader);
// nil when it did not, and then nothing about the stream changes. A
// malformed header fails the call.
func (c *clientAPI) openDeltas(call *rpcCall, turnID string) (*deltaStream, wire.DeltaOpt, bool) {
	opt, bad := wire.ParseDeltas(call.r.Header.Values(wire.DeltasHeader))
	if bad != nil {
		call.fail(bad)
		return nil, opt, false
	}
	if !opt.On {
		return nil, opt, true
	}
	d := &deltaStream{call: call, turnID: turnID, thinking: opt.Thinking, gone: make(chan struct{}), progress: make(chan struct{}, 1)}
	c.deltaWriters.attach(c.Hub.Deltas(), d, call.sess.ID)
	return d, opt, true
}

func (d *deltaStream) close() {
	if d != nil {
		d.w.ws.detach(d)
	}
}

// resumeWait bounds how long a resume waits for the replica that kept a
// turn's deltas to send them here (one NOTIFY round trip when it has
// them; the whole wait when no replica kept the turn any more).
const resumeWait = time.Second

// resume writes a turn's deltas after the last one the client saw, or a
// reset marker when they are not all kept: this replica's buffer, or, when
// it holds less (it had no stream on the session), another replica's,
// which the stream's interest brings here. A turn that is not the
// session's gets the reset at once.
func (d *deltaStream) resume(c *clientAPI, turnID string, after int64) error {
	if d == nil || turnID == "" {
		return nil
	}
	d.seenTurn, d.seenSeq = turnID, after
	sid, deltas := d.call.sess.ID, c.Hub.Deltas()
	backlog, complete := deltas.Backlog(sid, turnID, after)
	if !complete {
		ctx := d.call.r.Context()
		if ours, err := c.Store.TurnOfSession(ctx, sid, turnID); err != nil {
			d.call.log.Warn("resume deltas: check the turn's session", "turn_id", turnID, "err", err)
		} else if ours {
			backlog, complete = deltas.AwaitBacklog(ctx, sid, turnID, after, resumeWait)
		}
	}
	if !complete {
		d.turn(turnID, true).reset = true
		return d.call.delta(live.Delta{TurnID: turnID, Type: live.DeltaReset})
	}
	for _, x := range backlog {
		d.track(x)
		if !d.shows(x) {
			d.seenSeq = max(d.seenSeq, x.Seq)
			continue
		}
		if err := d.call.delta(x); err != nil {
			return err
		}
		// Also queued for this stream if it arrived since it subscribed.
		d.seenSeq = max(d.seenSeq, x.Seq)
	}
	return nil
}

// drain writes the deltas published so far that the stream has not
// written yet, before the stream writes events (a turn's deltas precede
// its events); the session's writer writes its other streams' share. The
// stream's first drain lets the writer write to it: its resume is done.
func (d *deltaStream) drain() error {
	if d == nil {
		return nil
	}
	w := d.w
	w.mu.Lock()
	news := w.takeLocked()
	d.started = true
	w.mu.Unlock()
	if news {
		w.poke()
	}
	return d.writePending()
}

// writePending writes the stream's queue with one flush.
func (d *deltaStream) writePending() error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if d.closed {
		return nil
	}
	w := d.w
	clear(d.batch)
	w.mu.Lock()
	xs, lost := d.pending, d.lost
	d.pending, d.lost = d.batch[:0], false
	w.mu.Unlock()
	d.batch = xs
	lines := d.lines[:0]
	if lost {
		// For every turn the stream follows: a relay's own, seen or not;
		// on subscribe, those it saw (one it did not gets its own at its
		// response).
		if d.turnID != "" {
			d.turn(d.turnID, true)
		}
		for _, t := range d.turns {
			t.reset = true
		}
		lines = append(lines, deltaLine(live.Delta{TurnID: d.turnID, Type: live.DeltaReset}))
	}
	tracked := false
	for _, x := range xs {
		t := d.track(x)
		tracked = tracked || t != nil
		if d.turnID != "" && x.TurnID != d.turnID || x.TurnID == d.seenTurn && x.Seq <= d.seenSeq || t != nil && x.Seq <= t.cut || !d.shows(x) {
			continue
		}
		lines = append(lines, x.Line(deltaLine))
	}
	clear(lines[len(lines):cap(lines)])
	d.lines = lines
	var err error
	if len(lines) > 0 {
		err = d.call.out.writeLines(lines)
	}
	if tracked {
		// After the write: what settle then finds reached is on the socket.
		select {
		case d.progress <- struct{}{}:
		default:
		}
	}
	return err
}

// writeAlone writes the stream's deltas once its socket stalled the
// session's writer, until the stream leaves.
func (d *deltaStream) writeAlone(own, gone <-chan struct{}) {
	for {
		select {
		case <-own:
			_ = d.writePending()
		case <-gone:
			return
		}
	}
}

// shows reports whether the stream gets x: thinking (its deltas and its
// blocks' starts) only when it opted in to thinking.
func (d *deltaStream) shows(x live.Delta) bool {
	if d.thinking {
		return true
	}
	switch x.Type {
	case provider.DeltaThinking:
		return false
	case provider.DeltaBlockStart:
		var b struct {
			Type string `json:"type"`
		}
		return json.Unmarshal(x.Block, &b) != nil || b.Type != "thinking" && b.Type != "redacted_thinking"
	}
	return true
}

// delta writes a session.delta notification.
func (c *rpcCall) delta(x live.Delta) error {
	return c.out.writeRaw(x.Line(deltaLine))
}

// deltaLine encodes a session.delta notification, newline included:
// {"turn_id","iteration","attempt","seq","type","index", and "text",
// "partial_json" or "block" by type}. Every stream a delta goes to sends
// these bytes, so a delta is encoded once (live.Delta.Line).
func deltaLine(x live.Delta) []byte {
	b := make([]byte, 0, 192+len(x.Text)+len(x.Block))
	b = append(b, `{"jsonrpc":"2.0","method":"`+wire.DeltasMethod+`","params":{`...)
	if x.Type == live.DeltaReset {
		// Without a turn id: every turn the stream follows.
		if x.TurnID != "" {
			b = append(b, `"turn_id":`...)
			b = appendJSONString(b, x.TurnID)
			b = append(b, ',')
		}
		return append(b, `"type":"reset"}}`+"\n"...)
	}
	b = append(b, `"turn_id":`...)
	b = appendJSONString(b, x.TurnID)
	b = append(b, `,"iteration":`...)
	b = strconv.AppendInt(b, int64(x.Iteration), 10)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(x.Attempt), 10)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, x.Seq, 10)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, x.Type)
	if x.Type != live.DeltaSuperseded {
		b = append(b, `,"index":`...)
		b = strconv.AppendInt(b, int64(x.Index), 10)
	}
	switch x.Type {
	case provider.DeltaText:
		b = append(b, `,"text":`...)
		b = appendJSONString(b, x.Text)
	case provider.DeltaInputJSON:
		b = append(b, `,"partial_json":`...)
		b = appendJSONString(b, x.Text)
	case provider.DeltaThinking:
		b = append(b, `,"thinking":`...)
		b = appendJSONString(b, x.Text)
	case provider.DeltaBlockStart:
		if len(x.Block) > 0 {
			b = append(b, `,"block":`...)
			b = append(b, x.Block...)
		}
	}
	return append(b, "}}\n"...)
}

func appendJSONString(b []byte, s string) []byte {
	enc, err := json.Marshal(s)
	if err != nil {
		return append(b, `""`...)
	}
	return append(b, enc...)
}

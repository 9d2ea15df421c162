package api

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/provider"
)

// deltaHold is the longest a stream holds a delta back to send it with the
// ones that follow. Every flush is a system call per stream (with 100
// observers, most of a streamed turn's CPU): deltas that come faster than
// this go out together, one flush per batch. A delta after a quiet spell
// goes out at once.
const deltaHold = 2 * time.Millisecond

// deltaStream is a stream's opt-in to live deltas: its subscription, and
// the turn it follows (a sendMessage relay's own; "" for every turn of the
// session).
type deltaStream struct {
	call   *rpcCall
	sub    *live.DeltaSub
	turnID string
	// seenTurn's deltas up to seenSeq were seen by a resuming client: a
	// replica that starts receiving the turn again (its publisher sends
	// what it kept) does not send them twice.
	seenTurn string
	seenSeq  int64
	// thinking: the stream opted in to thinking deltas as well.
	thinking bool
	// runs, top and reset: what a relay got of its turn's deltas (see
	// settle in deltaend.go).
	runs  map[int64]int64
	top   int64
	reset bool
	// taken is the last batch drain wrote, reused for the next one.
	taken []live.Delta
	lines [][]byte
	// flushed is when the stream last sent deltas; held: deltas written
	// since, sent when hold fires (at most deltaHold after flushed).
	flushed time.Time
	held    bool
	hold    *time.Timer
	// now is the clock (time.Now; tests set their own).
	now func() time.Time
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
	return &deltaStream{call: call, sub: c.Hub.Deltas().Subscribe(call.sess.ID), turnID: turnID, thinking: opt.Thinking}, opt, true
}

// ready is the subscription's wake-up (nil, never firing, without one).
func (d *deltaStream) ready() <-chan struct{} {
	if d == nil {
		return nil
	}
	return d.sub.Ready()
}

func (d *deltaStream) close() {
	if d != nil {
		d.sub.Close()
		if d.hold != nil {
			d.hold.Stop()
		}
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
		d.reset = true
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

// drain writes the pending deltas; a stream that fell behind gets a reset
// marker for the turns it follows. What it writes is sent at once when the
// stream sent nothing for deltaHold, else held until deltaHold after the
// last send (flushHeld), so deltas in quick succession share one flush.
func (d *deltaStream) drain() error {
	if d == nil {
		return nil
	}
	xs, lost := d.sub.TakeInto(d.taken)
	d.taken = xs
	lines := d.lines[:0]
	if lost {
		d.reset = true
		lines = append(lines, deltaLine(live.Delta{TurnID: d.turnID, Type: live.DeltaReset}))
	}
	for _, x := range xs {
		d.track(x)
		if d.turnID != "" && x.TurnID != d.turnID || x.TurnID == d.seenTurn && x.Seq <= d.seenSeq || !d.shows(x) {
			continue
		}
		lines = append(lines, x.Line(deltaLine))
	}
	clear(lines[len(lines):cap(lines)])
	d.lines = lines
	if len(lines) == 0 {
		return nil
	}
	now := d.clock()
	wait := deltaHold - now.Sub(d.flushed)
	if wait <= 0 {
		d.flushed, d.held = now, false
		return d.call.out.writeLines(lines)
	}
	if err := d.call.out.writeParts(false, lines...); err != nil {
		return err
	}
	if !d.held {
		d.held = true
		if d.hold == nil {
			d.hold = time.NewTimer(wait)
		} else {
			d.hold.Reset(wait)
		}
	}
	return nil
}

// due fires when held deltas are due (nil, never firing, when none are).
func (d *deltaStream) due() <-chan time.Time {
	if d == nil || !d.held {
		return nil
	}
	return d.hold.C
}

// flushHeld sends the held deltas.
func (d *deltaStream) flushHeld() {
	if d == nil || !d.held {
		return
	}
	d.held, d.flushed = false, d.clock()
	d.call.out.flush()
}

func (d *deltaStream) clock() time.Time {
	if d.now != nil {
		return d.now()
	}
	return time.Now()
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

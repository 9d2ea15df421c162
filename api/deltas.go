package api

import (
	"encoding/json"
	"strconv"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/provider"
)

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
	// taken is the last batch drain wrote, reused for the next one.
	taken []live.Delta
	lines [][]byte
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
	}
}

// resume writes what this replica kept of a turn's deltas after the last
// one the client saw, or a reset marker when it did not keep them all.
func (d *deltaStream) resume(c *clientAPI, turnID string, after int64) error {
	if d == nil || turnID == "" {
		return nil
	}
	d.seenTurn, d.seenSeq = turnID, after
	backlog, complete := c.Hub.Deltas().Backlog(d.call.sess.ID, turnID, after)
	if !complete {
		return d.call.delta(live.Delta{TurnID: turnID, Type: live.DeltaReset})
	}
	for _, x := range backlog {
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
// marker for the turns it follows.
func (d *deltaStream) drain() error {
	if d == nil {
		return nil
	}
	xs, lost := d.sub.TakeInto(d.taken)
	d.taken = xs
	if lost {
		if err := d.call.delta(live.Delta{TurnID: d.turnID, Type: live.DeltaReset}); err != nil {
			return err
		}
	}
	// One write and one flush for what was pending: a stream that fell
	// behind catches up in one system call.
	lines := d.lines[:0]
	for _, x := range xs {
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
	return d.call.out.writeLines(lines)
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

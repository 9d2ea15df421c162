package api

import (
	"context"
	"time"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/store"
)

// deltaEndWait bounds how long a relay holds a provider response back for
// deltas it stands for that are still on their way from the replica that
// ran the call. That replica sends them before it stores the response,
// but waits at most deltaFlushWait (2 s) for that, and a notification can
// lag behind under load, or wait for this replica's interest to reach it;
// past the bound the stream gets a reset instead.
const deltaEndWait = 3 * time.Second

// keptTurns bounds the turns a stream keeps track of: a subscribe stream
// follows every turn of its session, one after another, and a response is
// settled soon after its deltas.
const keptTurns = 8

// turnDeltas is what a stream got of one turn's deltas, for settle.
type turnDeltas struct {
	turn string
	// runs: how far each run's deltas reached the stream without a gap
	// from the run's first (-1 after a gap).
	runs []runReach
	top  int64 // the highest sequence seen
	// reset: the stream got a reset for the turn; its deltas up to cut
	// stay out if they come later (the events answer).
	reset bool
	cut   int64
}

type runReach struct{ run, at int64 }

// turn is the stream's record of a turn's deltas; nil when it has none
// and add is false.
func (d *deltaStream) turn(id string, add bool) *turnDeltas {
	for i := len(d.turns) - 1; i >= 0; i-- {
		if d.turns[i].turn == id {
			return d.turns[i]
		}
	}
	if !add {
		return nil
	}
	if len(d.turns) == keptTurns {
		d.turns = append(d.turns[:0], d.turns[1:]...)
	}
	t := &turnDeltas{turn: id}
	d.turns = append(d.turns, t)
	return t
}

// track notes a delta taken from the subscription or a resume's backlog,
// before any filtering, for the turns the stream follows (a relay's own,
// a subscribe stream's every turn): how far each run reached the stream
// without a gap, and the highest sequence seen. A turn's deltas reach a
// replica in sequence (its buffer drops one that comes late), so a gap is
// never filled later. It returns the turn's record (nil for a turn the
// stream does not follow).
func (d *deltaStream) track(x live.Delta) *turnDeltas {
	if d.turnID != "" && x.TurnID != d.turnID || x.TurnID == "" {
		return nil
	}
	t := d.turn(x.TurnID, true)
	r := x.Seq / live.RunSpan
	at := d.reached(t, r)
	switch {
	case at < 0 || x.Seq <= at:
	case x.Seq == at+1:
		t.set(r, x.Seq)
	default:
		t.set(r, -1)
	}
	t.top = max(t.top, x.Seq)
	return t
}

func (t *turnDeltas) set(run, at int64) {
	for i := range t.runs {
		if t.runs[i].run == run {
			t.runs[i].at = at
			return
		}
	}
	t.runs = append(t.runs, runReach{run, at})
}

// reached is how far run r of turn t reached the stream without a gap:
// what track saw, else what a resuming client said it had seen.
func (d *deltaStream) reached(t *turnDeltas, r int64) int64 {
	if t != nil {
		for _, x := range t.runs {
			if x.run == r {
				return x.at
			}
		}
	}
	if t != nil && d.seenTurn == t.turn && d.seenSeq > r*live.RunSpan {
		return d.seenSeq
	}
	return r * live.RunSpan
}

// settle runs before a stream writes an event: a provider response of a
// turn the stream follows (a sendMessage relay's own; every turn on
// session.subscribe) goes after its deltas (docs/api.md, live deltas): the
// deltas of the run that answered up to the last one, which the replica
// that stored the response recorded with it (store.Tx.RecordDeltaEnd).
// Those still on their way are waited for, until deltaEndWait after the
// response was stored, and written as they come. When the stream cannot
// have them all (a notification was lost between replicas, the run's
// deltas went before the stream subscribed, or they did not come in time)
// it gets a reset for the turn, once: a gap is never silent.
func (d *deltaStream) settle(ctx context.Context, c *clientAPI, e store.Event) error {
	if d == nil || e.Type != events.ProviderResponse || e.TurnID == "" || d.turnID != "" && e.TurnID != d.turnID || d.wasReset(e.TurnID) {
		return nil
	}
	end, err := d.w.deltaEnd(ctx, e.TurnID, e.IdemKey, func(ctx context.Context) (int64, error) {
		return c.Store.DeltaEnd(ctx, e.TurnID, e.IdemKey)
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.call.log.Warn("read where a response's deltas end", "turn_id", e.TurnID, "err", err)
		return d.resetTurn(e.TurnID, 0)
	}
	if end == 0 {
		return nil
	}
	// Waiting for a response read from history (a resend of a turn that
	// ended long ago) would only delay it: the deadline counts from when
	// it was stored.
	wait := time.NewTimer(max(0, min(deltaEndWait, time.Until(e.CreatedAt.Add(deltaEndWait)))))
	defer wait.Stop()
	// The session's writer may write the stream's deltas meanwhile: what
	// track notes is read under wmu.
	settled := func() (done, complete bool) {
		d.wmu.Lock()
		defer d.wmu.Unlock()
		return d.settledAt(e.TurnID, end)
	}
	for expired := false; ; {
		// What came so far goes out first, whatever the wait's outcome.
		if err := d.drain(); err != nil {
			return err
		}
		if done, complete := settled(); done || expired {
			if complete {
				return nil
			}
			return d.resetTurn(e.TurnID, end)
		}
		select {
		case <-d.progress:
		case <-ctx.Done():
			return ctx.Err()
		case <-wait.C:
			expired = true
		}
	}
}

// settledAt reports, under wmu, whether the stream's deltas of turnID's run
// that ended at end are settled: done when they are all here (complete),
// or can no longer be (a gap in the run, or a later run seen). A later
// run's deltas follow a superseded marker, after which a client renders
// that run's text, not the answer's (a duplicate run of a live attempt
// streams, then answers with what the first stored): its deltas are never
// the answer's, so the stream gets a reset.
func (d *deltaStream) settledAt(turnID string, end int64) (done, complete bool) {
	r := end / live.RunSpan
	t := d.turn(turnID, false)
	at := d.reached(t, r)
	later := t != nil && t.top/live.RunSpan > r
	complete = at >= end && !later
	return complete || later || at < 0, complete
}

// resetTurn tells the stream's client it missed deltas of a turn (those
// up to end, which stay out if they come later: the events answer).
func (d *deltaStream) resetTurn(turnID string, end int64) error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	t := d.turn(turnID, true)
	t.reset, t.cut = true, max(t.cut, end)
	return d.call.delta(live.Delta{TurnID: turnID, Type: live.DeltaReset})
}

// wasReset reports whether the stream got a reset for a turn.
func (d *deltaStream) wasReset(turnID string) bool {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	t := d.turn(turnID, false)
	return t != nil && t.reset
}

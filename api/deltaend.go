package api

import (
	"context"
	"time"

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

// track notes a delta of the relay's turn taken from the subscription or
// a resume's backlog, before any filtering: how far each run's deltas
// reached the stream without a gap from the run's first (-1 after a gap),
// and the highest sequence seen. A turn's deltas reach a replica in
// sequence (its buffer drops one that comes late), so a gap is never
// filled later. It reports whether x was of the relay's turn.
func (d *deltaStream) track(x live.Delta) bool {
	if d.turnID == "" || x.TurnID != d.turnID {
		return false
	}
	if d.runs == nil {
		d.runs = map[int64]int64{}
	}
	r := x.Seq / live.RunSpan
	at := d.reached(r)
	switch {
	case at < 0 || x.Seq <= at:
	case x.Seq == at+1:
		d.runs[r] = x.Seq
	default:
		d.runs[r] = -1
	}
	d.top = max(d.top, x.Seq)
	return true
}

// reached is how far run r's deltas reached the stream without a gap:
// what track saw, else what a resuming client said it had seen.
func (d *deltaStream) reached(r int64) int64 {
	if at, ok := d.runs[r]; ok {
		return at
	}
	if d.seenTurn == d.turnID && d.seenSeq > r*live.RunSpan {
		return d.seenSeq
	}
	return r * live.RunSpan
}

// settle runs before a relay writes a provider response of its turn,
// whose deltas come first (docs/api.md, live deltas): the deltas of the
// run that answered up to the last one, which the replica that stored
// the response recorded with it (store.Tx.RecordDeltaEnd). Those still on
// their way are waited for, until deltaEndWait after the response was
// stored, and written as they come. When the stream cannot have them all
// (a notification was lost between replicas, the run's deltas went before
// the stream subscribed, or they did not come in time) it gets a reset
// for the turn, once: a gap is never silent.
func (d *deltaStream) settle(ctx context.Context, c *clientAPI, e store.Event) error {
	if d == nil || d.turnID == "" || e.TurnID != d.turnID || d.wasReset() {
		return nil
	}
	end, err := c.Store.DeltaEnd(ctx, e.TurnID, e.IdemKey)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.call.log.Warn("read where a response's deltas end", "turn_id", e.TurnID, "err", err)
		return d.resetTurn(0)
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
		return d.settledAt(end)
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
			return d.resetTurn(end)
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

// settledAt reports, under wmu, whether the stream's deltas of the run
// that ended at end are settled: done when they are all here (complete),
// or can no longer be (a gap in the run, or a later run seen). A later
// run's deltas follow a superseded marker, after which a client renders
// that run's text, not the answer's (a duplicate run of a live attempt
// streams, then answers with what the first stored): its deltas are never
// the answer's, so the stream gets a reset.
func (d *deltaStream) settledAt(end int64) (done, complete bool) {
	r := end / live.RunSpan
	later := d.top/live.RunSpan > r
	complete = d.reached(r) >= end && !later
	return complete || later || d.runs[r] < 0, complete
}

// resetTurn tells the relay's client it missed deltas of its turn (those
// up to end, which stay out if they come later: the events answer).
func (d *deltaStream) resetTurn(end int64) error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	d.reset = true
	if d.seenTurn == "" || d.seenTurn == d.turnID {
		d.seenTurn, d.seenSeq = d.turnID, max(d.seenSeq, end)
	}
	return d.call.delta(live.Delta{TurnID: d.turnID, Type: live.DeltaReset})
}

// wasReset reports whether the stream got a reset for its turn.
func (d *deltaStream) wasReset() bool {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	return d.reset
}

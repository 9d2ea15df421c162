package activities

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

const (
	// deltaTextMax bounds the text of one delta (in bytes) so that any
	// delta, escaped, fits a notification; a longer piece is sent as several.
	deltaTextMax = 1000
	// deltaFlushWait bounds how long a run waits for its deltas to reach
	// the other replicas before its events are stored.
	deltaFlushWait = 2 * time.Second
)

// deltaRun publishes one provider call's deltas: numbered after every
// earlier run of the turn (the number comes from the database, in the
// attempt's own transaction or, for a compacting attempt, while the
// request is on its way), led by a superseded marker when an earlier run
// of the same iteration may have sent deltas (a retry after a crash, or a
// fallback), and followed by one when the call fails after sending some.
type deltaRun struct {
	a        *Activities
	in       workflows.CallProviderInput
	numbered chan struct{}
	ok       bool // numbered; deltas go out
	base     int64
	lead     bool // send a superseded marker first
	n        int64
}

func (a *Activities) startDeltaRun(ctx context.Context, in workflows.CallProviderInput, step string, numbered *store.StreamRunNo) *deltaRun {
	r := &deltaRun{a: a, in: in, numbered: make(chan struct{})}
	number := func(n store.StreamRunNo) {
		if n.Run == 0 {
			return // not numbered: no deltas, the answer arrives as events
		}
		r.ok, r.base = true, n.Run*live.RunSpan
		r.lead = n.PrevStep != "" && iterationOf(n.PrevStep) == iterationOf(step)
	}
	switch {
	case a.Deltas == nil:
		close(r.numbered)
	case numbered != nil:
		number(*numbered)
		close(r.numbered)
	default:
		go func() {
			defer close(r.numbered)
			n, err := a.Store.StreamRun(ctx, in.TurnID, step)
			if err != nil {
				// No deltas for this run; the answer still arrives as events.
				a.logger(ctx, in.TurnID).Debug("live deltas off for this provider call", "err", err)
				return
			}
			number(n)
		}()
	}
	return r
}

// iterationOf is the iteration part of an attempt step ("i0" of "i0/a1").
func iterationOf(step string) string {
	it, _, _ := strings.Cut(step, "/")
	return it
}

func (r *deltaRun) publish(typ string, index int, text string, block []byte) {
	if r.n+1 >= live.RunSpan {
		return // past what a run may number; the events still carry it
	}
	r.n++
	r.a.Deltas.Publish(live.Delta{
		SessionID: r.in.SessionID, TurnID: r.in.TurnID, Iteration: r.in.Iteration, Attempt: r.in.Attempt,
		Seq: r.base + r.n, Type: typ, Index: index, Text: text, Block: block,
	})
}

// sink takes the provider's deltas, on the call's reading goroutine.
func (r *deltaRun) sink(d provider.Delta) {
	<-r.numbered
	if !r.ok {
		return
	}
	if r.lead {
		r.lead = false
		r.publish(live.DeltaSuperseded, 0, "", nil)
	}
	if d.Kind == provider.DeltaBlockStart {
		r.publish(d.Kind, d.Index, "", d.Block)
		return
	}
	for _, piece := range splitUTF8(d.Text, deltaTextMax) {
		r.publish(d.Kind, d.Index, piece, nil)
	}
}

// end closes the run: a failed call's partial output is superseded at
// once, and the run's deltas reach the other replicas before the caller
// stores the attempt's events. A cancelled call's output is not: an
// interrupt keeps it (server.message.interrupted), and a retry after a
// stopped worker leads with its own marker.
func (r *deltaRun) end(ctx context.Context, err error) {
	<-r.numbered
	if !r.ok {
		return
	}
	if err != nil && r.n > 0 && ctx.Err() == nil {
		r.publish(live.DeltaSuperseded, 0, "", nil)
	}
	if r.n == 0 {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deltaFlushWait)
	defer cancel()
	r.a.Deltas.Flush(fctx)
}

// last is the sequence of the run's last delta, recorded with the
// response the attempt stores (0: no run, or it sent no delta).
func (r *deltaRun) last() int64 {
	if r == nil {
		return 0
	}
	<-r.numbered
	if !r.ok || r.n == 0 {
		return 0
	}
	return r.base + r.n
}

// runNo is the stream run the call was (0: its deltas were not numbered).
func (r *deltaRun) runNo() int {
	<-r.numbered
	if !r.ok {
		return 0
	}
	return int(r.base / live.RunSpan)
}

// splitUTF8 cuts s into pieces of at most max bytes on rune boundaries.
func splitUTF8(s string, max int) []string {
	if len(s) <= max {
		return []string{s}
	}
	var out []string
	for len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = max
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return append(out, s)
}

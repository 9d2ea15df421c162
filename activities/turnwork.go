package activities

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// ErrInterrupted is the cancellation cause of a turn's activities stopped
// by an interrupt.
var ErrInterrupted = errors.New("turn interrupted")

// partialKeep bounds how long a cancelled provider call's partial answer
// waits for an interrupt to take it (a cancellation that was no interrupt,
// a worker stopping, leaves one behind).
const partialKeep = time.Minute

// turnWork tracks the activities of each turn running in this process, so
// that an interrupt stops them at once (Temporal's cancellation of a
// regular activity arrives only with a heartbeat response), waits until
// they returned (a cancelled local activity is abandoned, not awaited, by
// the workflow), and takes the partial answer a cancelled provider call
// left. The zero value is ready to use.
type turnWork struct {
	mu    sync.Mutex
	turns map[string]*turnRun
}

type turnRun struct {
	next    int
	cancels map[int]context.CancelCauseFunc
	idle    chan struct{} // closed when the last tracked activity returns
	partial json.RawMessage
	kept    time.Time
}

// track registers one activity of turnID; the returned context is
// cancelled (cause ErrInterrupted) by stop, and done must be called when
// the activity returns.
func (w *turnWork) track(ctx context.Context, turnID string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.turns == nil {
		w.turns = map[string]*turnRun{}
	}
	w.sweepLocked(time.Now())
	r := w.turns[turnID]
	if r == nil {
		r = &turnRun{cancels: map[int]context.CancelCauseFunc{}}
		w.turns[turnID] = r
	}
	if len(r.cancels) == 0 {
		r.idle = make(chan struct{})
	}
	id := r.next
	r.next++
	r.cancels[id] = cancel
	return ctx, func() {
		cancel(nil)
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(r.cancels, id)
		if len(r.cancels) == 0 {
			close(r.idle)
			if r.partial == nil && w.turns[turnID] == r {
				delete(w.turns, turnID)
			}
		}
	}
}

// sweepLocked drops partial answers no interrupt took.
func (w *turnWork) sweepLocked(now time.Time) {
	for id, r := range w.turns {
		if len(r.cancels) == 0 && now.Sub(r.kept) > partialKeep {
			delete(w.turns, id)
		}
	}
}

// keepPartial records the content a cancelled provider call of turnID had
// received (called before the call's activity returns).
func (w *turnWork) keepPartial(turnID string, content json.RawMessage) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.turns[turnID]; r != nil {
		r.partial, r.kept = content, time.Now()
	}
}

// stop cancels turnID's activities in this process, waits up to wait for
// them to return, and takes the partial answer one of them left (nil when
// none).
func (w *turnWork) stop(ctx context.Context, turnID string, wait time.Duration) json.RawMessage {
	w.mu.Lock()
	r := w.turns[turnID]
	var idle chan struct{}
	if r != nil && len(r.cancels) > 0 {
		for _, cancel := range r.cancels {
			cancel(ErrInterrupted)
		}
		idle = r.idle
	}
	w.mu.Unlock()
	if idle != nil {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-idle:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r == nil {
		return nil
	}
	p := r.partial
	r.partial = nil
	if len(r.cancels) == 0 && w.turns[turnID] == r {
		delete(w.turns, turnID)
	}
	return p
}

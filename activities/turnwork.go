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
	// interrupted: activities the turn starts from now on (a tool call
	// Temporal retries after its cancellation) begin cancelled.
	interrupted bool
	next        int
	cancels     map[int]context.CancelCauseFunc
	idle        chan struct{} // closed when the last tracked activity returns
	partial     json.RawMessage
	kept        time.Time
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
	if r.interrupted {
		cancel(ErrInterrupted)
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
			if r.partial == nil && !r.interrupted && w.turns[turnID] == r {
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

// cancel cancels turnID's activities in this process (cause
// ErrInterrupted).
func (w *turnWork) cancel(turnID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.turns == nil {
		w.turns = map[string]*turnRun{}
	}
	r := w.turns[turnID]
	if r == nil {
		r = &turnRun{cancels: map[int]context.CancelCauseFunc{}}
		w.turns[turnID] = r
	}
	r.interrupted, r.kept = true, time.Now()
	for _, cancel := range r.cancels {
		cancel(ErrInterrupted)
	}
}

// stop cancels turnID's activities in this process, waits up to wait for
// them to return, and takes the partial answer one of them left (nil when
// none).
func (w *turnWork) stop(ctx context.Context, turnID string, wait time.Duration) json.RawMessage {
	w.cancel(turnID)
	w.mu.Lock()
	r := w.turns[turnID]
	var idle chan struct{}
	if r != nil && len(r.cancels) > 0 {
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
	return p
}

// errCallStopped is the cancellation cause of a provider call that an
// interrupt's stop message ended (see StopProviderCalls).
var errCallStopped = errors.New("provider call stopped by an interrupt")

// callSlot is one Stoppable provider attempt of a turn running in this
// process, from the start of its activity: a stop that arrives before its
// HTTP call starts (while it begins the turn or stores its request) stops
// the call as it starts; one that arrives after the call ended does
// nothing (the attempt's answer is stored; the Interrupt update then
// reaches the turn at its next step). A nil slot never stops.
type callSlot struct {
	mu      sync.Mutex
	stopped bool
	cancel  context.CancelCauseFunc // the call in flight, nil outside it
}

// call returns the context of the attempt's HTTP call, already cancelled
// when a stop came first, and its end.
func (s *callSlot) call(ctx context.Context) (context.Context, func()) {
	if s == nil {
		return ctx, func() {}
	}
	cctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	if s.stopped {
		cancel(errCallStopped)
	} else {
		s.cancel = cancel
	}
	s.mu.Unlock()
	return cctx, func() {
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
		cancel(nil)
	}
}

func (s *callSlot) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.cancel != nil {
		s.cancel(errCallStopped)
	}
}

// stoppedCall reports a call context ended by a stop.
func stoppedCall(callCtx context.Context) bool {
	return errors.Is(context.Cause(callCtx), errCallStopped)
}

// callSlots are the Stoppable provider attempts running in this process,
// by session and turn: a stop names its turn, so one that comes late never
// reaches the session's next turn, and its session, so a turn id learnt by
// an observer of one session stops nothing when named with another. The
// zero value is ready to use.
type callSlots struct {
	mu    sync.Mutex
	turns map[slotKey]map[*callSlot]struct{}
}

// slotKey names a turn within its session.
type slotKey struct{ sessionID, turnID string }

// open registers an attempt of sessionID's turnID until the returned
// release.
func (c *callSlots) open(sessionID, turnID string) (*callSlot, func()) {
	s := &callSlot{}
	k := slotKey{sessionID, turnID}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.turns == nil {
		c.turns = map[slotKey]map[*callSlot]struct{}{}
	}
	set := c.turns[k]
	if set == nil {
		set = map[*callSlot]struct{}{}
		c.turns[k] = set
	}
	set[s] = struct{}{}
	return s, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(set, s)
		if len(set) == 0 {
			delete(c.turns, k)
		}
	}
}

// stop stops the attempts of sessionID's turnID running here and reports
// how many.
func (c *callSlots) stop(sessionID, turnID string) int {
	k := slotKey{sessionID, turnID}
	c.mu.Lock()
	slots := make([]*callSlot, 0, len(c.turns[k]))
	for s := range c.turns[k] {
		slots = append(slots, s)
	}
	c.mu.Unlock()
	for _, s := range slots {
		s.stop()
	}
	return len(slots)
}

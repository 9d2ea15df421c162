package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// turnCheckInterval is how often a server waiting for a turn's result asks
// the session's workflow whether it still holds the turn (see checkTurn);
// the result itself is announced, not polled.
const turnCheckInterval = 5 * time.Second

// controlWaitForCheck bounds that question: a workflow busy with a provider
// call answers only once the call's workflow task ends.
const controlWaitForCheck = 10 * time.Second

// runTurn runs a stored turn and waits for the result the workflow records
// when it ends. A turn that found no other unfinished message when it was
// stored (idle) is first offered to the workflow as a SendIdle Update,
// which runs it at once or is refused; any other, or a refused one, is put
// in the session's queue with an Enqueue signal.
func (c *clientAPI) runTurn(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput, idle bool) (workflows.TurnResult, error) {
	done, stop := c.Hub.WatchTurn(in.TurnID)
	defer stop()
	read := false
	if idle {
		res, fate := c.sendIdle(ctx, ref, in, done)
		switch fate {
		case idleAnswered:
			return res, nil
		case idleRecorded:
			return c.awaitTurnResult(ctx, ref, in, done, true)
		case idleUnknown:
			// It may have been admitted: the signal is then dropped, and
			// the result may be stored already.
			read = true
		}
	}
	if err := c.Engine.Enqueue(ctx, ref, in); err != nil {
		return workflows.TurnResult{}, err
	}
	return c.awaitTurnResult(ctx, ref, in, done, read)
}

// idleFate is what became of a SendIdle Update.
type idleFate int

const (
	idleAnswered idleFate = iota // its result is known
	idleRecorded                 // its result is recorded, to be read
	idleRefused                  // the session was busy: the turn did not run
	idleUnknown                  // no outcome came back (an error, an old worker)
)

// sendIdle submits the SendIdle Update and waits for its outcome or the
// turn's recorded result, whichever comes first: the result is announced
// when it is stored, before the workflow task that ran the turn completes
// the Update.
func (c *clientAPI) sendIdle(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput, done <-chan []byte) (workflows.TurnResult, idleFate) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		res     workflows.TurnResult
		refused bool
		err     error
	}
	sent := make(chan outcome, 1)
	go func() {
		res, refused, err := c.Engine.SendIdle(ctx, ref, in)
		sent <- outcome{res, refused, err}
	}()
	select {
	case b := <-done:
		var res workflows.TurnResult
		if b != nil && json.Unmarshal(b, &res) == nil {
			return res, idleAnswered
		}
		return workflows.TurnResult{}, idleRecorded
	case o := <-sent:
		switch {
		case o.refused:
			return workflows.TurnResult{}, idleRefused
		case o.err != nil:
			if ctx.Err() == nil {
				c.Log.Warn("send idle turn: falling back to the queue", "turn_id", in.TurnID, "err", o.err)
			}
			return workflows.TurnResult{}, idleUnknown
		}
		return o.res, idleAnswered
	}
}

// awaitBegunTurn waits for the result of a turn that already began: one
// submitted as an Update by a server from before the Enqueue signal is
// awaited through its Update; any other through its recorded result.
func (c *clientAPI) awaitBegunTurn(ctx context.Context, ref workflows.SessionRef, ti store.TurnInput) (workflows.TurnResult, error) {
	done, stop := c.Hub.WatchTurn(ti.TurnID)
	defer stop()
	if res, ok, err := c.recordedResult(ctx, ti.TurnID); ok || err != nil {
		return res, err
	}
	res, found, err := c.Engine.AwaitTurn(ctx, ref.ID, ti.TurnID)
	if err != nil || found {
		return res, err
	}
	in := workflows.SendMessageInput{TurnID: ti.TurnID, ClientKeyID: ti.ClientKeyID, Arrived: ti.Arrived.UnixMicro()}
	return c.awaitTurnResult(ctx, ref, in, done, true)
}

// awaitTurnResult waits until the turn's result is recorded, woken by its
// announcement (from any replica, usually carrying the result), and checks
// now and then that the workflow still holds the turn. read says whether
// the result may already be stored (a resend): a turn just enqueued has
// none before its announcement, so nothing is read until then.
func (c *clientAPI) awaitTurnResult(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput, done <-chan []byte, read bool) (workflows.TurnResult, error) {
	check := time.NewTicker(turnCheckInterval)
	defer check.Stop()
	for {
		if read {
			if res, ok, err := c.recordedResult(ctx, in.TurnID); ok || err != nil {
				return res, err
			}
		}
		select {
		case <-ctx.Done():
			return workflows.TurnResult{}, ctx.Err()
		case b := <-done:
			var res workflows.TurnResult
			if b != nil && json.Unmarshal(b, &res) == nil {
				return res, nil
			}
			read = true
		case <-check.C:
			if res, ok, err := c.checkTurn(ctx, ref, in); ok || err != nil {
				return res, err
			}
			read = true
		}
	}
}

// recordedResult reads the turn's recorded result; ok is false until there
// is one.
func (c *clientAPI) recordedResult(ctx context.Context, turnID string) (res workflows.TurnResult, ok bool, err error) {
	var st store.TurnState
	if err := waitForStore(ctx, func(ctx context.Context) error {
		var err error
		st, err = c.Store.TurnState(ctx, turnID)
		return err
	}); err != nil {
		return workflows.TurnResult{}, false, err
	}
	if st.Result == nil {
		return workflows.TurnResult{}, false, nil
	}
	if err := json.Unmarshal(st.Result, &res); err != nil {
		return workflows.TurnResult{}, false, fmt.Errorf("decode result of turn %s: %w", turnID, err)
	}
	return res, true, nil
}

// checkTurn handles a turn whose result is slow to come: still queued or
// running is fine; a turn that never began and that the workflow does not
// hold (its run ended, or the signal was lost) is enqueued again; one that
// began and ended without a recorded result (under a server from before
// the Enqueue signal, or in a run an operator terminated) answers from the
// event log.
func (c *clientAPI) checkTurn(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput) (workflows.TurnResult, bool, error) {
	qctx, cancel := context.WithTimeout(ctx, controlWaitForCheck)
	v, err := c.Engine.Control(qctx, ref.ID)
	cancel()
	if err != nil || v.Holds(in.TurnID) {
		return workflows.TurnResult{}, false, nil
	}
	ti, err := c.Store.TurnInputByID(ctx, in.TurnID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return workflows.TurnResult{}, false, fmt.Errorf("turn %s has no stored message", in.TurnID)
		}
		return workflows.TurnResult{}, false, nil
	}
	if len(ti.Result) > 0 {
		return workflows.TurnResult{}, false, nil // read on the next pass
	}
	if len(ti.BeginResult) == 0 {
		in.Arrived = ti.Arrived.UnixMicro()
		return workflows.TurnResult{}, false, c.Engine.Enqueue(ctx, ref, in)
	}
	res, err := c.loggedOutcome(ctx, ref.ID, ti)
	return res, err == nil, err
}

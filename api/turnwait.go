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

// TurnCheckInterval is how often a server waiting for a turn's result asks
// the session's workflow whether it still holds the turn (see checkTurn);
// the result itself is announced, not polled. A result whose announcement
// is lost arrives with the next check, this long after the wait began.
const TurnCheckInterval = 5 * time.Second

// controlWaitForCheck bounds that question: a workflow busy with a provider
// call answers only once the call's workflow task ends.
const controlWaitForCheck = 10 * time.Second

// heldCheckMax bounds the back-off of the check while the turn is held on
// a pending approval. Such a turn began (so it is never enqueued again),
// and may wait for days: asking its workflow every TurnCheckInterval cost
// a query task per held turn every 5 s. The pending approval row, read
// from PostgreSQL, says the workflow took the turn, so the wait backs off
// and asks the workflow only this often, which still notices a run an
// operator terminated.
const heldCheckMax = 5 * time.Minute

// errClientGone ends a wait whose client went away. The turn goes on in
// the workflow and its result is recorded (turn_inputs.result), where a
// resend under the same Idempotency-Key reads it; waiting on for nobody
// held a goroutine (and, for a SendIdle Update, a long poll) per turn,
// for as long as an approval stays pending.
var errClientGone = errors.New("the client went away")

// runTurn runs a stored turn and waits for the result the workflow records
// when it ends. A turn that found no other unfinished message when it was
// stored (idle) is first offered to the workflow as a SendIdle Update,
// which runs it at once or is refused; any other, or a refused one, is put
// in the session's queue with an Enqueue signal. The wait ends with
// errClientGone once gone closes and the workflow has the turn.
func (c *clientAPI) runTurn(ctx context.Context, gone <-chan struct{}, ref workflows.SessionRef, in workflows.SendMessageInput, idle bool) (workflows.TurnResult, error) {
	done, stop := c.Hub.WatchTurn(in.TurnID)
	defer stop()
	read := false
	if idle && c.IdleUpdate {
		res, fate := c.sendIdle(ctx, gone, ref, in, done)
		switch fate {
		case idleAnswered:
			return res, nil
		case idleAbandoned:
			return workflows.TurnResult{}, errClientGone
		case idleRecorded:
			return c.awaitTurnResult(ctx, gone, ref, in, done, true)
		case idleUnknown:
			// It may have been admitted: the signal is then dropped, and
			// the result may be stored already.
			read = true
		}
	}
	if err := c.Engine.Enqueue(ctx, ref, in); err != nil {
		return workflows.TurnResult{}, err
	}
	return c.awaitTurnResult(ctx, gone, ref, in, done, read)
}

// idleFate is what became of a SendIdle Update.
type idleFate int

const (
	idleAnswered  idleFate = iota // its result is known
	idleRecorded                  // its result is recorded, to be read
	idleRefused                   // the session was busy: the turn did not run
	idleUnknown                   // no outcome came back (an error, an old worker)
	idleAbandoned                 // the client went away after the turn began
)

// sendIdle submits the SendIdle Update and waits for its outcome or the
// turn's recorded result, whichever comes first: the result is announced
// when it is stored, before the workflow task that ran the turn completes
// the Update. Once gone closes, the Update is abandoned as soon as the
// turn began: only then is it sure the workflow took it (an Update
// cancelled before it was admitted would leave the turn to the orphan
// sweep), and the Update of a turn held on an approval stays open as long
// as the hold.
func (c *clientAPI) sendIdle(ctx context.Context, gone <-chan struct{}, ref workflows.SessionRef, in workflows.SendMessageInput, done <-chan []byte) (workflows.TurnResult, idleFate) {
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
	var begun <-chan time.Time // polls the turn's start once gone closed
	for {
		select {
		case <-gone:
			gone = nil
			begun = time.After(0)
			continue
		case <-begun:
			if st, err := c.Store.TurnState(ctx, in.TurnID); err == nil && st.Began {
				return workflows.TurnResult{}, idleAbandoned
			}
			begun = time.After(TurnCheckInterval / 10)
			continue
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
}

// awaitBegunTurn waits for the result of a turn that already began: one
// submitted as an Update by a server from before the Enqueue signal is
// awaited through its Update; any other through its recorded result.
func (c *clientAPI) awaitBegunTurn(ctx context.Context, gone <-chan struct{}, ref workflows.SessionRef, ti store.TurnInput) (workflows.TurnResult, error) {
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
	return c.awaitTurnResult(ctx, gone, ref, in, done, true)
}

// awaitTurnResult waits until the turn's result is recorded, woken by its
// announcement (from any replica, usually carrying the result), and checks
// now and then that the workflow still holds the turn (less and less
// often while it is held on an approval: see heldCheckMax). read says
// whether the result may already be stored (a resend): a turn just
// enqueued has none before its announcement, so nothing is read until
// then. It ends with errClientGone when gone closes: the workflow has the
// turn (its signal is in history, or it began).
func (c *clientAPI) awaitTurnResult(ctx context.Context, gone <-chan struct{}, ref workflows.SessionRef, in workflows.SendMessageInput, done <-chan []byte, read bool) (workflows.TurnResult, error) {
	interval := TurnCheckInterval
	check := time.NewTimer(interval)
	defer check.Stop()
	asked := time.Now() // when the workflow was last asked, or the wait began
	for {
		if read {
			if res, ok, err := c.recordedResult(ctx, in.TurnID); ok || err != nil {
				return res, err
			}
		}
		select {
		case <-ctx.Done():
			return workflows.TurnResult{}, ctx.Err()
		case <-gone:
			return workflows.TurnResult{}, errClientGone
		case b := <-done:
			var res workflows.TurnResult
			if b != nil && json.Unmarshal(b, &res) == nil {
				return res, nil
			}
			read = true
		case <-check.C:
			held := c.heldOnApproval(ctx, ref.ID, in.TurnID)
			if held {
				interval = min(2*interval, heldCheckMax)
			} else {
				interval = TurnCheckInterval
			}
			check.Reset(interval)
			if held && time.Since(asked) < heldCheckMax {
				continue
			}
			asked = time.Now()
			if res, ok, err := c.checkTurn(ctx, ref, in); ok || err != nil {
				return res, err
			}
			read = true
		}
	}
}

// heldOnApproval reports a turn waiting for an approval's decision; an
// error reads as not held, so the workflow is asked as before.
func (c *clientAPI) heldOnApproval(ctx context.Context, sessionID, turnID string) bool {
	held, err := c.Store.TurnHeldOnApproval(ctx, sessionID, turnID)
	return err == nil && held
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
// event log. One that began and did not end is enqueued again too: its
// begin committed in a workflow task that never completed (a SendIdle
// Update accepted in a speculative task whose worker died), so no run
// holds it; the workflow runs it from what the store holds (the begin and
// any stored provider answer are read back, not made twice).
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
	in.Arrived = ti.Arrived.UnixMicro()
	if len(ti.BeginResult) == 0 {
		return workflows.TurnResult{}, false, c.enqueueAgain(ctx, ref, in)
	}
	res, err := c.loggedOutcome(ctx, ref.ID, ti)
	if !errors.Is(err, errNoOutcome) {
		return res, err == nil, err
	}
	sess, err := c.Store.GetSession(ctx, ref.ID)
	if err != nil {
		return workflows.TurnResult{}, false, nil // asked again on the next pass
	}
	if sess.State != store.StateOpen {
		// A new run would only find the session closed under the turn.
		return workflows.TurnResult{Outcome: workflows.OutcomeRejected, Rejection: workflows.RejectSessionNotOpen, Detail: sess.State}, true, nil
	}
	c.Log.Warn("a turn began but no workflow holds it: enqueued again", "session_id", ref.ID, "turn_id", in.TurnID)
	return workflows.TurnResult{}, false, c.enqueueAgain(ctx, ref, in)
}

// enqueueAgain signals a turn again, naming what is ahead of it; one whose
// list cannot be read now is signalled on a later pass.
func (c *clientAPI) enqueueAgain(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput) error {
	in, err := c.withAhead(ctx, ref.ID, in)
	if err != nil {
		c.Log.Warn("read the turns ahead of a turn to enqueue again", "turn_id", in.TurnID, "err", err)
		return nil
	}
	return c.Engine.Enqueue(ctx, ref, in)
}

// withAhead names the unfinished turns stored before a turn submitted
// again (store.Store.TurnsAhead), as its first submission did: a
// resubmission that named none let its turn run before a turn whose begin
// committed in a lost workflow task, whose begin then took that turn out
// of the conversation, and the turn, run later, ended superseded with no
// answer.
func (c *clientAPI) withAhead(ctx context.Context, sessionID string, in workflows.SendMessageInput) (workflows.SendMessageInput, error) {
	ahead, err := c.Store.TurnsAhead(ctx, sessionID, in.TurnID)
	if err != nil {
		return in, err
	}
	in.Ahead = aheadTurns(ahead)
	return in, nil
}

// aheadTurns are a store's unfinished turns as a submission names them.
func aheadTurns(ahead []store.UnfinishedTurn) []workflows.AheadTurn {
	var out []workflows.AheadTurn
	for _, a := range ahead {
		out = append(out, workflows.AheadTurn{TurnID: a.TurnID, ClientKeyID: a.ClientKeyID, Arrived: a.Arrived})
	}
	return out
}

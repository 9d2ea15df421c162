package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

func toolStep(it int, callID string) string { return fmt.Sprintf("i%d/t/%s", it, callID) }

// serverResults collects the tool_result blocks of an iteration's
// server-dispatched calls from their tool.result events, in call order.
func (a *Activities) serverResults(ctx context.Context, ref workflows.TurnRef, it int, calls []workflows.ToolCall) ([]block, error) {
	var out []block
	for _, c := range calls {
		if c.Dispatch == events.DispatchClient {
			continue
		}
		ev, err := a.Store.EventByIdem(ctx, ref.SessionID, idem(ref.TurnID, toolStep(it, c.ID)+"/result"))
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("tool %s (%s) has no recorded result", c.Name, c.ID)
		}
		if err != nil {
			return nil, err
		}
		var p struct {
			Content json.RawMessage `json:"content"`
			IsError bool            `json:"is_error"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return nil, fmt.Errorf("decode tool result: %w", err)
		}
		out = append(out, block{"type": "tool_result", "tool_use_id": c.ID, "content": p.Content, "is_error": p.IsError})
	}
	return out, nil
}

// FinishIteration ends an iteration that had tool calls: with a client call
// among them the turn pauses (server.message.send with every block tagged by
// dispatch, and the stashed server results); otherwise the server results
// become the next user message and the loop goes on.
func (a *Activities) FinishIteration(ctx context.Context, in workflows.FinishIterationInput) (workflows.FinishIterationResult, error) {
	ctx, done := a.work.track(ctx, in.TurnID)
	defer done()
	results, err := a.serverResults(ctx, in.TurnRef, in.Iteration, in.Calls)
	if err != nil {
		return workflows.FinishIterationResult{}, err
	}
	hasClient := false
	dispatch := map[string]events.Dispatch{}
	for _, c := range in.Calls {
		dispatch[c.ID] = c.Dispatch
		if c.Dispatch == events.DispatchClient {
			hasClient = true
		}
	}
	// Fenced by the iteration's assistant message, which its server
	// results answer: a run of a superseded turn appends no results after
	// a later turn's messages, and stores no pause.
	fence := tailFence(in.SessionID, idem(in.TurnID, fmt.Sprintf("i%d/asst", in.Iteration)))
	if !hasClient {
		content, _ := json.Marshal(results)
		key := idem(in.TurnID, fmt.Sprintf("i%d/results", in.Iteration))
		err := a.Store.Tx(ctx, func(tx *store.Tx) error {
			tx.Fence(fence)
			tx.AppendMessage(in.SessionID, key, "user", content)
			return nil
		})
		if errors.Is(err, store.ErrTurnSuperseded) {
			// Appended by another run of this step: the turn goes on.
			if _, merr := a.Store.MessageByIdem(ctx, in.SessionID, key); !errors.Is(merr, store.ErrNotFound) {
				return workflows.FinishIterationResult{}, merr
			}
			return workflows.FinishIterationResult{}, a.turnSuperseded(ctx, in.TurnID, "iteration's results", err, "iteration", in.Iteration)
		}
		return workflows.FinishIterationResult{}, err
	}
	smsKey := idem(in.TurnID, fmt.Sprintf("i%d/sms", in.Iteration))
	msg, err := a.Store.CachedMessage(ctx, in.SessionID, idem(in.TurnID, fmt.Sprintf("i%d/asst", in.Iteration)))
	if errors.Is(err, store.ErrNotFound) {
		// Taken out of the conversation with its turn: paused by another
		// run of this step (the pause stands), else superseded, not a
		// not-found to retry until the turn fails after a later turn.
		if ev, eerr := a.Store.EventByIdem(ctx, in.SessionID, smsKey); eerr == nil {
			return workflows.FinishIterationResult{Paused: true, LastSeq: ev.Seq}, nil
		}
		if ferr := a.checkFence(ctx, fence); ferr != nil {
			return workflows.FinishIterationResult{}, a.turnSuperseded(ctx, in.TurnID, "iteration's pause", ferr, "iteration", in.Iteration)
		}
	}
	if err != nil {
		return workflows.FinishIterationResult{}, fmt.Errorf("load assistant message: %w", err)
	}
	arr, _ := blocksOf(msg.Content)
	var toolUses []json.RawMessage
	for _, b := range arr {
		if blockType(b) != "tool_use" {
			continue
		}
		if d, ok := dispatch[strField(b, "id")]; ok {
			b["dispatch"] = d
		}
		raw, _ := json.Marshal(b)
		toolUses = append(toolUses, raw)
	}
	annotated, _ := json.Marshal(arr)
	stash := make([]json.RawMessage, 0, len(results))
	for _, r := range results {
		raw, _ := json.Marshal(r)
		stash = append(stash, raw)
	}
	var last int64
	err = a.Store.Tx(ctx, func(tx *store.Tx) error {
		tx.Fence(fence)
		evs, err := tx.AppendEvents(ctx, in.SessionID, store.NewEvent{
			IdemKey: smsKey, TurnID: in.TurnID, ClientKeyID: in.ClientKeyID,
			Payload: events.ServerMessage{Content: annotated},
		})
		if err != nil {
			return err
		}
		last = lastSeq(evs)
		return tx.SetPendingTurn(ctx, in.SessionID, &store.PendingTurn{TurnID: in.TurnID, Owner: in.ClientKeyID, ToolUses: toolUses, ServerResults: stash})
	})
	if errors.Is(err, store.ErrTurnSuperseded) {
		// Paused by another run of this step, and answered since: the pause
		// stands as that run stored it, and is not set again.
		if ev, eerr := a.Store.EventByIdem(ctx, in.SessionID, smsKey); eerr == nil {
			return workflows.FinishIterationResult{Paused: true, LastSeq: ev.Seq}, nil
		} else if !errors.Is(eerr, store.ErrNotFound) {
			return workflows.FinishIterationResult{}, eerr
		}
		return workflows.FinishIterationResult{}, a.turnSuperseded(ctx, in.TurnID, "iteration's pause", err, "iteration", in.Iteration)
	}
	if err != nil {
		return workflows.FinishIterationResult{}, err
	}
	return workflows.FinishIterationResult{Paused: true, LastSeq: last}, nil
}

// FailTurn records why a turn could not finish. A turn whose step failed
// (ReasonTurnFailed) leaves the conversation as it was before the turn and
// the session open; the other reasons move the session to error.
func (a *Activities) FailTurn(ctx context.Context, in workflows.FailTurnInput) error {
	ctx, done := a.work.track(ctx, in.TurnID)
	defer done()
	payload := events.SessionErrorPayload{Reason: in.Reason}
	switch in.Reason {
	case events.ReasonAllProvidersFailed:
		payload.Attempts = &in.Attempts
	case events.ReasonLoopLimit:
		n := workflows.MaxIterations
		payload.MaxIterations = &n
	case events.ReasonTurnFailed:
		payload.Step = &in.Step
		payload.Detail = in.Detail
	}
	key := idem(in.TurnID, "fail")
	err := a.Store.Tx(ctx, func(tx *store.Tx) error {
		// Fenced by the turn itself: a run of the turn that an interrupt
		// or a later turn overtook (on a worker Temporal gave up on, or
		// whose step failed because the conversation moved on) stores no
		// failure after the later turn's events and takes nothing of that
		// turn out of the conversation.
		tx.FenceUnended(in.SessionID, in.TurnID)
		if _, err := tx.AppendEvents(ctx, in.SessionID, store.NewEvent{
			IdemKey: key, TurnID: in.TurnID, ClientKeyID: in.ClientKeyID, Payload: payload,
		}); err != nil {
			return err
		}
		if in.Reason == events.ReasonTurnFailed {
			removed, err := tx.RepairConversation(ctx, in.SessionID, in.TurnID)
			if err == nil && len(removed) > 0 {
				a.logger(ctx, in.TurnID).Warn("failed turn taken out of the conversation", "turns", removed)
			}
			return err
		}
		_, err := tx.EndSession(ctx, in.SessionID, store.StateError)
		return err
	})
	if errors.Is(err, store.ErrTurnSuperseded) {
		// Stored by another run of this step (which took the turn out):
		// the failure stands.
		if _, eerr := a.Store.EventByIdem(ctx, in.SessionID, key); !errors.Is(eerr, store.ErrNotFound) {
			return eerr
		}
		return a.turnSuperseded(ctx, in.TurnID, "turn failure", err, "reason", in.Reason)
	}
	return err
}

// CleanupSession releases a session's server resources (sandbox, subagents,
// MCP connections) through the registered cleaners.
func (a *Activities) CleanupSession(ctx context.Context, in workflows.CleanupInput) error {
	var errs []error
	for _, c := range a.Cleaners {
		if err := c.CleanupSession(ctx, in); err != nil {
			errs = append(errs, err)
		}
	}
	a.endSessionSpan(ctx, in)
	return errors.Join(errs...)
}

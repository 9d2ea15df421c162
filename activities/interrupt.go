package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// interruptWait bounds how long InterruptTurn waits for the turn's
// cancelled activities in this process to return.
const interruptWait = 5 * time.Second

// Idempotency steps of what an interrupt stores.
const (
	stepInterrupted = "interrupted" // the server.message.interrupted event
	stepIntResults  = "x/results"   // the closing tool_result message
	stepIntAsst     = "x/asst"      // the kept assistant message
)

// InterruptTurn closes an interrupted turn: it stops the turn's activities
// in this process and kills a sandbox command it left running, then, in one
// transaction, answers every open tool_use with an error tool_result, keeps
// the streamed partial answer (or InterruptedText) as the turn's assistant
// message, frees a paused turn's gate and stores server.message.interrupted.
// The conversation then ends with an assistant message that asks for no
// tool, as a completed turn's does, so every provider accepts the next
// turn. A turn that stored its final answer before the interrupt reached it
// is left as it is (Outcome completed).
func (a *Activities) InterruptTurn(ctx context.Context, in workflows.InterruptTurnInput) (workflows.InterruptTurnResult, error) {
	// The turn's activities here stop now, a sandbox command it runs is
	// killed (the activity may be on another worker, or blocked reading
	// the command's output), then what they left is settled.
	a.work.cancel(in.TurnID)
	a.killTurnExecs(ctx, in.TurnRef)
	partial := a.work.stop(ctx, in.TurnID, interruptWait)
	// Stored: this is a retry.
	if ev, err := a.Store.EventByIdem(ctx, in.SessionID, idem(in.TurnID, stepInterrupted)); err == nil {
		return workflows.InterruptTurnResult{LastSeq: ev.Seq}, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return workflows.InterruptTurnResult{}, err
	}
	var res workflows.InterruptTurnResult
	err := a.untilStored(ctx, "close interrupted turn", func(ctx context.Context) error {
		return a.Store.Tx(ctx, func(tx *store.Tx) error {
			var err error
			res, err = a.closeInterrupted(ctx, tx, in, partial)
			return err
		})
	})
	if err == nil && res.Outcome == "" && res.Begin == nil && !res.NotPaused {
		a.logger(ctx, in.TurnID).Info("turn interrupted", "by", in.By)
	}
	return res, err
}

// openCall is a tool_use of the turn's last assistant message.
type openCall struct {
	id       string
	dispatch events.Dispatch
	server   string
}

// lastCalls reads the tool_use blocks of the turn's last message when it
// is an assistant message asking for tools, with the iteration that asked
// and each call's dispatch (from its tool.call event).
func lastCalls(ctx context.Context, tx *store.Tx, sessionID, turnID string, last store.KeyedMessage) (int, []openCall, error) {
	arr, _ := blocksOf(last.Content)
	it, err := iterationOfKey(turnID, last.IdemKey)
	if err != nil {
		return 0, nil, err
	}
	var calls []openCall
	for _, b := range arr {
		if blockType(b) == "tool_use" {
			calls = append(calls, openCall{id: strField(b, "id"), dispatch: events.DispatchClient})
		}
	}
	for k := range calls {
		ev, err := tx.EventWithKey(ctx, sessionID, idem(turnID, fmt.Sprintf("i%d/tc/%d", it, k)))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		var p struct {
			ID         string          `json:"id"`
			Dispatch   events.Dispatch `json:"dispatch"`
			ServerName *string         `json:"server_name"`
		}
		if json.Unmarshal(ev.Payload, &p) == nil && p.ID == calls[k].id {
			calls[k].dispatch = p.Dispatch
			if p.ServerName != nil {
				calls[k].server = *p.ServerName
			}
		}
	}
	return it, calls, nil
}

// nextIteration is the iteration a turn whose last message is the user
// message keyed key calls the provider in: 0 after the turn's own message,
// N+1 after iteration N's tool results ("<turn>/iN/results").
func nextIteration(turnID, key string) int {
	if it, err := iterationOfKey(turnID, key); err == nil {
		return it + 1
	}
	return 0
}

// iterationOfKey is N of an assistant message keyed "<turn>/iN/asst".
func iterationOfKey(turnID, key string) (int, error) {
	rest, ok := strings.CutPrefix(key, turnID+"/i")
	if !ok {
		return 0, fmt.Errorf("assistant message %q is not an iteration's", key)
	}
	n, _, _ := strings.Cut(rest, "/")
	it, err := strconv.Atoi(n)
	if err != nil {
		return 0, fmt.Errorf("assistant message %q is not an iteration's", key)
	}
	return it, nil
}

func (a *Activities) closeInterrupted(ctx context.Context, tx *store.Tx, in workflows.InterruptTurnInput, partial json.RawMessage) (workflows.InterruptTurnResult, error) {
	sid, turn := in.SessionID, in.TurnID
	if in.Begin != nil {
		// Begun already (the stored result comes back), or begun now: the
		// interrupted message still enters the conversation.
		b, evs, err := a.beginInTx(ctx, tx, *in.Begin)
		if err != nil {
			return workflows.InterruptTurnResult{}, err
		}
		if len(evs) > 0 {
			if _, err := tx.AppendEvents(ctx, sid, evs...); err != nil {
				return workflows.InterruptTurnResult{}, err
			}
		}
		if b.Outcome != "" {
			return workflows.InterruptTurnResult{Begin: &b}, nil
		}
	}
	pending, _, err := tx.PendingTurn(ctx, sid)
	if err != nil {
		return workflows.InterruptTurnResult{}, err
	}
	// Another run of this interrupt (a timed-out workflow task's, and its
	// retry's on another replica) may have stored it since InterruptTurn
	// looked: under the session row lock taken above this read sees it.
	// Without it the kept answer would read as a completed turn's.
	if ev, err := tx.EventWithKey(ctx, sid, idem(turn, stepInterrupted)); err == nil {
		return workflows.InterruptTurnResult{LastSeq: ev.Seq}, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return workflows.InterruptTurnResult{}, err
	}
	paused := pending != nil && pending.TurnID == turn
	if in.Paused && !paused {
		// The paused turn was resumed or abandoned before this interrupt
		// was stored (its tool_uses have their results in the next turn's
		// message): a second tool_result would answer no tool_use.
		return workflows.InterruptTurnResult{NotPaused: true}, nil
	}
	msgs, err := tx.TurnMessages(ctx, sid, turn)
	if err != nil {
		return workflows.InterruptTurnResult{}, err
	}
	if len(msgs) == 0 {
		return workflows.InterruptTurnResult{}, fmt.Errorf("interrupted turn %s has no message in the conversation", turn)
	}
	last := msgs[len(msgs)-1]
	if last.Role == "assistant" && !asksForToolContent(last.Content) {
		// It stored its final answer before the interrupt reached it.
		return workflows.InterruptTurnResult{Outcome: workflows.OutcomeCompleted}, nil
	}
	if !paused && last.Role == "assistant" {
		// Interrupted while it ran, yet its tool calls are no longer the
		// conversation's end: it paused first, and a later turn resumed
		// or abandoned the pause, that turn's begin made by a workflow
		// task that was then lost (the task that took this interrupt
		// replayed the turn as running). Its calls have their results in
		// that turn's message; a second tool_result would answer no
		// tool_use, which a provider refuses on every later turn. The
		// pause is the turn's outcome, and the later turn begins again
		// (its begin's stored result comes back).
		after, err := tx.MessageAfter(ctx, sid, last.Seq)
		if err != nil {
			return workflows.InterruptTurnResult{}, err
		}
		if after {
			return workflows.InterruptTurnResult{Outcome: workflows.OutcomePaused}, nil
		}
	}
	var (
		evs     []store.NewEvent
		closed  = []string{}
		content = textContent(events.InterruptedText)
		isPart  bool
	)
	if last.Role == "assistant" {
		// Its tool calls were running, or it paused for client tools:
		// each gets its result, an error for those that had none.
		it, calls, err := lastCalls(ctx, tx, sid, turn, last)
		if err != nil {
			return workflows.InterruptTurnResult{}, err
		}
		results := make([]store.NewEvent, 0, len(calls))
		for _, c := range calls {
			key := idem(turn, toolStep(it, c.id)+"/result")
			switch _, err := tx.EventWithKey(ctx, sid, key); {
			case errors.Is(err, store.ErrNotFound):
				closed = append(closed, c.id)
			case err != nil:
				return workflows.InterruptTurnResult{}, err
			}
			results = append(results, store.NewEvent{
				IdemKey: key, TurnID: turn, ClientKeyID: in.ClientKeyID,
				Payload: events.ToolResultPayload{ToolUseID: c.id, Dispatch: c.dispatch, ServerName: events.Optional(c.server), IsError: true, Content: textContent(events.InterruptedText)},
			})
		}
		var stored []store.Event
		if len(results) > 0 {
			// A result already stored (a finished server tool, or one that
			// finished as the interrupt came) is kept: the append returns it.
			if stored, err = tx.AppendEvents(ctx, sid, results...); err != nil {
				return workflows.InterruptTurnResult{}, err
			}
		}
		blocks := make([]block, 0, len(stored))
		for i, e := range stored {
			var p struct {
				Content json.RawMessage `json:"content"`
				IsError bool            `json:"is_error"`
			}
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				return workflows.InterruptTurnResult{}, fmt.Errorf("decode tool result: %w", err)
			}
			blocks = append(blocks, block{"type": "tool_result", "tool_use_id": calls[i].id, "content": p.Content, "is_error": p.IsError})
		}
		raw, _ := json.Marshal(blocks)
		tx.AppendMessage(sid, idem(turn, stepIntResults), "user", raw)
	} else {
		if len(partial) == 0 {
			// The call ran on another worker (or this one restarted since):
			// what it kept is in the database.
			if partial, err = tx.KeptPartial(ctx, turn, nextIteration(turn, last.IdemKey)); err != nil {
				return workflows.InterruptTurnResult{}, err
			}
		}
		if len(partial) > 0 {
			content, isPart = partial, true
		}
	}
	if paused {
		if err := tx.SetPendingTurn(ctx, sid, nil); err != nil {
			return workflows.InterruptTurnResult{}, err
		}
	}
	tx.AppendMessage(sid, idem(turn, stepIntAsst), "assistant", content)
	evs = append(evs, store.NewEvent{
		IdemKey: idem(turn, stepInterrupted), TurnID: turn, ClientKeyID: in.ClientKeyID,
		Payload: events.InterruptedMessage{Content: content, Partial: isPart, ClosedToolUseIDs: closed, By: in.By},
	})
	stored, err := tx.AppendEvents(ctx, sid, evs...)
	if err != nil {
		return workflows.InterruptTurnResult{}, err
	}
	return workflows.InterruptTurnResult{LastSeq: lastSeq(stored)}, nil
}

// killTurnExecs kills the sandbox commands the turn's last tool calls
// started and that have no result: the activity running one may be on
// another worker, which hears of the cancellation only at its next
// heartbeat, and a command outlives the connection that started it.
func (a *Activities) killTurnExecs(ctx context.Context, ref workflows.TurnRef) {
	if a.Sandbox == nil {
		return
	}
	var (
		it    int
		calls []openCall
	)
	err := a.Store.Tx(ctx, func(tx *store.Tx) error {
		msgs, err := tx.TurnMessages(ctx, ref.SessionID, ref.TurnID)
		if err != nil || len(msgs) == 0 {
			return err
		}
		last := msgs[len(msgs)-1]
		if last.Role != "assistant" || !asksForToolContent(last.Content) {
			return nil
		}
		it, calls, err = lastCalls(ctx, tx, ref.SessionID, ref.TurnID, last)
		return err
	})
	if err != nil {
		a.logger(ctx, ref.TurnID).Warn("interrupt: read the turn's tool calls", "err", err)
		return
	}
	var sandboxCalls []openCall
	for _, c := range calls {
		if c.dispatch == events.DispatchSandbox {
			sandboxCalls = append(sandboxCalls, c)
		}
	}
	if len(sandboxCalls) == 0 {
		return
	}
	sb, err := a.Store.Sandbox(ctx, ref.SessionID)
	if err != nil || sb == nil || sb.ID == "" {
		return
	}
	var wg sync.WaitGroup
	for _, c := range sandboxCalls {
		if _, err := a.Store.EventByIdem(ctx, ref.SessionID, idem(ref.TurnID, toolStep(it, c.id)+"/result")); err == nil {
			continue
		}
		x := execID(workflows.ToolCallInput{TurnRef: ref, Iteration: it, Call: workflows.ToolCall{ID: c.id}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Sandbox.CancelExec(context.WithoutCancel(ctx), sb.ID, x); err != nil {
				a.logger(ctx, ref.TurnID).Warn("interrupt: kill sandbox command", "tool_use_id", c.id, "err", err)
			}
		}()
	}
	wg.Wait()
}

// asksForToolContent reports whether message content holds a tool_use.
func asksForToolContent(content json.RawMessage) bool {
	arr, _ := blocksOf(content)
	for _, b := range arr {
		if blockType(b) == "tool_use" {
			return true
		}
	}
	return false
}

// partialText collects the text a streamed answer has delivered so far, by
// content block, for an interrupt to keep. Tool input is not kept: a
// tool_use cut short has no valid input and no result.
type partialText struct {
	mu     sync.Mutex
	blocks map[int]*strings.Builder
}

func (p *partialText) add(d provider.Delta) {
	if d.Kind != provider.DeltaText {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocks == nil {
		p.blocks = map[int]*strings.Builder{}
	}
	b := p.blocks[d.Index]
	if b == nil {
		b = &strings.Builder{}
		p.blocks[d.Index] = b
	}
	b.WriteString(d.Text)
}

// content is the text received, as content blocks in block order; nil
// when there is none (blank text is dropped: providers refuse it).
func (p *partialText) content() json.RawMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	idx := make([]int, 0, len(p.blocks))
	for i := range p.blocks {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var out []block
	for _, i := range idx {
		if t := p.blocks[i].String(); strings.TrimSpace(t) != "" {
			out = append(out, block{"type": "text", "text": t})
		}
	}
	if len(out) == 0 {
		return nil
	}
	raw, _ := json.Marshal(out)
	return raw
}

// partialStoreWait bounds the write of a stopped call's partial answer
// (the call's own context is cancelled by then).
const partialStoreWait = 2 * time.Second

// storePartial stores the text a stopped provider call had streamed, for
// the worker that closes the interrupted turn: the next workflow task may
// run on another worker than the call's. The write is made only when a
// call is stopped; a failed one leaves this worker's copy.
func (a *Activities) storePartial(ctx context.Context, in workflows.CallProviderInput, run int, content json.RawMessage) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), partialStoreWait)
	defer cancel()
	k := store.KeptPartial{Content: content, Run: run, Iteration: in.Iteration}
	if err := a.Store.KeepPartial(sctx, in.TurnID, k); err != nil {
		a.logger(ctx, in.TurnID).Warn("keep the stopped call's partial answer", "err", err)
	}
}

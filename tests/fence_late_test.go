package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// A turn's failure is fenced by the turn itself (docs/benchmarks.md,
// "Chaos", finding 2): the campaign's late turns failed at CallMCPTool or
// on a spent budget after a later turn began, and their failure's repair
// took the later turn out of the conversation (its answer then found its
// turn superseded: a provider.request without a response).

// staleFailure is a turn's failure as a run of the turn that the session
// moved on from stores it: on another worker, for a step that failed.
func staleFailure(ctx context.Context, e *env, d *driver, turnID string) error {
	return otherWorker(e).FailTurn(ctx, workflows.FailTurnInput{
		TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: turnID, ClientKeyID: d.keyID},
		Reason:  events.ReasonTurnFailed, Step: "CallMCPTool",
	})
}

// A failure of a turn that a later turn followed stores nothing: no
// session.error after the later turn, nothing taken out. Seen red without
// FailTurn's fence (the session.error was stored after the later turn's
// answer and the answered turn was taken out of the conversation).
func TestStaleTurnFailureAfterLaterTurnStoresNothing(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	d.send("first")
	ids := turnIDs(t, e, d.sid)
	turnA := ids[len(ids)-1]
	_, term := d.send("second")
	require.Equal(t, "echo: second", firstText(message(term)))
	before, texts := turnEventTypes(t, e, d.sid, turnA), conversationTexts(t, e, d.sid)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	requireSuperseded(t, staleFailure(ctx, e, d, turnA))
	assert.Equal(t, before, turnEventTypes(t, e, d.sid, turnA), "the superseded turn stored its failure")
	assert.Equal(t, texts, conversationTexts(t, e, d.sid), "the conversation changed")
	requireValidNextTurn(t, e, d, "primary")
}

// The campaign's shape: the late failure lands while the later turn's
// provider call is out. The later turn's message stays, and its answer is
// stored and sent. Seen red without FailTurn's fence (the repair took the
// later turn's message out; its answer found it superseded and the client
// got "the turn failed at superseded").
func TestStaleTurnFailureKeepsTheRunningTurn(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	turnA := sendFirst(t, e, d)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, turnB := startHungTurn(t, ctx, e, d, "second", fakeprovider.Text("live answer"))
	defer st.Close()

	requireSuperseded(t, staleFailure(ctx, e, d, turnA))
	e.fake.Release()
	term := terminal(t, st)
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "live answer", firstText(message(term)))
	assert.NotContains(t, turnEventTypes(t, e, d.sid, turnA), "session.error")
	assert.Equal(t, "server.message.send", last(turnEventTypes(t, e, d.sid, turnB)))
	requireValidNextTurn(t, e, d, "primary")
}

// A failure stored by another run of the step stands: the retry (its
// fence fails, as the failure took the turn out) answers as done.
func TestTurnFailureRetryIsDone(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	sendFirst(t, e, d)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, turnB := startHungTurn(t, ctx, e, d, "second", fakeprovider.Text("live answer"))
	defer st.Close()
	require.NoError(t, staleFailure(ctx, e, d, turnB), "the turn's own failure")
	require.NoError(t, staleFailure(ctx, e, d, turnB), "its retry")
	assert.Equal(t, 1, countOf(turnEventTypes(t, e, d.sid, turnB), "session.error"))
	e.fake.Release()
}

// A tool call whose turn was taken out of the conversation, run by a
// worker that reads the conversation afresh (another replica), ends
// superseded at once. Seen red without the prologue's fence on a missing
// assistant message: it failed "load assistant message: not found",
// retryable, so the turn failed at CallMCPTool ten attempts later, after
// the later turn (the campaign's CallMCPTool shape).
func TestToolCallOfATurnTakenOutIsSuperseded(t *testing.T) {
	e, d, held := openHeldMCP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "list_files", map[string]any{"path": "/data"}))
	st := d.stream(ctx, "list them")
	defer st.Close()
	waitFor(t, held.entered, "the live worker's MCP call")
	ids := turnIDs(t, e, d.sid)
	turnA := ids[len(ids)-1]
	takeOut(t, ctx, e, d.sid, turnA)

	cold := coldStore(t, ctx, e)
	fresh := staleWorker(e)
	fresh.Store = cold
	_, err := fresh.CallMCPTool(ctx, workflows.ToolCallInput{
		TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: turnA, ClientKeyID: d.keyID},
		Call:    workflows.ToolCall{ID: "tu_1", Name: "list_files", Dispatch: events.DispatchMCP, Server: "fs"},
	})
	requireSuperseded(t, err)
	close(held.release)
	terminal(t, st)
}

// sendFirst answers a first turn and returns its id, its provider call's
// start taken (startHungTurn waits for the next one's).
func sendFirst(t *testing.T, e *env, d *driver) string {
	t.Helper()
	_, term := d.send("first")
	require.Equal(t, "echo: first", firstText(message(term)))
	<-e.fake.Started()
	ids := turnIDs(t, e, d.sid)
	return ids[len(ids)-1]
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// An iteration's end whose assistant message was taken out with its turn
// (a later turn followed), run by a worker that reads the conversation
// afresh, ends superseded at once. Seen red without FinishIteration's
// check: it failed "load assistant message: not found", retryable, so
// the turn failed five minutes later, after later turns (the campaign's
// step "unknown" shape).
func TestIterationEndOfATurnTakenOutIsSuperseded(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	turnA := sendFirst(t, e, d)
	_, term := d.send("second")
	require.Equal(t, "echo: second", firstText(message(term)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	takeOut(t, ctx, e, d.sid, turnA)

	cold := coldStore(t, ctx, e)
	fresh := otherWorker(e)
	fresh.Store = cold
	_, err := fresh.FinishIteration(ctx, workflows.FinishIterationInput{
		// Iteration 1: the turn's i0 answer is its final one (i0/sms).
		TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: turnA, ClientKeyID: d.keyID}, Iteration: 1,
		Calls: []workflows.ToolCall{{ID: "tu_gone", Name: "probe", Dispatch: events.DispatchClient}},
	})
	requireSuperseded(t, err)
	requireValidNextTurn(t, e, d, "primary")
}

// takeOut takes turn out of the session's conversation, as a later turn's
// begin does with an unfinished one.
func takeOut(t *testing.T, ctx context.Context, e *env, sid, turn string) {
	t.Helper()
	require.NoError(t, e.srv.Parts.Store.Tx(ctx, func(tx *store.Tx) error {
		_, err := tx.RepairConversation(ctx, sid, turn)
		return err
	}))
}

// coldStore is a store with nothing cached, as another replica's worker
// reads the conversation afresh.
func coldStore(t *testing.T, ctx context.Context, e *env) *store.Store {
	t.Helper()
	cold, err := store.Open(ctx, e.srv.DatabaseURL, store.Options{})
	require.NoError(t, err)
	t.Cleanup(cold.Close)
	return cold
}

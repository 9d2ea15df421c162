package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/activities"
	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/workflows"
)

// TestInterruptPausedTurnAfterItsResume: an interrupt that the workflow
// took while a turn was paused on a client tool is stored only after the
// driver resumed that turn with the tool's result (the chaos campaign's
// finding 1; a workflow task that timed out while its InterruptTurn local
// activity wrote on can do this). It must store
// nothing: the turn's tool_use already has its result, and a second
// tool_result would answer no tool_use, which a real provider refuses on
// every later turn. The strict fake accepts the next turn, and an
// interrupt without a turnId then finds no turn to stop.
func TestInterruptPausedTurnAfterItsResume(t *testing.T) {
	r := resumedPause(t, "tu_p")
	e, d, parts, paused := r.e, r.d, r.parts, r.turnID
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The interrupt the workflow took while the turn was paused lands now.
	res, err := parts.Activities.InterruptTurn(ctx, workflows.InterruptTurnInput{
		TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: paused, ClientKeyID: d.keyID},
		By:      d.keyID, Paused: true,
	})
	require.NoError(t, err)
	assert.True(t, res.NotPaused, "the resumed turn was closed as if still paused: %+v", res)

	evs := d.allEvents()
	assert.Empty(t, ofTypeIn(evs, "server.message.interrupted"), "a resumed turn was interrupted")
	assert.Equal(t, map[string]int{"tu_p": 1}, toolResultsPerUse(evs), "one tool_result per tool_use")

	// No turn runs or is paused: an interrupt naming none stops nothing.
	res2 := result(t, d.call("session.interrupt", map[string]any{}))
	assert.Equal(t, false, res2["interrupted"])
	assert.Nil(t, res2["turnId"])

	requireValidNextTurn(t, e, d, "primary")
}

// TestInterruptOfARunningTurnAfterItsPauseWasResumed: the workflow took
// the interrupt while the turn still ran (in its history the pause had
// not come yet), but the turn had paused and the driver's resume had
// begun, in a workflow task that was then lost (the chaos campaign's hour
// on 2249c7d, ses_4e29…: the turn's tool_use got a second tool_result,
// "[interrupted]", after the resume's, and every later request carried
// it). InterruptTurn without Paused must store nothing and say the turn
// paused: its pause came first and was answered.
func TestInterruptOfARunningTurnAfterItsPauseWasResumed(t *testing.T) {
	r := resumedPause(t, "tu_r")
	e, d, parts, pausedTurn := r.e, r.d, r.parts, r.turnID
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The interrupt a replayed task took while the turn ran lands now.
	res, err := parts.Activities.InterruptTurn(ctx, workflows.InterruptTurnInput{
		TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: pausedTurn, ClientKeyID: d.keyID},
		By:      d.keyID,
	})
	require.NoError(t, err)
	assert.Equal(t, workflows.OutcomePaused, res.Outcome, "%+v", res)

	evs := d.allEvents()
	assert.Empty(t, ofTypeIn(evs, "server.message.interrupted"), "a resumed turn was interrupted")
	assert.Equal(t, map[string]int{"tu_r": 1}, toolResultsPerUse(evs), "one tool_result per tool_use")

	requireValidNextTurn(t, e, d, "primary")
}

// TestInterruptRunTwiceAtOnceBothSeeTheInterrupt: InterruptTurn is a local
// activity, so a workflow task that timed out while it ran has it run
// again by the task's retry on another replica while the first run still
// writes (the chaos campaign's ses_6d44…: both runs found nothing stored,
// the first closed the turn interrupted, the second then found the turn's
// kept "[interrupted]" answer, took it for a completed answer, and the
// workflow answered the message as completed with the interrupt's text).
// Both runs must say the turn was interrupted, and only one stores.
// Seen red without closeInterrupted's check under the session row lock
// (the second run said completed).
func TestInterruptRunTwiceAtOnceBothSeeTheInterrupt(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open("get_time")
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("let me look").WithToolUse("tu_p", "get_time", nil))
	_, term := d.send("what time?")
	require.Nil(t, term["error"])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := e.srv.Parts.Engine.Control(ctx, d.sid)
	require.NoError(t, err)
	require.NotNil(t, v.Paused)
	turn := v.Paused.TurnID

	// Hold the session row so both runs pass their first look for a stored
	// interrupt and queue on the row, as two replicas' runs do.
	pool := e.srv.Parts.Store.Pool
	hold, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(ctx) }()
	_, err = hold.Exec(ctx, `SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE`, d.sid)
	require.NoError(t, err)

	in := workflows.InterruptTurnInput{TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: turn, ClientKeyID: d.keyID}, By: d.keyID}
	type out struct {
		res workflows.InterruptTurnResult
		err error
	}
	outs := make(chan out, 2)
	for _, a := range []*activities.Activities{e.srv.Parts.Activities, otherWorker(e)} {
		go func() {
			r, err := a.InterruptTurn(ctx, in)
			outs <- out{r, err}
		}()
	}
	require.Eventually(t, func() bool {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'SELECT pending_turn%'`).Scan(&n)
		return n == 2
	}, 30*time.Second, 20*time.Millisecond, "both runs wait on the session row")
	require.NoError(t, hold.Rollback(ctx))

	for range 2 {
		o := <-outs
		require.NoError(t, o.err)
		assert.Empty(t, o.res.Outcome, "a run took the interrupt's kept text for a completed answer: %+v", o.res)
		assert.False(t, o.res.NotPaused, "%+v", o.res)
		assert.NotZero(t, o.res.LastSeq, "%+v", o.res)
	}
	assert.Len(t, ofTypeIn(d.allEvents(), "server.message.interrupted"), 1)
}

// resumed is a session whose turn paused on the client tool get_time and
// was then resumed by its driver, answered (strict fake).
type resumed struct {
	e      *env
	d      *driver
	parts  *app.Parts
	turnID string // the turn that paused
}

// resumedPause runs resumed's turn: a call of get_time with tool_use id
// useID, its pause, and the driver's result for it, answered "it is noon".
func resumedPause(t *testing.T, useID string) resumed {
	t.Helper()
	var parts *app.Parts
	e := newEnvWith(t, envOpts{}, func(p *app.Parts) error {
		parts = p
		return nil
	})
	e.fake.Strict(true)
	pid := e.srv.Profile(t, map[string]any{
		"name":             fmt.Sprintf("interrupt-%d", profileSeq.Add(1)),
		"primary_provider": "primary",
		"allowed_tools":    []string{"get_time"},
	})
	require.NotNil(t, parts)
	d := e.openOn(pid, map[string]any{"tools": []any{tool("get_time")}})
	d.register()

	e.fake.Lane("primary").Enqueue(fakeprovider.Text("let me look").WithToolUse(useID, "get_time", nil))
	_, term := d.send("what time?")
	require.Nil(t, term["error"])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := parts.Engine.Control(ctx, d.sid)
	require.NoError(t, err)
	require.NotNil(t, v.Paused)

	// The driver resumes the paused turn; its turn completes.
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("it is noon"))
	_, term = d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": useID, "content": "12:00"}})
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "it is noon", firstText(message(term)))
	return resumed{e: e, d: d, parts: parts, turnID: v.Paused.TurnID}
}

// toolResultsPerUse counts the tool.result events of each tool_use id.
func toolResultsPerUse(evs []map[string]any) map[string]int {
	n := map[string]int{}
	for _, r := range ofTypeIn(evs, "tool.result") {
		id, _ := payload(r)["tool_use_id"].(string)
		n[id]++
	}
	return n
}

package tests

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/bae-go/bae-go/activities"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/workflows"
)

// A provider attempt of a turn that PostgreSQL moved on from stores
// nothing (docs/benchmarks.md, "Chaos", finding 2). The stale attempt runs
// on "another worker": its own Activities over the same database, so an
// interrupt of the live workflow does not reach it, as it does not reach a
// local activity on a worker whose workflow task Temporal gave up on.

// otherWorker is the server's activities as a second replica has them.
func otherWorker(e *env) *activities.Activities {
	a := e.srv.Parts.Activities
	return &activities.Activities{Store: a.Store, Config: a.Config, Provider: a.Provider, Log: a.Log, Lookup: a.Lookup}
}

// terminal reads a sendMessage stream to its terminal object.
func terminal(t *testing.T, st *testenv.Stream) map[string]any {
	t.Helper()
	m := terminalOf(st, time.Minute)
	require.NotNil(t, m, "the stream ended without a terminal object")
	return m
}

// turnEventTypes are a turn's events in the log, in order.
func turnEventTypes(t *testing.T, e *env, sid, turnID string) []string {
	t.Helper()
	rows, err := e.srv.Parts.Store.Pool.Query(context.Background(), `SELECT event_type FROM session_events
		WHERE session_id = $1 AND turn_id = $2 ORDER BY seq`, sid, turnID)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// conversationTexts are the texts of the session's conversation, in order.
func conversationTexts(t *testing.T, e *env, sid string) []string {
	t.Helper()
	msgs, err := e.srv.Parts.Store.History(context.Background(), sid)
	require.NoError(t, err)
	var out []string
	for _, m := range msgs {
		var content any
		require.NoError(t, json.Unmarshal(m.Content, &content))
		out = append(out, textOf(content))
	}
	return out
}

func requireSuperseded(t *testing.T, err error) {
	t.Helper()
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "want an application error, got %v", err)
	assert.Equal(t, workflows.ErrTurnSuperseded, ae.Type())
	assert.True(t, ae.NonRetryable(), "a superseded attempt is not retried")
}

// startHungTurn sends content with the fake holding its answer until
// released, and returns the stream and the turn id once the call is out.
func startHungTurn(t *testing.T, ctx context.Context, e *env, d *driver, content string, answer fakeprovider.Reply) (*testenv.Stream, string) {
	t.Helper()
	e.fake.Lane("primary").Enqueue(answer.UntilReleased())
	st := d.stream(ctx, content)
	select {
	case <-e.fake.Started():
	case <-ctx.Done():
		t.Fatal("the turn's provider call never started")
	}
	ids := turnIDs(t, e, d.sid)
	return st, ids[len(ids)-1]
}

// Finding 2 with an interrupt: the turn's call is out on two workers, the
// turn is interrupted and the next turn answered; then the stale call
// answers. It stores nothing: the client's interrupt and the next turn's
// answer stand. Seen red with the answer's fence removed (the stale
// answer stored after the next turn's, "one message, two answers").
func TestStaleAttemptAfterInterruptStoresNothing(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, turnA := startHungTurn(t, ctx, e, d, "slow one", fakeprovider.Text("live answer"))
	defer st.Close()

	// The same turn's attempt on a worker Temporal gave up on.
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("stale answer").UntilReleased())
	type outcome struct {
		res workflows.CallProviderResult
		err error
	}
	stale := make(chan outcome, 1)
	go func() {
		res, err := otherWorker(e).CallProvider(ctx, workflows.CallProviderInput{
			TurnRef:  workflows.TurnRef{SessionID: d.sid, TurnID: turnA, ClientKeyID: d.keyID},
			Provider: "primary", Retry: 7,
			Record: &workflows.RecordTurnResultInput{SessionID: d.sid, TurnID: turnA},
		})
		stale <- outcome{res, err}
	}()
	select {
	case <-e.fake.Started():
	case <-ctx.Done():
		t.Fatal("the stale attempt's call never started")
	}

	res := result(t, d.call("session.interrupt", map[string]any{"turnId": turnA}))
	require.Equal(t, true, res["interrupted"], "%v", res)
	term := terminal(t, st)
	require.Nil(t, term["error"], "%v", term["error"])

	_, next := d.send("next one")
	require.Nil(t, next["error"], "%v", next["error"])
	require.Equal(t, "echo: next one", firstText(message(next)))

	e.fake.Release()
	got := <-stale
	requireSuperseded(t, got.err)

	typesA := turnEventTypes(t, e, d.sid, turnA)
	require.NotEmpty(t, typesA)
	assert.Equal(t, "server.message.interrupted", typesA[len(typesA)-1], "nothing of the interrupted turn after its end: %v", typesA)
	assert.NotContains(t, typesA, "server.message.send", "the interrupted turn was answered")
	texts := conversationTexts(t, e, d.sid)
	assert.NotContains(t, texts, "stale answer")
	assert.Equal(t, "echo: next one", texts[len(texts)-1], "the next turn's answer ends the conversation")
	requireValidNextTurn(t, e, d, "primary")
}

// Finding 2 without an interrupt: an attempt of a turn after a later turn
// began and ended prepares nothing: no provider call with the later
// conversation (whose answer would echo the later message) and no event.
// Seen red with the prepare's fence removed (the fake received the later
// conversation and a provider.request was stored for the old turn).
func TestStaleAttemptAfterLaterTurnCallsNothing(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	d.send("first")
	ids := turnIDs(t, e, d.sid)
	turnA := ids[len(ids)-1]
	_, term := d.send("second")
	require.Equal(t, "echo: second", firstText(message(term)))
	calls, events := len(e.fake.Requests()), len(d.allEvents())

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := otherWorker(e).CallProvider(ctx, workflows.CallProviderInput{
		TurnRef:  workflows.TurnRef{SessionID: d.sid, TurnID: turnA, ClientKeyID: d.keyID},
		Provider: "primary", Retry: 7,
	})
	requireSuperseded(t, err)
	assert.Equal(t, calls, len(e.fake.Requests()), "a superseded attempt called the provider")
	assert.Equal(t, events, len(d.allEvents()), "a superseded attempt stored events")
	requireValidNextTurn(t, e, d, "primary")
}

// Two runs of one attempt (the workflow task moved to another worker while
// the first still ran it): the first to store its answer wins; the other's
// fence fails, and it answers the workflow with what was stored instead of
// failing the turn. Seen red with fenced() not reading the stored answer
// (the turn failed "superseded").
func TestDuplicateAttemptAnswersWithTheStoredAnswer(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, turnA := startHungTurn(t, ctx, e, d, "twice", fakeprovider.Text("held answer"))
	defer st.Close()

	// The other run of the same attempt answers first (the fake echoes).
	res, err := otherWorker(e).CallProvider(ctx, workflows.CallProviderInput{
		TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: turnA, ClientKeyID: d.keyID}, Provider: "primary",
	})
	require.NoError(t, err)
	require.True(t, res.OK && res.Final, "%+v", res)

	e.fake.Release()
	term := terminal(t, st)
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "echo: twice", firstText(message(term)), "the answer stored first is the turn's")
	typesA := turnEventTypes(t, e, d.sid, turnA)
	n := 0
	for _, typ := range typesA {
		if typ == "server.message.send" {
			n++
		}
	}
	assert.Equal(t, 1, n, "one answer: %v", typesA)
	assert.NotContains(t, conversationTexts(t, e, d.sid), "held answer")
	requireValidNextTurn(t, e, d, "primary")
}

// The live workflow's own attempt finds its turn superseded (an interrupt
// stored by a run of the turn this history does not hold): the turn ends
// failed at "superseded" with nothing more stored, neither a session.error
// nor a repair that would take the interrupt's kept text out of the
// conversation. Recorded as superseded.json (BAE_RECORD_HISTORY=1). Seen
// red with the workflow's superseded branch off (a turn_failed
// session.error, and the interrupted turn's messages taken out).
func TestSupersededTurnEndsWithNothingStored(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, turnA := startHungTurn(t, ctx, e, d, "superseded", fakeprovider.Text("late answer"))
	defer st.Close()

	ires, err := otherWorker(e).InterruptTurn(ctx, workflows.InterruptTurnInput{
		TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: turnA, ClientKeyID: d.keyID}, By: d.keyID,
	})
	require.NoError(t, err)
	require.Empty(t, ires.Outcome, "%+v", ires)
	before := turnEventTypes(t, e, d.sid, turnA)

	e.fake.Release()
	term := terminal(t, st)
	assert.Contains(t, rpcError(t, term, -32603), workflows.StepSuperseded)
	assert.Equal(t, before, turnEventTypes(t, e, d.sid, turnA), "the superseded turn stored nothing more")
	texts := conversationTexts(t, e, d.sid)
	assert.Equal(t, []string{"superseded", "[interrupted]"}, texts, "the interrupt's messages stay in the conversation")

	requireValidNextTurn(t, e, d, "primary")
	d.closeSession()
	recordAndReplay(t, e, d.sid, "superseded")
}

package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/store"
)

// TestStoringAMessageIsOneRoundTrip: a message stored under the queue caps
// is one batch (the locks, the insert with the caps checked by the server,
// and with a key the message stored under it before), where it was BEGIN,
// the locks, the lookup, the count, the insert and COMMIT one after the
// other. The caps, their order and the resend are as before.
func TestStoringAMessageIsOneRoundTrip(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	other, _, err := st.CreateSession(ctx, sess.ProfileID, store.ClientDecl{ClientKeyID: sess.ClientKeyID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	caps := store.Caps{QueuedTurnsPerSession: 2, QueuedTurnsPerKey: 3}
	msg := json.RawMessage(`{"role":"user","content":"hi"}`)
	put := func(sessionID, turnID, key string) (store.PutTurn, error, store.DBCalls) {
		before := st.DBCalls()
		p, err := st.PutTurnInput(ctx, sessionID, turnID, sess.ClientKeyID, msg, key, caps)
		after := st.DBCalls()
		return p, err, store.DBCalls{RoundTrips: after.RoundTrips - before.RoundTrips, Statements: after.Statements - before.Statements}
	}

	p, err, calls := put(sess.ID, "trn_1", "")
	require.NoError(t, err)
	assert.True(t, p.Idle)
	assert.False(t, p.Arrived.IsZero())
	assert.Equal(t, store.DBCalls{RoundTrips: 1, Statements: 2}, calls, "the locks and the insert")

	p, err, calls = put(sess.ID, "trn_2", "key-2")
	require.NoError(t, err)
	assert.False(t, p.Idle)
	require.Len(t, p.Ahead, 1)
	assert.Equal(t, "trn_1", p.Ahead[0].TurnID)
	assert.Nil(t, p.Prior)
	assert.Equal(t, store.DBCalls{RoundTrips: 1, Statements: 3}, calls, "the locks, the insert and the message stored under the key")

	// The session's queue is full: refused, nothing stored.
	_, err, calls = put(sess.ID, "trn_3", "key-3")
	var quota *store.QuotaError
	require.True(t, errors.As(err, &quota), "%v", err)
	assert.Equal(t, store.QuotaError{Scope: store.ScopeSession, Resource: store.ResourceQueuedTurns, Limit: 2}, *quota)
	assert.Equal(t, int64(1), calls.RoundTrips)

	// A resend under a stored key is answered with its message, full or not.
	p, err, calls = put(sess.ID, "trn_2b", "key-2")
	require.NoError(t, err)
	require.NotNil(t, p.Prior)
	assert.Equal(t, "trn_2", p.Prior.TurnID)
	assert.JSONEq(t, string(msg), string(p.Prior.Message))
	assert.Equal(t, int64(1), calls.RoundTrips)

	// The key's cap counts its open sessions' queues.
	_, err = st.PutTurnInput(ctx, other.ID, "trn_o1", sess.ClientKeyID, msg, "", caps)
	require.NoError(t, err)
	_, err, _ = put(other.ID, "trn_o2", "")
	require.True(t, errors.As(err, &quota), "%v", err)
	assert.Equal(t, store.QuotaError{Scope: store.ScopeClientKey, Resource: store.ResourceQueuedTurns, Limit: 3}, *quota)

	var n int
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT count(*) FROM turn_inputs WHERE client_key_id = $1`, sess.ClientKeyID).Scan(&n))
	assert.Equal(t, 3, n, "nothing refused was stored")

	// Concurrent sends count one after the other: the cap holds.
	fresh, _, err := st.CreateSession(ctx, sess.ProfileID, store.ClientDecl{ClientKeyID: sess.ClientKeyID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	caps = store.Caps{QueuedTurnsPerSession: 2}
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.PutTurnInput(ctx, fresh.ID, fmt.Sprintf("trn_c%d", i), sess.ClientKeyID, msg, "", caps)
			if errors.As(err, &quota) {
				mu.Lock()
				refused++
				mu.Unlock()
				return
			}
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT count(*) FROM turn_inputs WHERE session_id = $1`, fresh.ID).Scan(&n))
	assert.Equal(t, 2, n)
	assert.Equal(t, 6, refused)
}

// TestCatchUpWaitsForALocalCommit: a reader that knows the log reaches a
// sequence (a turn's result, whose notice can arrive before the commit
// that sent it settled in this process) waits for this process's commit
// in flight and reads memory, not the table.
func TestCatchUpWaitsForALocalCommit(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	turnID := "trn_wait"
	ev := func(step string) store.NewEvent {
		return store.NewEvent{IdemKey: turnID + "/" + step, TurnID: turnID, ClientKeyID: sess.ClientKeyID,
			Payload: events.ClientMessage{Role: "user", Content: json.RawMessage(`"x"`)}}
	}
	// Followed, with the turn's first events in memory (its begin).
	_, err := st.FollowEvents(ctx, sess.ID, 0, 100)
	require.NoError(t, err)
	var head int64
	require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
		out, err := tx.AppendEvents(ctx, sess.ID, ev("cms"))
		if err == nil {
			head = out[0].Seq - 1
		}
		return err
	}))

	waiting := make(chan struct{}, 1)
	st.OnSettleWait(func() { waiting <- struct{}{} })
	committed, release, txDone := make(chan int64, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		txDone <- st.Tx(ctx, func(tx *store.Tx) error {
			out, err := tx.AppendAndCommit(ctx, sess.ID, []store.NewEvent{ev("resp"), ev("sms")}, store.Then{})
			if err != nil {
				close(committed)
				return err
			}
			// Committed on the server; not settled here until fn returns.
			committed <- out[len(out)-1].Seq
			<-release
			return nil
		})
	}()
	last, ok := <-committed
	require.True(t, ok, "the answer committed")
	type read struct {
		evs []store.Event
		err error
	}
	got := make(chan read, 1)
	rctx, calls := store.CountCalls(ctx)
	go func() {
		evs, err := st.FollowEventsThrough(rctx, sess.ID, head, last, 256)
		got <- read{evs, err}
	}()
	var r read
	select {
	case <-waiting:
		close(release)
		r = <-got
	case r = <-got:
		close(release)
	}
	require.NoError(t, <-txDone)
	require.NoError(t, r.err)
	assert.Zero(t, calls().RoundTrips, "read from memory once the commit settled")
	require.Len(t, r.evs, 3)
	assert.Equal(t, last, r.evs[2].Seq)
}

// TestRequestCommitsWithItsAppend: a provider.request, the last write of
// its transaction (the begin's or the attempt's), is appended, its run
// numbered and the transaction committed in one round trip, where the
// append and the COMMIT were two.
func TestRequestCommitsWithItsAppend(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	turnID := "trn_req"
	storeTurnInput(t, st, sess, turnID)
	for i, step := range []string{"i0/a0", "i0/a1"} {
		run := &store.NumberRun{TurnID: turnID, Step: step}
		var out []store.Event
		before := st.DBCalls()
		require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
			tx.AppendMessage(sess.ID, turnID+"/user-"+step, "user", json.RawMessage(`"hi"`))
			var err error
			out, err = tx.AppendAndCommit(ctx, sess.ID, []store.NewEvent{{IdemKey: turnID + "/" + step + "/req", TurnID: turnID,
				Payload: events.ClientMessage{Role: "user", Content: json.RawMessage(`"x"`)}}}, store.Then{Run: run})
			return err
		}))
		assert.Equal(t, int64(1), st.DBCalls().RoundTrips-before.RoundTrips, "BEGIN, the message, the append, the run and COMMIT")
		require.Len(t, out, 1)
		assert.Equal(t, int64(i+1), run.Got.Run)
		if i > 0 {
			assert.Equal(t, "i0/a0", run.Got.PrevStep)
		}
	}
	evs, err := st.EventsAfter(ctx, sess.ID, 0, 10)
	require.NoError(t, err)
	assert.Len(t, evs, 3, "the session's open and both requests committed")
	// The two round trips' path numbers the run the same way.
	store.SetAnswerInOneTrip(false)
	defer store.SetAnswerInOneTrip(true)
	run := &store.NumberRun{TurnID: turnID, Step: "i0/a2"}
	before := st.DBCalls()
	require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
		_, err := tx.AppendAndCommit(ctx, sess.ID, []store.NewEvent{{IdemKey: turnID + "/i0/a2/req", TurnID: turnID,
			Payload: events.ClientMessage{Role: "user", Content: json.RawMessage(`"x"`)}}}, store.Then{Run: run})
		return err
	}))
	assert.Equal(t, int64(2), st.DBCalls().RoundTrips-before.RoundTrips)
	assert.Equal(t, int64(3), run.Got.Run)
}

// TestTransactionsUseGenericPlans: a transaction's statements, and those
// of a send after its authentication and after its queue locks, run on
// generic plans (planning a
// turn's statements afresh on every call cost more CPU than it saved);
// the setting ends with the transaction and costs no round trip. One
// connection, so its prepared statements show how each was planned.
func TestTransactionsUseGenericPlans(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, testdb.New(t), store.Options{MaxConns: 1, KeyHasher: keyhash.Argon2id{Params: keyhash.TestParams}})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	mode := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		var m string
		require.NoError(t, q.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&m))
		return m
	}
	sess, secret := newSession(t, st)
	for i := range 8 { // past the 5 custom plans PostgreSQL tries first
		var in string
		require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
			in = mode(tx)
			_, err := tx.BeginInputs(ctx, fmt.Sprintf("trn_g%d", i), sess.ID, sess.ClientKeyID)
			return err
		}))
		assert.Equal(t, "force_generic_plan", in)
		_, reads, err := st.AuthenticateSessionForSend(ctx, secret, sess.ID, true)
		require.NoError(t, err)
		require.NoError(t, reads.BudgetsErr)
		require.NoError(t, reads.GateErr)
		_, err = st.PutTurnInput(ctx, sess.ID, fmt.Sprintf("trn_g%d", i), sess.ClientKeyID, json.RawMessage(`{"role":"user","content":"hi"}`), "",
			store.Caps{QueuedTurnsPerSession: 100, QueuedTurnsPerKey: 100})
		require.NoError(t, err)
	}
	assert.Equal(t, "auto", mode(st.Pool), "the setting ended with the transaction and the send")
	plans := func(prefix string) (custom, generic int64) {
		require.NoError(t, st.Pool.QueryRow(ctx, `SELECT coalesce(sum(custom_plans), 0), coalesce(sum(generic_plans), 0)
			FROM pg_prepared_statements WHERE starts_with(ltrim(statement), $1)`, prefix).Scan(&custom, &generic))
		return custom, generic
	}
	for stmt, calls := range map[string]int64{
		"INSERT INTO turn_inputs": 8,
		"SELECT session_id, client_key_id, message, begin_result FROM turn_inputs": 8,
		"WITH sel AS": 8, // the send's budgets
	} {
		custom, generic := plans(stmt)
		assert.Equal(t, int64(0), custom, "%s: planned on every call", stmt)
		assert.Equal(t, calls, generic, stmt)
	}
}

package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// TestClaimSandboxCaps: a key at its cap of running sandboxes, or a
// profile at its cap, cannot claim another session's slot; a stopped
// sandbox or a closed session frees the place; a revoked key claims none.
func TestClaimSandboxCaps(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	p, err := st.CreateProfile(ctx, store.ProfileInput{Name: "main", PrimaryProvider: "x"})
	require.NoError(t, err)
	a, _, err := st.NewClientKey(ctx, "a", p.ID)
	require.NoError(t, err)
	b, _, err := st.NewClientKey(ctx, "b", p.ID)
	require.NoError(t, err)
	c, _, err := st.NewClientKey(ctx, "c", p.ID)
	require.NoError(t, err)
	sessionOf := func(k store.Key) string {
		s, _, err := st.CreateSession(ctx, p.ID, store.ClientDecl{ClientKeyID: k.ID}, events.Declarations{}, store.Caps{})
		require.NoError(t, err)
		return s.ID
	}
	caps := store.Caps{SandboxesPerKey: 1, SandboxesPerProfile: 2}
	claim := func(sid string, k store.Key) error {
		return st.ClaimSandbox(ctx, sid, p.ID, store.SandboxState{Image: "alpine", ClientKeyID: k.ID}, caps)
	}
	quota := func(err error) *store.QuotaError {
		var q *store.QuotaError
		require.ErrorAs(t, err, &q)
		return q
	}

	a1, a2 := sessionOf(a), sessionOf(a)
	require.NoError(t, claim(a1, a))
	require.ErrorIs(t, claim(a1, a), store.ErrSandboxBusy)
	assert.Equal(t, store.QuotaError{Scope: store.ScopeClientKey, Resource: store.ResourceSandboxes, Limit: 1}, *quota(claim(a2, a)))

	b1, b2 := sessionOf(b), sessionOf(b)
	require.NoError(t, claim(b1, b))
	assert.Equal(t, store.QuotaError{Scope: store.ScopeProfile, Resource: store.ResourceSandboxes, Limit: 2}, *quota(claim(b2, c)))

	// Stopping a1's sandbox frees a's place; closing b1 frees the profile's.
	require.NoError(t, st.SetSandbox(ctx, a1, nil, false))
	_, _, err = st.EndSession(ctx, b1, store.StateClosed)
	require.NoError(t, err)
	require.NoError(t, claim(a2, a))
	require.NoError(t, claim(b2, b))

	_, err = st.RevokeClientKey(ctx, b.ID)
	require.NoError(t, err)
	require.ErrorIs(t, claim(sessionOf(a), b), store.ErrClientKeyRevoked)
}

// TestCloseIdleSession: only a session whose last event is older than the
// TTL is listed and closed, with session.close (idle_timeout); an event
// appended keeps a session open.
func TestCloseIdleSession(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	idle, _ := newSession(t, st)
	busy, _, err := st.CreateSession(ctx, idle.ProfileID, store.ClientDecl{ClientKeyID: idle.ClientKeyID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	_, err = st.Pool.Exec(ctx, `UPDATE session_events SET created_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	_, err = st.Pool.Exec(ctx, `UPDATE sessions SET created_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	_, err = st.AppendEvents(ctx, busy.ID, store.NewEvent{Payload: events.DriverRegister{}})
	require.NoError(t, err)

	list, err := st.IdleSessions(ctx, time.Hour, 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, idle.ID, list[0].ID)

	closed, err := st.CloseIdleSession(ctx, busy.ID, time.Hour)
	require.NoError(t, err)
	assert.False(t, closed, "a session used within the TTL stays open")
	closed, err = st.CloseIdleSession(ctx, idle.ID, time.Hour)
	require.NoError(t, err)
	assert.True(t, closed)
	closed, err = st.CloseIdleSession(ctx, idle.ID, time.Hour)
	require.NoError(t, err)
	assert.False(t, closed, "closed once")

	got, err := st.GetSession(ctx, idle.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StateClosed, got.State)
	evs, err := st.EventsAfter(ctx, idle.ID, 0, 10)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	assert.EqualValues(t, "session.close", last.Type)
	assert.JSONEq(t, `{"reason":"idle_timeout"}`, string(last.Payload))
}

// TestIdleSweepSparesTurnsInProgress: a session past the TTL with a turn
// queued or running (its message stored, no result yet) or paused for
// client tool results is neither listed nor closed; once the turn's result
// is recorded and the pause is over it is.
func TestIdleSweepSparesTurnsInProgress(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	running, _ := newSession(t, st)
	paused, _, err := st.CreateSession(ctx, running.ProfileID, store.ClientDecl{ClientKeyID: running.ClientKeyID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	_, err = st.PutTurnInput(ctx, running.ID, "turn_running", running.ClientKeyID, json.RawMessage(`{"role":"user","content":"hi"}`), "", store.Caps{})
	require.NoError(t, err)
	require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
		return tx.SetPendingTurn(ctx, paused.ID, &store.PendingTurn{TurnID: "turn_paused", Owner: paused.ClientKeyID})
	}))
	_, err = st.Pool.Exec(ctx, `UPDATE session_events SET created_at = now() - interval '2 hours'`)
	require.NoError(t, err)
	_, err = st.Pool.Exec(ctx, `UPDATE sessions SET created_at = now() - interval '2 hours'`)
	require.NoError(t, err)

	list, err := st.IdleSessions(ctx, time.Hour, 10)
	require.NoError(t, err)
	assert.Empty(t, list, "no session with a turn in progress is idle")
	for _, s := range []store.Session{running, paused} {
		closed, err := st.CloseIdleSession(ctx, s.ID, time.Hour)
		require.NoError(t, err)
		assert.False(t, closed, "a session with a turn in progress stays open")
	}

	require.NoError(t, st.RecordTurnResult(ctx, "turn_running", map[string]any{"outcome": "completed"}))
	require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error { return tx.SetPendingTurn(ctx, paused.ID, nil) }))
	list, err = st.IdleSessions(ctx, time.Hour, 10)
	require.NoError(t, err)
	assert.Len(t, list, 2)
	for _, s := range []store.Session{running, paused} {
		closed, err := st.CloseIdleSession(ctx, s.ID, time.Hour)
		require.NoError(t, err)
		assert.True(t, closed)
	}
}

// TestAppendAfterCloseRefused: once a session is closed the store refuses,
// writing nothing, any event that may not follow a close (a turn's
// provider.response), while the wind-down of the close (its sandbox
// stopping) and a keyed event stored before the close are still answered.
func TestAppendAfterCloseRefused(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	before := store.NewEvent{IdemKey: "turn_1/p0/resp", TurnID: "turn_1", Payload: events.ProviderResponsePayload{Error: "x"}}
	stored, err := st.AppendEvents(ctx, sess.ID, before)
	require.NoError(t, err)
	ended, _, err := st.EndSession(ctx, sess.ID, store.StateClosed, store.NewEvent{Payload: events.SessionClosePayload{Reason: events.CloseClientClose}})
	require.NoError(t, err)
	require.True(t, ended)
	head, err := st.LastEventSeq(ctx, sess.ID)
	require.NoError(t, err)

	_, err = st.AppendEvents(ctx, sess.ID, store.NewEvent{TurnID: "turn_2", Payload: events.ProviderResponsePayload{Error: "late"}})
	var notOpen *store.NotOpenError
	require.ErrorAs(t, err, &notOpen)
	assert.Equal(t, store.StateClosed, notOpen.State)
	assert.EqualError(t, err, "append events: session "+sess.ID+": session is closed, not open")
	_, err = st.AppendEvents(ctx, sess.ID, store.NewEvent{Payload: events.RemoteSandbox{Kind: events.SessionSandboxStop}},
		store.NewEvent{TurnID: "turn_2", Payload: events.ProviderResponsePayload{Error: "late"}})
	require.ErrorAs(t, err, &notOpen, "one refused event refuses the whole append")
	after, err := st.LastEventSeq(ctx, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, head, after, "nothing written")

	again, err := st.AppendEvents(ctx, sess.ID, before)
	require.NoError(t, err, "an event stored before the close is answered as stored")
	assert.Equal(t, stored[0].Seq, again[0].Seq)

	_, err = st.AppendEvents(ctx, sess.ID, store.NewEvent{Payload: events.RemoteSandbox{Kind: events.SessionSandboxStop}})
	require.NoError(t, err, "the close's wind-down follows it")
	evs, err := st.EventsAfter(ctx, sess.ID, head, 10)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.EqualValues(t, events.SessionSandboxStop, evs[0].Type)
}

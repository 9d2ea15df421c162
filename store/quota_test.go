package store_test

import (
	"context"
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

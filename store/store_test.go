package store_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/keyhash"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/store"
)

func open(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), testdb.New(t), store.Options{KeyHasher: keyhash.Argon2id{Params: keyhash.TestParams}})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

func TestMigrationsRunTwice(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	p, err := st.CreateProfile(ctx, store.ProfileInput{Name: "main", PrimaryProvider: "x"})
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, st.Pool.QueryRow(ctx, "SELECT count(*) FROM schema_migrations").Scan(&n))
		return n
	}
	applied := count()
	require.Positive(t, applied)
	require.NoError(t, st.Migrate(ctx))
	require.NoError(t, st.Migrate(ctx))
	got, err := st.GetProfile(ctx, p.ID)
	require.NoError(t, err)
	assert.Equal(t, "main", got.Name, "data survives re-running migrations")
	assert.Equal(t, applied, count(), "nothing is applied twice")
}

func newSession(t *testing.T, st *store.Store) (store.Session, string) {
	t.Helper()
	ctx := context.Background()
	p, err := st.CreateProfile(ctx, store.ProfileInput{Name: "p-" + t.Name(), PrimaryProvider: "x"})
	require.NoError(t, err)
	k, _, err := st.NewClientKey(ctx, "k", p.ID)
	require.NoError(t, err)
	sess, secret, err := st.CreateSession(ctx, p.ID, store.ClientDecl{ClientKeyID: k.ID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	return sess, secret
}

func TestAppendIsIdempotentAndGapless(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	first, err := st.AppendEvents(ctx, sess.ID, store.NewEvent{IdemKey: "t/1", Payload: events.SessionClosePayload{Reason: "a"}})
	require.NoError(t, err)
	again, err := st.AppendEvents(ctx, sess.ID,
		store.NewEvent{IdemKey: "t/1", Payload: events.SessionClosePayload{Reason: "b"}},
		store.NewEvent{IdemKey: "t/2", Payload: events.DriverRegister{}})
	require.NoError(t, err)
	require.Len(t, again, 2)
	assert.Equal(t, first[0].ID, again[0].ID, "retried append returns the stored event")
	assert.JSONEq(t, `{"reason":"a"}`, string(again[0].Payload))
	evs, err := st.EventsAfter(ctx, sess.ID, 0, 100)
	require.NoError(t, err)
	require.Len(t, evs, 3) // session.open + 2
	for i, e := range evs {
		assert.Equal(t, int64(i+1), e.Seq)
	}
}

func TestConcurrentAppendsKeepOrder(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.AppendEvents(ctx, sess.ID, store.NewEvent{Payload: events.DriverRegister{}}, store.NewEvent{Payload: events.SessionClosePayload{}})
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	evs, err := st.EventsAfter(ctx, sess.ID, 0, 1000)
	require.NoError(t, err)
	require.Len(t, evs, 41)
	for i := 1; i < len(evs); i += 2 {
		// Each call's pair is contiguous: appends never interleave.
		assert.Equal(t, events.SessionDriverRegister, evs[i].Type)
		assert.Equal(t, events.SessionClose, evs[i+1].Type)
		assert.Equal(t, evs[i].Seq+1, evs[i+1].Seq)
	}
}

func TestRevokeCascade(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	p, err := st.CreateProfile(ctx, store.ProfileInput{Name: "p", PrimaryProvider: "x"})
	require.NoError(t, err)
	a, _, err := st.NewClientKey(ctx, "a", p.ID)
	require.NoError(t, err)
	b, _, err := st.NewClientKey(ctx, "b", p.ID)
	require.NoError(t, err)
	solo, soloKey, err := st.CreateSession(ctx, p.ID, store.ClientDecl{ClientKeyID: a.ID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	shared, _, err := st.CreateSession(ctx, p.ID, store.ClientDecl{ClientKeyID: a.ID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	_, err = st.JoinSession(ctx, shared.ID, p.ID, store.ClientDecl{ClientKeyID: b.ID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)

	closed, err := st.RevokeClientKey(ctx, a.ID)
	require.NoError(t, err)
	assert.Equal(t, []string{solo.ID}, closed, "a session another key still holds stays open")
	_, err = st.AuthenticateSessionKey(ctx, soloKey, solo.ID)
	assert.ErrorIs(t, err, store.ErrNotFound)
	evs, err := st.EventsAfter(ctx, solo.ID, 0, 10)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	assert.Equal(t, events.SessionClose, last.Type)
	var payload map[string]any
	require.NoError(t, json.Unmarshal(last.Payload, &payload))
	assert.Equal(t, "client_key_revoked", payload["reason"])
	s2, err := st.GetSession(ctx, shared.ID)
	require.NoError(t, err)
	assert.Equal(t, store.StateOpen, s2.State)
	_, err = st.RevokeClientKey(ctx, a.ID)
	assert.ErrorIs(t, err, store.ErrNotFound)
}

func TestProfileSandboxSettingsRoundTrip(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	p, err := st.CreateProfile(ctx, store.ProfileInput{Name: "plain", PrimaryProvider: "x"})
	require.NoError(t, err)
	assert.Equal(t, sandbox.Settings{}, p.Sandbox, "no overrides by default")

	mem, network, caps := int64(1024), "bridge", []string{}
	in := store.ProfileInput{Name: "big", PrimaryProvider: "x", Sandbox: sandbox.Settings{MemoryMiB: &mem, Network: &network, CapAdd: &caps}}
	p, err = st.CreateProfile(ctx, in)
	require.NoError(t, err)
	got, err := st.GetProfile(ctx, p.ID)
	require.NoError(t, err)
	assert.Equal(t, in.Sandbox, got.Sandbox, "an explicit empty cap_add stays explicit")

	in.Sandbox = sandbox.Settings{}
	_, err = st.ReplaceProfile(ctx, p.ID, in)
	require.NoError(t, err)
	got, err = st.GetProfile(ctx, p.ID)
	require.NoError(t, err)
	assert.Equal(t, sandbox.Settings{}, got.Sandbox, "a replace without overrides clears them")
}

// storeTurnInput stores turnID's message (a user "hi") in sess under no
// caps, as a send does: the turn that the round-trip counting tests then
// begin, answer or append to.
func storeTurnInput(t *testing.T, st *store.Store, sess store.Session, turnID string) {
	t.Helper()
	_, err := st.PutTurnInput(context.Background(), sess.ID, turnID, sess.ClientKeyID, json.RawMessage(`{"role":"user","content":"hi"}`), "", store.Caps{})
	require.NoError(t, err)
}

package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// TestUsageRecordedOncePerResponse: a call recorded twice under one
// response key (a retry whose first transaction committed) counts once,
// in the session's, key's and profile's sums; a rolled-back transaction
// counts nothing.
func TestUsageRecordedOncePerResponse(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	call := func(key string, in int64) store.UsageCall {
		return store.UsageCall{SessionID: sess.ID, IdemKey: key, ClientKeyID: sess.ClientKeyID, Provider: "primary", Model: "m",
			Input: in, Output: 10, CacheRead: 100, CacheWrite: 1, CostNanoUSD: 5}
	}
	record := func(c store.UsageCall) {
		require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
			tx.RecordUsage(c)
			_, err := tx.AppendEvents(ctx, sess.ID, store.NewEvent{IdemKey: c.IdemKey, Payload: events.ServerMessage{Content: []byte(`[]`)}})
			return err
		}))
	}
	record(call("t/i0/a0/resp", 7))
	record(call("t/i0/a0/resp", 7)) // the retry
	record(call("t/i1/a0/resp", 3))
	_ = st.Tx(ctx, func(tx *store.Tx) error {
		tx.RecordUsage(call("t/i2/a0/resp", 1000))
		return assert.AnError // rolled back
	})
	u, err := st.SessionUsage(ctx, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, store.UsageSums{Calls: 2, Input: 10, Output: 20, CacheRead: 200, CacheWrite: 2, CostNanoUSD: 10}, u)

	today := time.Now().UTC()
	for _, g := range []string{store.GroupSession, store.GroupKey, store.GroupProfile, store.GroupProvider, store.GroupDay} {
		page, tot, err := st.Usage(ctx, store.UsageQuery{GroupBy: g, From: today.AddDate(0, 0, -1), To: today}, 0, 10)
		require.NoError(t, err, g)
		require.Len(t, page.Items, 1, g)
		assert.Equal(t, u, page.Items[0].UsageSums, g)
		assert.Equal(t, u, tot, g)
	}
	page, _, err := st.Usage(ctx, store.UsageQuery{GroupBy: store.GroupDay, From: today.AddDate(0, 0, -3), To: today.AddDate(0, 0, -1)}, 0, 10)
	require.NoError(t, err)
	assert.Empty(t, page.Items, "nothing recorded before today")

	// The key's budget sees the same sums.
	_, err = st.SetBudget(ctx, "test", store.Budget{Scope: store.BudgetKey, Subject: sess.ClientKeyID, Unit: store.UnitTokens, Limit: 1000, Period: store.PeriodDay})
	require.NoError(t, err)
	_, err = st.SetBudget(ctx, "test", store.Budget{Scope: store.BudgetProfile, Subject: sess.ProfileID, Unit: store.UnitUSD, Limit: 10, Period: store.PeriodMonth})
	require.NoError(t, err)
	states, err := st.BudgetsFor(ctx, sess.ID, sess.ClientKeyID)
	require.NoError(t, err)
	require.Len(t, states, 2)
	assert.Equal(t, u.Tokens(), states[0].Spent, "key, tokens")
	assert.False(t, states[0].Exhausted())
	assert.Equal(t, int64(10), states[1].Spent, "profile, nano-dollars")
	assert.True(t, states[1].Exhausted())
	assert.Equal(t, store.BudgetProfile, store.SpentBudget(states).Scope)
	require.NotNil(t, states[0].ResetsAt)
	assert.Equal(t, time.Date(today.Year(), today.Month(), today.Day()+1, 0, 0, 0, 0, time.UTC), *states[0].ResetsAt)
}

// TestBudgetSetResetRemove: a budget is set, raised, reset (its count
// starts afresh, later calls count again) and removed; every change is in
// the audit with the state before and after.
func TestBudgetSetResetRemove(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	n := 0
	spend := func(tokens int64) {
		n++
		require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
			tx.RecordUsage(store.UsageCall{SessionID: sess.ID, IdemKey: "k" + string(rune('a'+n)), ClientKeyID: sess.ClientKeyID, Provider: "p", Model: "m", Input: tokens})
			_, err := tx.AppendEvents(ctx, sess.ID, store.NewEvent{Payload: events.ServerMessage{Content: []byte(`[]`)}})
			return err
		}))
	}
	b := store.Budget{Scope: store.BudgetSession, Subject: sess.ID, Unit: store.UnitTokens, Limit: 100, Period: store.PeriodNone}
	s, err := st.SetBudget(ctx, "admin:1", b)
	require.NoError(t, err)
	assert.Zero(t, s.Spent)
	assert.Nil(t, s.ResetsAt, "a lifetime cap never resets by itself")
	spend(120)
	s, err = st.GetBudget(ctx, store.BudgetSession, sess.ID)
	require.NoError(t, err)
	assert.True(t, s.Exhausted())

	b.Limit = 200 // raised
	s, err = st.SetBudget(ctx, "console", b)
	require.NoError(t, err)
	assert.Equal(t, int64(120), s.Spent)
	assert.False(t, s.Exhausted())

	s, err = st.ResetBudget(ctx, "admin:1", store.BudgetSession, sess.ID)
	require.NoError(t, err)
	assert.Zero(t, s.Spent)
	spend(30)
	s, err = st.ResetBudget(ctx, "admin:1", store.BudgetSession, sess.ID)
	require.NoError(t, err)
	assert.Zero(t, s.Spent, "a second reset")
	spend(5)
	s, err = st.GetBudget(ctx, store.BudgetSession, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(5), s.Spent)

	require.NoError(t, st.DeleteBudget(ctx, "admin:1", store.BudgetSession, sess.ID))
	_, err = st.GetBudget(ctx, store.BudgetSession, sess.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorIs(t, st.DeleteBudget(ctx, "admin:1", store.BudgetSession, sess.ID), store.ErrNotFound)
	_, err = st.ResetBudget(ctx, "admin:1", store.BudgetSession, sess.ID)
	require.ErrorIs(t, err, store.ErrNotFound)

	page, err := st.BudgetChanges(ctx, store.BudgetSession, sess.ID, 0, 100)
	require.NoError(t, err)
	var actions []string
	for _, c := range page.Items {
		actions = append(actions, c.Actor+" "+c.Action)
	}
	assert.Equal(t, []string{"admin:1 remove", "admin:1 reset", "admin:1 reset", "console set", "admin:1 set"}, actions)
	assert.JSONEq(t, `null`, string(page.Items[4].Before))
	assert.JSONEq(t, `{"unit":"tokens","limit":100,"period":"none","spent":120}`, string(page.Items[3].Before))
	assert.JSONEq(t, `{"unit":"tokens","limit":200,"period":"none","spent":120}`, string(page.Items[3].After))
	assert.JSONEq(t, `null`, string(page.Items[0].After))

	all, err := st.ListBudgets(ctx, 0, 10)
	require.NoError(t, err)
	assert.Empty(t, all.Items)
}

// TestUsageOfOtherSessionsDoesNotWait: two sessions under one client key
// and one profile record usage in transactions open at the same time; the
// second does not wait for the first to end (the key's and the profile's
// day are summed in rows per shard of the sessions), and a budget of the
// key and of the profile sums both once they committed.
func TestUsageOfOtherSessionsDoesNotWait(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	p, err := st.CreateProfile(ctx, store.ProfileInput{Name: "p", PrimaryProvider: "x"})
	require.NoError(t, err)
	k, _, err := st.NewClientKey(ctx, "k", p.ID)
	require.NoError(t, err)
	shard := func(id string) (n int) {
		require.NoError(t, st.Pool.QueryRow(ctx, `SELECT hashtext($1) & 15`, id).Scan(&n))
		return n
	}
	var sessions []store.Session
	for len(sessions) < 2 {
		sess, _, err := st.CreateSession(ctx, p.ID, store.ClientDecl{ClientKeyID: k.ID}, events.Declarations{}, store.Caps{})
		require.NoError(t, err)
		if len(sessions) == 0 || shard(sess.ID) != shard(sessions[0].ID) {
			sessions = append(sessions, sess)
		}
	}
	record := func(tx interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, sess store.Session, in int64) error {
		_, err := tx.Exec(ctx, store.RecordUsageSQL, sess.ID, "t/i0/a0/resp", k.ID, "primary", "m", in, int64(0), int64(0), int64(0), in)
		return err
	}
	first, err := st.Pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx) //nolint:errcheck
	require.NoError(t, record(first, sessions[0], 7))

	// The first transaction holds its rows; the second would wait for
	// them, and fails at once instead of waiting.
	second, err := st.Pool.Begin(ctx)
	require.NoError(t, err)
	defer second.Rollback(ctx) //nolint:errcheck
	_, err = second.Exec(ctx, `SET LOCAL lock_timeout = '100ms'`)
	require.NoError(t, err)
	require.NoError(t, record(second, sessions[1], 5), "the second session's usage waits for the first's transaction")
	require.NoError(t, second.Commit(ctx))
	require.NoError(t, first.Commit(ctx))

	for _, b := range []store.Budget{
		{Scope: store.BudgetKey, Subject: k.ID, Unit: store.UnitTokens, Limit: 1000, Period: store.PeriodDay},
		{Scope: store.BudgetProfile, Subject: p.ID, Unit: store.UnitUSD, Limit: 1000, Period: store.PeriodMonth},
	} {
		_, err = st.SetBudget(ctx, "test", b)
		require.NoError(t, err)
	}
	states, err := st.BudgetsFor(ctx, sessions[0].ID, k.ID)
	require.NoError(t, err)
	require.Len(t, states, 2)
	assert.Equal(t, int64(12), states[0].Spent, "key, tokens of both sessions")
	assert.Equal(t, int64(12), states[1].Spent, "profile, nano-dollars of both sessions")
}

package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// turnResult has the shape of a turn's result (workflows.TurnResult).
type turnResult struct {
	Outcome  string
	LastSeq  int64  `json:",omitempty"`
	Provider string `json:",omitempty"`
}

// answer stores a final answer as the provider call does: the message and
// the calibration queued, then the events, the usage and the result.
func answer(ctx context.Context, st *store.Store, sess store.Session, turnID string) ([]store.Event, error) {
	var out []store.Event
	err := st.Tx(ctx, func(tx *store.Tx) error {
		tx.AppendMessage(sess.ID, turnID+"/i0/asst", "assistant", json.RawMessage(`[{"type":"text","text":"hi"}]`))
		tx.Calibrate(sess.ID, 3.5)
		var err error
		out, err = tx.AppendAndCommit(ctx, sess.ID, []store.NewEvent{
			{IdemKey: turnID + "/i0/a0/resp", TurnID: turnID, ClientKeyID: sess.ClientKeyID, Payload: events.ProviderResponsePayload{OK: true}},
			{IdemKey: turnID + "/i0/sms", TurnID: turnID, ClientKeyID: sess.ClientKeyID, Payload: events.ServerMessage{Content: json.RawMessage(`[{"type":"text","text":"hi"}]`)}},
		}, store.Then{
			Usage:  &store.UsageCall{SessionID: sess.ID, IdemKey: turnID + "/i0/a0/resp", ClientKeyID: sess.ClientKeyID, Provider: "p", Model: "m", Input: 10, Output: 5},
			TurnID: turnID,
			Result: func(seq int64) any { return turnResult{Outcome: "completed", LastSeq: seq, Provider: "p"} },
		})
		return err
	})
	return out, err
}

// answerRows is what an answer leaves in the database, with the session's
// and the turn's ids taken out.
func answerRows(t *testing.T, st *store.Store, sess store.Session, turnID string) []string {
	t.Helper()
	ctx := context.Background()
	var rows []string
	for _, q := range []string{
		`SELECT seq || ' ' || coalesce(idem_key, '') || ' ' || event_type || ' ' || payload::text FROM session_events WHERE session_id = $1 AND turn_id = $2 ORDER BY seq`,
		`SELECT seq || ' ' || idem_key || ' ' || role || ' ' || content::text FROM session_messages WHERE session_id = $1 AND starts_with(idem_key, $2) ORDER BY seq`,
		`SELECT 'result ' || coalesce(result::text, 'NULL') FROM turn_inputs WHERE session_id = $1 AND turn_id = $2`,
		`SELECT 'usage ' || idem_key || ' ' || input_tokens || ' ' || output_tokens FROM usage_calls WHERE session_id = $1 AND starts_with(idem_key, $2)`,
		`SELECT 'totals ' || calls || ' ' || input_tokens FROM usage_totals WHERE session_id = $1 AND $2 <> ''`,
		`SELECT 'context ' || bytes_per_token || ' ' || last_message_seq || ' ' || last_event_seq FROM session_context c JOIN sessions s ON s.id = c.session_id WHERE c.session_id = $1 AND $2 <> ''`,
	} {
		r, err := st.Pool.Query(ctx, q, sess.ID, turnID)
		require.NoError(t, err)
		got, err := pgx.CollectRows(r, pgx.RowTo[string])
		require.NoError(t, err)
		for _, g := range got {
			rows = append(rows, strings.NewReplacer(sess.ID, "SES", turnID, "TRN").Replace(g))
		}
	}
	return rows
}

// TestAnswerIsOneRoundTrip: the answer's message, calibration, events,
// usage, result and COMMIT go to the server in one round trip, and leave
// exactly the rows, notices and local announcement the two round trips
// leave (the answer's path before).
func TestAnswerIsOneRoundTrip(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	var announced [][]byte
	st.OnTurnResult(func(_ string, result []byte) { announced = append(announced, result) })
	listen, err := pgx.Connect(ctx, st.URL())
	require.NoError(t, err)
	defer listen.Close(ctx)
	_, err = listen.Exec(ctx, `LISTEN bae_events; LISTEN bae_turns`)
	require.NoError(t, err)

	type run struct {
		rows, notices []string
		trips, stmts  int64
		announced     string
	}
	do := func(oneTrip bool) run {
		store.SetAnswerInOneTrip(oneTrip)
		t.Cleanup(func() { store.SetAnswerInOneTrip(true) })
		sess := namedSession(t, st, strconv.FormatBool(oneTrip))
		turnID := "trn_" + sess.ID
		storeTurnInput(t, st, sess, turnID)
		announced = nil
		before := st.DBCalls()
		out, err := answer(ctx, st, sess, turnID)
		require.NoError(t, err)
		after := st.DBCalls()
		require.Len(t, out, 2)
		var r run
		r.trips = after.RoundTrips - before.RoundTrips
		r.stmts = after.Statements - before.Statements
		r.rows = answerRows(t, st, sess, turnID)
		for len(r.notices) < 2 {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := listen.WaitForNotification(wctx)
			cancel()
			require.NoError(t, err)
			if !strings.Contains(n.Payload, sess.ID) {
				continue // an earlier session's
			}
			p := n.Payload
			if n.Channel == store.EventsChannel {
				p = p[:strings.LastIndex(p, "/")] // the origin differs per store
			}
			r.notices = append(r.notices, n.Channel+" "+strings.NewReplacer(sess.ID, "SES", turnID, "TRN").Replace(p))
		}
		sort.Strings(r.notices)
		require.Len(t, announced, 1)
		r.announced = string(announced[0])
		assert.JSONEq(t, `{"Outcome":"completed","LastSeq":`+strconv.FormatInt(out[1].Seq, 10)+`,"Provider":"p"}`, r.announced)
		return r
	}
	two := do(false)
	one := do(true)
	assert.Equal(t, int64(2), two.trips, "the answer's path before: two round trips")
	assert.Equal(t, int64(1), one.trips, "the answer in one round trip")
	// BEGIN, generic plans, the session lock, the append with the message,
	// the check with the notice, the result, the delta end, the usage,
	// COMMIT.
	assert.Equal(t, int64(9), one.stmts, "the answer's statements in its round trip")
	assert.Equal(t, two.rows, one.rows, "the same rows")
	assert.Equal(t, two.notices, one.notices, "the same notices")
	assert.Equal(t, two.announced, one.announced, "the same local announcement")
	t.Log(strings.Join(one.rows, "\n"))

	// A retry after the commit finds everything stored: the same events,
	// nothing written twice, the first result kept.
	sess := namedSession(t, st, "again")
	turnID := "trn_again"
	storeTurnInput(t, st, sess, turnID)
	first, err := answer(ctx, st, sess, turnID)
	require.NoError(t, err)
	rows := answerRows(t, st, sess, turnID)
	again, err := answer(ctx, st, sess, turnID)
	require.NoError(t, err)
	assert.Equal(t, first[1].Seq, again[1].Seq)
	assert.Equal(t, rows, answerRows(t, st, sess, turnID))
}

// namedSession is newSession for a test that opens several.
func namedSession(t *testing.T, st *store.Store, name string) store.Session {
	t.Helper()
	ctx := context.Background()
	p, err := st.CreateProfile(ctx, store.ProfileInput{Name: name, PrimaryProvider: "x"})
	require.NoError(t, err)
	k, _, err := st.NewClientKey(ctx, "k-"+name, p.ID)
	require.NoError(t, err)
	sess, _, err := st.CreateSession(ctx, p.ID, store.ClientDecl{ClientKeyID: k.ID}, events.Declarations{}, store.Caps{})
	require.NoError(t, err)
	return sess
}

// TestAnswerOnAClosedSessionStoresNothing: the checks the server makes in
// the answer's round trip fail it before its COMMIT, as Go's did between
// the two: a closed session is *NotOpenError, a missing one ErrNotFound,
// and none of the answer's rows stays.
func TestAnswerOnAClosedSessionStoresNothing(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	turnID := "trn_closed"
	storeTurnInput(t, st, sess, turnID)
	_, _, err := st.EndSession(ctx, sess.ID, store.StateClosed)
	require.NoError(t, err)
	empty := answerRows(t, st, sess, turnID)
	before := st.DBCalls()
	_, err = answer(ctx, st, sess, turnID)
	var notOpen *store.NotOpenError
	require.ErrorAs(t, err, &notOpen)
	assert.Equal(t, store.StateClosed, notOpen.State)
	assert.Equal(t, int64(2), st.DBCalls().RoundTrips-before.RoundTrips, "the batch, then the rollback")
	assert.Equal(t, empty, answerRows(t, st, sess, turnID), "nothing of the answer stays")

	missing := store.Session{ID: "ses_missing", ClientKeyID: sess.ClientKeyID}
	_, err = answer(ctx, st, missing, "trn_missing")
	require.True(t, errors.Is(err, store.ErrNotFound), "%v", err)
}

// TestBeginReadsTheSessionRowOnce: BeginTurn's reads are one round trip of
// three statements (the turn input, the client key, the session row with
// the conversation's last message and the profile), and read what the six
// statements before them read.
func TestBeginReadsTheSessionRowOnce(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	turnID := "trn_begin"
	storeTurnInput(t, st, sess, turnID)
	require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
		tx.AppendMessage(sess.ID, "m1", "user", json.RawMessage(`"one"`))
		return nil
	}))
	want, err := st.GetSession(ctx, sess.ID)
	require.NoError(t, err)
	profile, err := st.GetProfile(ctx, sess.ProfileID)
	require.NoError(t, err)

	read := func() store.BeginInputs {
		var bi store.BeginInputs
		before := st.DBCalls()
		require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
			var err error
			bi, err = tx.BeginInputs(ctx, turnID, sess.ID, sess.ClientKeyID)
			return err
		}))
		after := st.DBCalls()
		assert.Equal(t, int64(2), after.RoundTrips-before.RoundTrips, "the reads' round trip, then the COMMIT's")
		assert.Equal(t, int64(1+1+3+1), after.Statements-before.Statements, "BEGIN, generic plans, three reads, COMMIT")
		return bi
	}
	bi := read()
	require.NoError(t, bi.InputErr)
	assert.True(t, bi.KeyLive)
	assert.Equal(t, store.StateOpen, bi.State)
	assert.Nil(t, bi.Pending)
	assert.Equal(t, want, bi.Session)
	require.NoError(t, bi.ProfileErr)
	assert.Equal(t, profile, bi.Profile)
	require.NotNil(t, bi.Tail)
	assert.Equal(t, "m1", bi.Tail.IdemKey)
	assert.JSONEq(t, `"one"`, string(bi.Tail.Content))

	// A deleted profile, and a conversation whose last change was not an
	// append (no tail known).
	_, err = st.Pool.Exec(ctx, `UPDATE profiles SET deleted_at = now() WHERE id = $1`, sess.ProfileID)
	require.NoError(t, err)
	_, err = st.Pool.Exec(ctx, `UPDATE sessions SET last_message_seq = last_message_seq + 1 WHERE id = $1`, sess.ID)
	require.NoError(t, err)
	bi = read()
	assert.ErrorIs(t, bi.ProfileErr, store.ErrNotFound)
	assert.Nil(t, bi.Tail)
	assert.Equal(t, want.ID, bi.Session.ID)
}

// TestRunNumberedWithTheAppend: a compacting attempt's stream run is
// numbered in its request's append round trip (it was an autocommit
// statement of its own while the request was on its way).
func TestRunNumberedWithTheAppend(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	turnID := "trn_run"
	storeTurnInput(t, st, sess, turnID)
	for i, step := range []string{"i0/a0", "i0/a1"} {
		var run store.StreamRunNo
		before := st.DBCalls()
		require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
			var err error
			_, run, err = tx.AppendEventsNumberingRun(ctx, sess.ID, []store.NewEvent{{IdemKey: turnID + "/" + step + "/req", TurnID: turnID,
				Payload: events.ClientMessage{Role: "user", Content: json.RawMessage(`"x"`)}}}, turnID, step)
			return err
		}))
		assert.Equal(t, int64(2), st.DBCalls().RoundTrips-before.RoundTrips, "the append with the run, then the COMMIT")
		assert.Equal(t, int64(i+1), run.Run)
		if i > 0 {
			assert.Equal(t, "i0/a0", run.PrevStep)
		}
	}
	// A turn without a stored input is not numbered; the append stands.
	require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
		out, run, err := tx.AppendEventsNumberingRun(ctx, sess.ID, []store.NewEvent{{IdemKey: "other/req", Payload: events.ClientMessage{Role: "user", Content: json.RawMessage(`"x"`)}}}, "trn_none", "i0/a0")
		assert.Zero(t, run.Run)
		assert.Len(t, out, 1)
		return err
	}))
}

// TestAttemptInputsInTwoStatements: an attempt reads its stored response,
// then the client's declarations with the session's attempt settings in
// one statement (they were two); a key that declared nothing, and a
// missing session, are ErrNotFound as before.
func TestAttemptInputsInTwoStatements(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	read := func(sessionID, clientKeyID string) (store.AttemptInputs, error, int64) {
		var in store.AttemptInputs
		var rerr error
		before := st.DBCalls()
		require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
			in, rerr = tx.AttemptInputs(ctx, sessionID, clientKeyID, "no/such/resp")
			return nil
		}))
		return in, rerr, st.DBCalls().Statements - before.Statements
	}
	in, err, stmts := read(sess.ID, sess.ClientKeyID)
	require.NoError(t, err)
	assert.Equal(t, int64(1+1+2+1), stmts, "BEGIN, generic plans, two reads, COMMIT")
	assert.Nil(t, in.Stored)
	assert.Equal(t, sess.ClientKeyID, in.Decl.ClientKeyID)
	assert.False(t, in.TrackedSubagents)
	_, err, _ = read(sess.ID, "key_other")
	assert.ErrorIs(t, err, store.ErrNotFound, "no declarations of that key")
	_, err, _ = read("ses_missing", sess.ClientKeyID)
	assert.ErrorIs(t, err, store.ErrNotFound, "no session")
}

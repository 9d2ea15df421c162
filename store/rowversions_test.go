package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// countUpdates makes every row version an UPDATE writes to turn_inputs
// and sessions counted (the test's own database) and returns a reader.
func countUpdates(t *testing.T, st *store.Store) func() map[string]int {
	t.Helper()
	ctx := context.Background()
	_, err := st.Pool.Exec(ctx, `
		CREATE TABLE row_versions (tbl text NOT NULL);
		CREATE FUNCTION count_row_version() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN INSERT INTO row_versions VALUES (TG_TABLE_NAME); RETURN NULL; END $$;
		CREATE TRIGGER count_versions AFTER UPDATE ON turn_inputs FOR EACH ROW EXECUTE FUNCTION count_row_version();
		CREATE TRIGGER count_versions AFTER UPDATE ON sessions FOR EACH ROW EXECUTE FUNCTION count_row_version();`)
	require.NoError(t, err)
	return func() map[string]int {
		got := map[string]int{}
		rows, err := st.Pool.Query(ctx, `DELETE FROM row_versions RETURNING tbl`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var tbl string
			require.NoError(t, rows.Scan(&tbl))
			got[tbl]++
		}
		require.NoError(t, rows.Err())
		return got
	}
}

// answerWithDeltaEnd is answer with the live deltas' end, as the provider
// call stores a streamed final answer.
func answerWithDeltaEnd(ctx context.Context, st *store.Store, sess store.Session, turnID string, end int64) error {
	return st.Tx(ctx, func(tx *store.Tx) error {
		tx.AppendMessage(sess.ID, turnID+"/i0/asst", "assistant", json.RawMessage(`[{"type":"text","text":"hi"}]`))
		_, err := tx.AppendAndCommit(ctx, sess.ID, []store.NewEvent{
			{IdemKey: turnID + "/i0/a0/resp", TurnID: turnID, ClientKeyID: sess.ClientKeyID, Payload: events.ProviderResponsePayload{OK: true}},
		}, store.Then{
			Usage:    &store.UsageCall{SessionID: sess.ID, IdemKey: turnID + "/i0/a0/resp", ClientKeyID: sess.ClientKeyID, Provider: "p", Model: "m", Input: 10, Output: 5},
			DeltaEnd: &store.DeltaEnd{TurnID: turnID, RespIdem: turnID + "/i0/a0/resp", Seq: end},
			TurnID:   turnID,
			Result:   func(seq int64) any { return turnResult{Outcome: "completed", LastSeq: seq, Provider: "p"} },
		})
		return err
	})
}

// TestAnswerWritesTheTurnRowOnce: the answer's delta end rides in the
// result's update, and its message in the events' append, so the turn's
// row and the session row get one new version each, not two; the end,
// the result and the message are stored as before, and a retry keeps the
// first run's end and writes no version at all.
func TestAnswerWritesTheTurnRowOnce(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	updates := countUpdates(t, st)
	do := func(merge bool) map[string]int {
		store.SetMergeDeltaEnd(merge)
		store.SetMergeMessage(merge)
		t.Cleanup(func() { store.SetMergeDeltaEnd(true); store.SetMergeMessage(true) })
		sess := namedSession(t, st, "merge-"+map[bool]string{true: "on", false: "off"}[merge])
		turnID := "trn_" + sess.ID
		storeTurnInput(t, st, sess, turnID)
		updates()
		require.NoError(t, answerWithDeltaEnd(ctx, st, sess, turnID, 41))
		got := updates()
		end, err := st.DeltaEnd(ctx, turnID, turnID+"/i0/a0/resp")
		require.NoError(t, err)
		assert.Equal(t, int64(41), end, "the delta end is stored")
		state, err := st.TurnState(ctx, turnID)
		require.NoError(t, err)
		assert.NotNil(t, state.Result, "the result is stored")

		require.NoError(t, answerWithDeltaEnd(ctx, st, sess, turnID, 99), "a retry after the commit")
		again := updates()
		end, err = st.DeltaEnd(ctx, turnID, turnID+"/i0/a0/resp")
		require.NoError(t, err)
		assert.Equal(t, int64(41), end, "a retry keeps the first run's end")
		assert.Zero(t, again["turn_inputs"], "a retry writes no version of the turn's row")
		assert.Zero(t, again["sessions"], "a retry writes no version of the session row")
		var msgs, last int64
		require.NoError(t, st.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM session_messages WHERE session_id = $1), last_message_seq FROM sessions WHERE id = $1`, sess.ID).Scan(&msgs, &last))
		assert.Equal(t, int64(1), msgs, "the message is stored once")
		assert.Equal(t, msgs, last, "the counter names it")
		return got
	}
	before := do(false)
	after := do(true)
	assert.Equal(t, 2, before["turn_inputs"], "delta end and result apart: two versions")
	assert.Equal(t, 1, after["turn_inputs"], "delta end with the result: one version of the turn's row")
	assert.Equal(t, 2, before["sessions"], "message and events apart: two versions of the session row")
	assert.Equal(t, 1, after["sessions"], "the message with the events: one version of the session row")
	t.Logf("row versions per answer: before %v, after %v", before, after)
}

// TestBeginWritesTheTurnRowOnce: the begin's result rides in the update
// that numbers the first run of the turn's provider call (the attempt's
// read, or the append of a compacting attempt), so the begin writes one
// version of the turn's row, not two; the begin result and the run are
// stored as before. The begin result is held past the transaction's reads
// until the commit or the numbering takes it.
func TestBeginWritesTheTurnRowOnce(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	updates := countUpdates(t, st)
	paths := map[string]func(tx *store.Tx, sess store.Session, turnID string) (store.StreamRunNo, error){
		"attempt": func(tx *store.Tx, sess store.Session, turnID string) (store.StreamRunNo, error) {
			_, _, _, run, err := tx.AttemptStreaming(ctx, sess.ID, sess.ClientKeyID, turnID+"/i0/a0/resp", turnID, "i0/a0")
			return run, err
		},
		// A compacting attempt reads first and numbers its run with the
		// append: the begin result waits for it.
		"read, then append": func(tx *store.Tx, sess store.Session, turnID string) (store.StreamRunNo, error) {
			var one int
			if err := tx.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
				return store.StreamRunNo{}, err
			}
			run := &store.NumberRun{TurnID: turnID, Step: "i0/a0"}
			_, err := tx.AppendAndCommit(ctx, sess.ID, []store.NewEvent{{IdemKey: turnID + "/i0/a0/req", TurnID: turnID,
				Payload: events.ClientMessage{Role: "user", Content: json.RawMessage(`"x"`)}}}, store.Then{Run: run})
			return run.Got, err
		},
		"append": func(tx *store.Tx, sess store.Session, turnID string) (store.StreamRunNo, error) {
			run := &store.NumberRun{TurnID: turnID, Step: "i0/a0"}
			_, err := tx.AppendAndCommit(ctx, sess.ID, []store.NewEvent{{IdemKey: turnID + "/i0/a0/req", TurnID: turnID,
				Payload: events.ClientMessage{Role: "user", Content: json.RawMessage(`"x"`)}}}, store.Then{Run: run})
			return run.Got, err
		},
	}
	for name, number := range paths {
		do := func(merge bool) map[string]int {
			store.SetMergeBeginResult(merge)
			store.SetHoldBeginResult(merge)
			t.Cleanup(func() { store.SetMergeBeginResult(true); store.SetHoldBeginResult(true) })
			sess := namedSession(t, st, strings.ReplaceAll(name, " ", "")+map[bool]string{true: "-on", false: "-off"}[merge])
			turnID := "trn_" + sess.ID
			storeTurnInput(t, st, sess, turnID)
			updates()
			var run store.StreamRunNo
			require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
				if err := tx.SetBeginResult(turnID, map[string]string{"Outcome": "began"}); err != nil {
					return err
				}
				var err error
				run, err = number(tx, sess, turnID)
				return err
			}))
			got := updates()
			assert.Equal(t, int64(1), run.Run, "the run is numbered")
			ti, err := st.TurnInputByID(ctx, turnID)
			require.NoError(t, err)
			assert.JSONEq(t, `{"Outcome":"began"}`, string(ti.BeginResult), "the begin result is stored")
			return got
		}
		before := do(false)
		after := do(true)
		assert.Equal(t, 2, before["turn_inputs"], name+": begin result and run apart: two versions")
		assert.Equal(t, 1, after["turn_inputs"], name+": begin result with the run: one version of the turn's row")
		t.Logf("%s: row versions per begin: before %v, after %v", name, before, after)
	}
}

package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Then is what a transaction's last append stores after its events, in
// the same round trip (Tx.AppendAndCommit).
type Then struct {
	// Usage, when set, is recorded as Tx.RecordUsage does.
	Usage *UsageCall
	// TurnID's result, when Result is set, is stored as Tx.RecordTurnResult
	// stores Result(seq), seq the highest sequence among the appended
	// events (stored now or before under their keys).
	TurnID string
	Result func(lastSeq int64) any
	// DeltaEnd, when set, is recorded as Tx.RecordDeltaEnd does, after the
	// append: a second run storing the same response waits for the first's
	// commit on the append and keeps its end.
	DeltaEnd *DeltaEnd
	// Run, when set, numbers a new run of the turn's provider call with
	// the append, as Tx.AppendEventsNumberingRun does; Run.Got holds it
	// once committed.
	Run *NumberRun
}

// NumberRun names the run Then numbers (TurnID, Step) and receives it.
type NumberRun struct {
	TurnID, Step string
	Got          StreamRunNo
}

// AppendAndCommit appends evs as Tx.AppendEvents does, then what then
// names, and commits the transaction: the transaction's queued writes, the
// append and the COMMIT in one round trip. The checks Go makes between
// them on the other path are the server's here (bae_check): a session not
// open fails the transaction with *NotOpenError before the COMMIT, a
// write's wrong row count with ErrNotFound. The transaction's function
// must return right after it: nothing can be sent after the COMMIT.
//
// When the server cannot make a check (a queued write without a checked
// form, an event without an idempotency key, a result whose last sequence
// cannot be spliced in) it takes two round trips, as AppendEvents with the
// rest queued for the COMMIT; the rows written are the same either way.
func (t *Tx) AppendAndCommit(ctx context.Context, sessionID string, evs []NewEvent, then Then) ([]Event, error) {
	var tmpl *resultTemplate
	oneTrip := answerInOneTrip && t.db.canCommitWith() && len(evs) > 0
	for _, ev := range evs {
		oneTrip = oneTrip && ev.IdemKey != ""
	}
	if oneTrip && then.Result != nil {
		tmpl = newResultTemplate(then.Result)
		oneTrip = tmpl != nil
	}
	if !oneTrip {
		var out []Event
		var err error
		if r := then.Run; r != nil {
			out, r.Got, err = t.AppendEventsNumberingRun(ctx, sessionID, evs, r.TurnID, r.Step)
		} else {
			out, err = t.AppendEvents(ctx, sessionID, evs...)
		}
		if err != nil {
			return nil, err
		}
		if d := then.DeltaEnd; d != nil {
			t.RecordDeltaEnd(*d)
		}
		if then.Usage != nil {
			t.RecordUsage(*then.Usage)
		}
		if then.Result != nil {
			return out, t.RecordTurnResult(then.TurnID, then.Result(maxSeq(out)))
		}
		return out, nil
	}

	p, err := planAppend(sessionID, evs, false)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	// The transaction's queued message goes with the events: one update of
	// the session row moves both counters.
	if msg, ok := t.takeMessage(sessionID); ok {
		p.queueWithMessage(b, msg)
	} else {
		p.queue(b)
	}
	b.Queue(appendCheckNoticeSQL, sessionID, p.followsClose, p.keys, checkNoSession, checkNotOpen, EventsChannel, "/"+t.db.origin, p.idList)
	if r := then.Run; r != nil {
		t.queueStreamRun(b, r.TurnID, r.Step)
	}
	// The delta end of the turn whose result this stores rides in the
	// result's update: one row version of the turn's row instead of two.
	// Its own statement still follows, a no-op unless the result was
	// stored before (then it records the end as it always did).
	var endKey *string
	var endSeq int64
	if d := then.DeltaEnd; d != nil && tmpl != nil && d.TurnID == then.TurnID && mergeDeltaEnd {
		endKey, endSeq = &d.RespIdem, d.Seq
	}
	if tmpl != nil {
		b.Queue(recordTurnResultAtSQL, then.TurnID, tmpl.prefix, tmpl.suffix, TurnsChannel, sessionID, p.keys, maxNoticeResult, endKey, endSeq)
	}
	if d := then.DeltaEnd; d != nil {
		b.Queue(recordDeltaEndSQL, d.TurnID, d.RespIdem, d.Seq)
	}
	// The usage last, right before the COMMIT: the key's and the profile's
	// rows it locks are shared with other sessions' answers, which wait
	// for them until this transaction ends.
	if c := then.Usage; c != nil {
		b.Queue(recordUsageSQL, c.SessionID, c.IdemKey, c.ClientKeyID, c.Provider, c.Model, c.Input, c.Output, c.CacheRead, c.CacheWrite, c.CostNanoUSD)
	}
	var out, inserted []Event
	err = t.db.commitWith(ctx, sessionID, b, func(br pgx.BatchResults) error {
		var err error
		if out, inserted, err = p.read(br); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("append events: check append: %w", checkError(err))
		}
		if r := then.Run; r != nil {
			// No turn input: the run is not numbered (Run 0).
			if r.Got, err = scanStreamRun(br.QueryRow(), r.TurnID); errors.Is(err, pgx.ErrNoRows) {
				err = nil
			}
			if err != nil {
				return err
			}
		}
		if tmpl != nil {
			var stored bool
			if err := br.QueryRow().Scan(&stored); err != nil {
				return fmt.Errorf("record turn result: %w", err)
			}
		}
		if then.DeltaEnd != nil {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("record delta end: %w", err)
			}
		}
		if then.Usage != nil {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("record usage: %w", err)
			}
		}
		return nil
	})
	if t.db.committed && len(inserted) > 0 {
		t.db.record(sessionID, inserted)
	}
	if err != nil {
		return nil, err
	}
	t.s.noteSummaries(sessionID, evs)
	if tmpl != nil {
		r := tmpl.fill(maxSeq(out))
		if len(r) > maxNoticeResult {
			r = nil
		}
		t.results = append(t.results, recordedResult{turnID: then.TurnID, result: r})
	}
	return out, nil
}

// answerInOneTrip is off only in tests that compare with the two round
// trips' rows.
var answerInOneTrip = true

// takeMessage is trackedTx.takeMessage unless switched off in tests.
func (t *Tx) takeMessage(sessionID string) ([]any, bool) {
	if !mergeMessage {
		return nil, false
	}
	return t.db.takeMessage(sessionID)
}

// mergeMessage is off only in tests that count the session row's versions
// without the merge.
var mergeMessage = true

// mergeDeltaEnd is off only in tests that count the turn row's versions
// without the merge.
var mergeDeltaEnd = true

// appendCheckNoticeSQL fails the transaction, after appendSQL, where
// appendEvents fails it in Go: the session is missing ($4), or it is not
// open and not every event may follow its close nor was stored before
// under its key ($5, the message is the state). In the same statement it
// sends the append's EventsChannel notice ($6) when the append inserted
// events ($8, their ids): eventsNotice with the new head, $7 the origin.
// One statement, not two: a notice is only delivered at the COMMIT, which
// a failed check never reaches, so their order does not matter.
const appendCheckNoticeSQL = `SELECT CASE
		WHEN s.state IS NULL THEN bae_check(false, $4, 'session ' || $1 || ' not found')
		ELSE bae_check($2 OR s.state = 'open' OR NOT EXISTS (
			SELECT 1 FROM unnest($3::text[]) k(key)
			WHERE k.key = '' OR NOT EXISTS (SELECT 1 FROM session_events e WHERE e.session_id = $1 AND e.idem_key = k.key)), $5, s.state)
	END, (SELECT pg_notify($6, $1 || '/' || max(e.seq) || $7)
		FROM unnest($3::text[]) k(key)
		CROSS JOIN LATERAL (SELECT seq, id FROM session_events WHERE session_id = $1 AND idem_key = k.key OFFSET 0) e
		WHERE e.id = ANY($8::text[])
		HAVING count(*) > 0)
	FROM (SELECT (SELECT state FROM sessions WHERE id = $1) AS state) s`

// recordTurnResultAtSQL is recordTurnResultSQL with the result spliced
// together on the server: $2, the highest sequence of the events stored
// under the keys $6, then $3; the notice carries it when it is at most $7
// bytes (turnResultNotice). With $8 set it records the delta end $8 → $9
// in the same update, as recordDeltaEndSQL does.
const recordTurnResultAtSQL = `WITH r AS (
		SELECT $2 || (SELECT max(e.seq) FROM unnest($6::text[]) k(key)
			CROSS JOIN LATERAL (SELECT seq FROM session_events WHERE session_id = $5 AND idem_key = k.key OFFSET 0) e) || $3 AS result
	), upd AS (
		UPDATE turn_inputs SET result = (SELECT result FROM r)::json,
			delta_ends = CASE WHEN $8::text IS NULL THEN delta_ends
				ELSE jsonb_build_object($8::text, $9::bigint) || coalesce(delta_ends, '{}'::jsonb) END
		WHERE turn_id = $1 AND result IS NULL RETURNING 1
	), n AS (
		SELECT pg_notify($4, CASE WHEN NOT EXISTS (SELECT 1 FROM upd) THEN $1
			WHEN octet_length((SELECT result FROM r)) <= $7 THEN $1 || ' ' || (SELECT result FROM r)
			ELSE $1 END)
	)
	SELECT EXISTS (SELECT 1 FROM upd) FROM n`

// resultTemplate is a result's JSON around its last sequence.
type resultTemplate struct{ prefix, suffix string }

// resultSentinel stands for the last sequence while the template is cut.
const resultSentinel = int64(7340119572880613721)

// newResultTemplate cuts result's JSON at its last sequence; nil when that
// does not give exactly what json.Marshal gives (the sentinel is not there
// exactly once, or another sequence does not splice in byte for byte).
func newResultTemplate(result func(lastSeq int64) any) *resultTemplate {
	b, err := json.Marshal(result(resultSentinel))
	if err != nil {
		return nil
	}
	mark := []byte(strconv.FormatInt(resultSentinel, 10))
	i := bytes.Index(b, mark)
	if i < 0 || bytes.Count(b, mark) != 1 {
		return nil
	}
	t := &resultTemplate{prefix: string(b[:i]), suffix: string(b[i+len(mark):])}
	if check, err := json.Marshal(result(1)); err != nil || !bytes.Equal(check, t.fill(1)) {
		return nil
	}
	return t
}

func (t *resultTemplate) fill(seq int64) []byte {
	return []byte(t.prefix + strconv.FormatInt(seq, 10) + t.suffix)
}

// maxSeq is the highest sequence among evs.
func maxSeq(evs []Event) int64 {
	var last int64
	for _, e := range evs {
		last = max(last, e.Seq)
	}
	return last
}

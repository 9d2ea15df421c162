package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/ids"
)

// A fork shares its source's history instead of copying it. Every read of
// a session's events or conversation goes through the chain of sessions it
// was forked from: the session itself (everything), its source up to the
// fork point, that source's own source up to the earlier of the two fork
// points, and so on. Sequences never collide along a chain because a fork's
// counters start at its fork point.

// ancestorsCTE lists the sources of the session named by param, nearest
// first, each with the highest sequence it contributes; col names the fork
// point's column (forked_event_seq or forked_message_seq). A session that
// is not a fork has none, so its reads cost what they did before forks.
func ancestorsCTE(param, col string) string {
	return `chain(id, upto) AS (
		SELECT s.forked_from, s.` + col + ` FROM sessions s WHERE s.id = ` + param + ` AND s.forked_from IS NOT NULL
		UNION ALL
		SELECT s.forked_from, least(c.upto, s.` + col + `)
		FROM chain c JOIN sessions s ON s.id = c.id WHERE s.forked_from IS NOT NULL)`
}

// eventLog is a FROM item (the caller names it): the session's events along
// its chain, an inherited event keeping its source's session_id and id.
// cond (on columns of e, "true" for none) and tail (such as "ORDER BY
// e.seq LIMIT $3", or "") apply inside each part, so the session's own
// events are read by index, and a page stops early, as before forks; the
// sources' are read link by link. The caller orders (and limits) the
// whole again.
func eventLog(param, cond, tail string) string {
	return `((SELECT e.* FROM session_events e WHERE e.session_id = ` + param + ` AND ` + cond + ` ` + tail + `)
		UNION ALL
		(WITH RECURSIVE ` + ancestorsCTE(param, "forked_event_seq") + `
		SELECT e.* FROM chain c CROSS JOIN LATERAL (
			SELECT * FROM session_events e WHERE e.session_id = c.id AND e.seq <= c.upto AND ` + cond + ` ` + tail + ` OFFSET 0) e))`
}

// conversationRows is a FROM item (the caller names it): the session's
// message rows along its chain. An inherited row taken out of its source's
// conversation after the fork point is still in the fork's: dropped_seq is
// as of the fork point. cond is on the stored columns of m (never on
// dropped_seq), applied inside each part as in eventLog.
func conversationRows(param, cond string) string {
	return `(SELECT m.session_id, m.seq, m.idem_key, m.role, m.content, m.created_at, m.dropped_seq
		FROM session_messages m WHERE m.session_id = ` + param + ` AND ` + cond + `
		UNION ALL
		(WITH RECURSIVE ` + ancestorsCTE(param, "forked_message_seq") + `
		SELECT m.session_id, m.seq, m.idem_key, m.role, m.content, m.created_at,
			CASE WHEN m.dropped_seq <= c.upto THEN m.dropped_seq END
		FROM chain c CROSS JOIN LATERAL (
			SELECT * FROM session_messages m WHERE m.session_id = c.id AND m.seq <= c.upto AND ` + cond + ` OFFSET 0) m))`
}

// ForkPoint is where a fork starts in its source.
type ForkPoint struct {
	// SourceID is the session forked.
	SourceID string
	// EventSeq is the last inherited event; MessageSeq the source's
	// message counter there.
	EventSeq   int64
	MessageSeq int64
	// Moved: the event asked for was inside a turn, and the fork starts
	// before that turn instead.
	Moved bool
	// rewoundAfter: the source was rewound after the fork point, so its
	// current compaction state may not be the one at the fork point.
	rewoundAfter bool
}

// ErrForkPoint: the event asked for is not in the source's log.
var ErrForkPoint = errors.New("no such event in the session")

// resolveForkPoint finds the fork point for event seq at (0: the latest).
// A turn that is still running at that event, or that has events after it,
// is not inherited at all: the fork starts before the turn's first event,
// so it never holds half a turn (a tool_use without its result, a user
// message without its answer).
func resolveForkPoint(ctx context.Context, q dbtx, sourceID string, at int64) (ForkPoint, error) {
	fp := ForkPoint{SourceID: sourceID}
	var head, counter int64
	if err := q.QueryRow(ctx, `SELECT last_event_seq, last_message_seq FROM sessions WHERE id = $1 FOR SHARE`, sourceID).Scan(&head, &counter); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fp, fmt.Errorf("fork: session %s: %w", sourceID, ErrNotFound)
		}
		return fp, fmt.Errorf("fork: read source: %w", err)
	}
	if at == 0 {
		at = head
	}
	if at < 0 || at > head {
		return fp, ErrForkPoint
	}
	// The turns open at the event: begun at or before it, and with events
	// after it or no recorded result yet. Only the turns with events after
	// it or without a result are looked at, so forking an idle session at
	// its latest event reads a few rows however long it is.
	var cut *int64
	var later bool
	err := q.QueryRow(ctx, `WITH cand AS (
			SELECT e.turn_id FROM `+eventLog("$1", "e.seq > $2 AND e.turn_id IS NOT NULL", "")+` e
			UNION SELECT turn_id FROM turn_inputs WHERE session_id = $1 AND result IS NULL)
		SELECT (SELECT min(e.seq) - 1 FROM `+eventLog("$1", "e.turn_id IN (SELECT turn_id FROM cand) AND e.seq <= $2", "")+` e),
			EXISTS (SELECT 1 FROM cand)`, sourceID, at).Scan(&cut, &later)
	if err != nil {
		return fp, fmt.Errorf("fork: find open turns: %w", err)
	}
	fp.EventSeq = at
	if cut != nil {
		fp.EventSeq, fp.Moved = *cut, true
	}
	fp.MessageSeq = counter
	// A rewind after the fork point took its turns out after it: the fork
	// sees the conversation as it was before that removal.
	var rewound *int64
	err = q.QueryRow(ctx, `SELECT min(nullif((payload->>'message_seq')::bigint, 0)) - 1, count(*) > 0 FROM `+eventLog("$1", "e.event_type = $3 AND e.seq > $2", "")+` e`,
		sourceID, fp.EventSeq, string(events.SessionRewind)).Scan(&rewound, &fp.rewoundAfter)
	if err != nil {
		return fp, fmt.Errorf("fork: find later rewinds: %w", err)
	}
	if rewound != nil {
		fp.MessageSeq = *rewound
	}
	if !later {
		return fp, nil // every turn is inherited: the counter is the source's
	}
	// The message counter there: every counter value taken before the
	// first message of a turn that is not inherited (a removal of an
	// earlier failed turn made as the next turn began belongs before it).
	var first *int64
	err = q.QueryRow(ctx, `SELECT min(m.seq) FROM `+conversationRows("$1", "true")+` m
		WHERE split_part(m.idem_key, '/', 1) IN (
			SELECT turn_id FROM `+eventLog("$1", "e.turn_id IS NOT NULL", "")+` e GROUP BY turn_id HAVING min(seq) > $2)`,
		sourceID, fp.EventSeq).Scan(&first)
	if err != nil {
		return fp, fmt.Errorf("fork: find message counter: %w", err)
	}
	if first != nil {
		fp.MessageSeq = min(fp.MessageSeq, *first-1)
	}
	return fp, nil
}

// ForkSession creates a session on the source's profile whose history is
// the source's up to event at (0: the latest; see resolveForkPoint), with
// the forking client's own declarations and session key, and appends its
// session.open. It writes a constant number of rows whatever the source's
// length: the session, its client, its key, its context and its open
// event. The source may be closed. Caps apply as at open.
func (s *Store) ForkSession(ctx context.Context, sourceID string, at int64, decl ClientDecl, openPayload events.Declarations, caps Caps) (Session, ForkPoint, string, error) {
	secret := ids.NewSecret(ids.SessionKeyPrefix)
	hash, err := hashSessionKey(secret)
	if err != nil {
		return Session{}, ForkPoint{}, "", err
	}
	var sess Session
	var fp ForkPoint
	var key Key
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if err := lockClientKey(ctx, tx, decl.ClientKeyID); err != nil {
			return err
		}
		var profileID string
		if err := tx.QueryRow(ctx, `SELECT profile_id FROM sessions WHERE id = $1`, sourceID).Scan(&profileID); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("fork: session %s: %w", sourceID, ErrNotFound)
			}
			return fmt.Errorf("fork: read source: %w", err)
		}
		if err := checkSessionCaps(ctx, tx, caps, decl.ClientKeyID, profileID, "", true); err != nil {
			return err
		}
		var err error
		if fp, err = resolveForkPoint(ctx, tx, sourceID, at); err != nil {
			return err
		}
		sess, err = scanSession(tx.QueryRow(ctx, `INSERT INTO sessions (id, profile_id, client_key_id, state, client_version,
				mcp_tools, forked_from, forked_event_seq, forked_message_seq, last_event_seq, last_message_seq)
			SELECT $1, profile_id, $2, $3, $4, mcp_tools, id, $5, $6, $5, $6 FROM sessions WHERE id = $7
			RETURNING `+sessionCols, ids.New(ids.SessionPrefix), decl.ClientKeyID, StateOpen, decl.ClientVersion, fp.EventSeq, fp.MessageSeq, sourceID))
		if err != nil {
			return fmt.Errorf("fork: insert session: %w", err)
		}
		if err := copyForkContext(ctx, tx, sess.ID, fp); err != nil {
			return err
		}
		if err := upsertClient(ctx, tx, sess.ID, decl); err != nil {
			return err
		}
		if key, err = insertKeyHash(ctx, tx, RoleSession, sess.ID, hash, ids.DisplayPrefix(secret, ids.SessionKeyPrefix), profileID, sess.ID, decl.ClientKeyID); err != nil {
			return err
		}
		_, err = appendEvents(ctx, tx, sess.ID, []NewEvent{{ClientKeyID: decl.ClientKeyID, Payload: openPayload}})
		return err
	})
	if err != nil {
		return Session{}, ForkPoint{}, "", err
	}
	s.remember(secret, key)
	return sess, fp, secret, nil
}

// copyForkContext gives the fork the source's compaction state as of the
// fork point: the source's current state when nothing was compacted past
// that point, else the state its session.compaction events up to the fork
// point left (the summary of the last summary layer, the cleared boundary
// of the furthest layer). A source never compacted has no state to give.
func copyForkContext(ctx context.Context, tx dbtx, forkID string, fp ForkPoint) error {
	if fp.rewoundAfter {
		return deriveContext(ctx, tx, forkID, fp.SourceID, fp.EventSeq)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO session_context (session_id, through_seq, cleared_seq, summary, summary_id, bytes_per_token)
		SELECT $1, through_seq, cleared_seq, summary, summary_id, bytes_per_token FROM session_context
		WHERE session_id = $2 AND through_seq <= $3 AND cleared_seq <= $3`, forkID, fp.SourceID, fp.MessageSeq)
	if err != nil {
		return fmt.Errorf("fork: copy context: %w", err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	return deriveContext(ctx, tx, forkID, fp.SourceID, fp.EventSeq)
}

// deriveContext sets targetID's compaction state to the one the
// session.compaction events of logID's log up to event seq at left (the
// summary of the last summary layer, the cleared boundary of the furthest
// layer): a fork's at its fork point, a rewound session's at its rewind
// point. A log never compacted has no state to give.
func deriveContext(ctx context.Context, tx dbtx, targetID, logID string, at int64) error {
	// A turn rewound before that point compacted nothing anyone sees.
	_, err := tx.Exec(ctx, `WITH rewound AS (
			SELECT json_array_elements_text(payload->'turn_ids') AS turn_id
			FROM `+eventLog("$2", "e.event_type = $6", "")+` r WHERE seq <= $3
		), comp AS (
			SELECT seq, payload FROM `+eventLog("$2", "e.event_type = $4", "")+` e
			WHERE seq <= $3 AND (turn_id IS NULL OR turn_id NOT IN (SELECT turn_id FROM rewound))
		)
		INSERT INTO session_context (session_id, through_seq, cleared_seq, summary, summary_id, bytes_per_token)
		SELECT $1, coalesce(sm.through, 0), greatest(coalesce(cl.cleared, 0), coalesce(sm.through, 0)),
			coalesce(sm.summary, ''), coalesce(sm.id, ''), coalesce((SELECT bytes_per_token FROM session_context WHERE session_id = $2), 0)
		FROM (SELECT 1 FROM session_context WHERE session_id = $2) one
		LEFT JOIN LATERAL (SELECT (payload->'messages'->>'through_seq')::bigint AS through, payload->>'summary' AS summary,
				payload->>'compaction_id' AS id
			FROM comp WHERE payload->>'layer' = $5 ORDER BY seq DESC LIMIT 1) sm ON true
		LEFT JOIN LATERAL (SELECT max((payload->'messages'->>'through_seq')::bigint) AS cleared FROM comp) cl ON true
		ON CONFLICT (session_id) DO UPDATE SET through_seq = excluded.through_seq, cleared_seq = excluded.cleared_seq,
			summary = excluded.summary, summary_id = excluded.summary_id`,
		targetID, logID, at, string(events.SessionCompaction), events.LayerSummary, string(events.SessionRewind))
	if err != nil {
		return fmt.Errorf("derive context: %w", err)
	}
	return nil
}

// Lineage is a session's place among forks.
type Lineage struct {
	SessionID string `json:"session_id"`
	// ForkedFrom is the source and the fork point (nil: not a fork).
	ForkedFrom *ForkRef `json:"forked_from"`
	// Forks are the sessions forked from this one, oldest first.
	Forks []ForkRef `json:"forks"`
}

// ForkRef names one side of a fork and the last inherited event.
type ForkRef struct {
	SessionID string `json:"session_id"`
	EventSeq  int64  `json:"event_seq"`
}

// Lineage reads where a session was forked from and what was forked from
// it.
func (s *Store) Lineage(ctx context.Context, sessionID string) (Lineage, error) {
	l := Lineage{SessionID: sessionID, Forks: []ForkRef{}}
	var from *string
	var at *int64
	err := s.Pool.QueryRow(ctx, `SELECT forked_from, forked_event_seq FROM sessions WHERE id = $1`, sessionID).Scan(&from, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, ErrNotFound
	}
	if err != nil {
		return l, fmt.Errorf("read lineage: %w", err)
	}
	if from != nil {
		l.ForkedFrom = &ForkRef{SessionID: *from, EventSeq: *at}
	}
	rows, err := s.Pool.Query(ctx, `SELECT id, forked_event_seq FROM sessions WHERE forked_from = $1 ORDER BY seq`, sessionID)
	if err != nil {
		return l, fmt.Errorf("read lineage: %w", err)
	}
	forks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ForkRef, error) {
		var f ForkRef
		err := r.Scan(&f.SessionID, &f.EventSeq)
		return f, err
	})
	if err != nil {
		return l, fmt.Errorf("read lineage: %w", err)
	}
	l.Forks = append(l.Forks, forks...)
	return l, nil
}

// markInherited marks the events read for sessionID that came from
// another session of its chain.
func markInherited(sessionID string, evs []Event) {
	for i := range evs {
		evs[i].Inherited = evs[i].SessionID != sessionID
	}
}

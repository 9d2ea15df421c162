package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/events"
)

// A rewind takes a session's turns after a point out of the conversation
// the model sees and keeps them in the log. It writes what a failed turn's
// removal writes (RepairConversation): the removal takes the next message
// counter value and marks the turns' messages with it, so every earlier
// view (a provider.request's conversation, a fork taken before it) still
// names them. The session.rewind event that records it is appended in the
// same transaction: a rewind happened once, or not at all.

// Rewind refusals.
var (
	// ErrRewindPoint: the turn or event named is not in the session's log
	// (a queued turn has not begun: nothing of it is there yet).
	ErrRewindPoint = errors.New("no such turn or event in the session")
	// ErrRewindBeforeFork: the point is in what a fork inherited, which is
	// its source's to keep; fork the source at that point instead.
	ErrRewindBeforeFork = errors.New("the point is before the session was forked")
	// ErrNothingToRewind: no turn after the point is still in the
	// conversation.
	ErrNothingToRewind = errors.New("no turn after the point is left to rewind")
)

// RewindRequest says what to rewind: to before turn TurnID, or else to
// before the event with seq BeforeSeq (moved to the start of that event's
// turn when it is inside one).
type RewindRequest struct {
	RewindID    string
	TurnID      string
	BeforeSeq   int64
	ClientKeyID string // the event's client key ("" for an operator)
	By          string
	Interrupted string // the turn the rewind interrupted first
}

// Rewind rewinds the session as req says and returns the session.rewind
// payload stored. It is idempotent by req.RewindID: a retried rewind
// returns the payload stored the first time. The caller has made sure no
// turn runs (the session workflow holds its gate). eventID is the
// session.rewind event's.
func (s *Store) Rewind(ctx context.Context, sessionID string, req RewindRequest) (out events.RewindPayload, eventID string, err error) {
	idem := "rewind/" + req.RewindID
	err = s.Tx(ctx, func(t *Tx) error {
		tx := t.db
		var state string
		var forkedAt int64
		if err := tx.QueryRow(ctx, `SELECT state, coalesce(forked_event_seq, 0) FROM sessions WHERE id = $1 FOR UPDATE`, sessionID).Scan(&state, &forkedAt); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("rewind: session %s: %w", sessionID, ErrNotFound)
			}
			return fmt.Errorf("rewind: lock session: %w", err)
		}
		var prior []byte
		err := tx.QueryRow(ctx, `SELECT id, payload FROM session_events WHERE session_id = $1 AND idem_key = $2`, sessionID, idem).Scan(&eventID, &prior)
		if err == nil {
			if err := json.Unmarshal(prior, &out); err != nil {
				return fmt.Errorf("rewind: decode stored event: %w", err)
			}
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("rewind: find stored event: %w", err)
		}
		if state != StateOpen {
			return &NotOpenError{State: state}
		}
		point, err := rewindPoint(ctx, tx, sessionID, req, forkedAt)
		if err != nil {
			return err
		}
		turns, err := rewindableTurns(ctx, tx, sessionID, point)
		if err != nil {
			return err
		}
		if len(turns) == 0 {
			return ErrNothingToRewind
		}
		out = events.RewindPayload{RewindID: req.RewindID, ToEventSeq: point, TurnIDs: turns, By: req.By, InterruptedTurnID: req.Interrupted}
		if out.ToolCalls, err = rewoundToolCalls(ctx, tx, sessionID, turns); err != nil {
			return err
		}
		if out.MessageSeq, err = dropTurns(ctx, tx, sessionID, turns); err != nil {
			return err
		}
		var compacted bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM session_events WHERE session_id = $1 AND seq > $2
			AND event_type = $3 AND turn_id = ANY($4))`, sessionID, point, string(events.SessionCompaction), turns).Scan(&compacted); err != nil {
			return fmt.Errorf("rewind: find compactions: %w", err)
		}
		if compacted {
			// A rewound turn compacted the view: it goes back to what the
			// compactions before the point left, as a fork there gets.
			if err := deriveContext(ctx, tx, sessionID, sessionID, point); err != nil {
				return err
			}
			out.ContextRestored = true
		}
		evs, err := t.AppendEvents(ctx, sessionID, NewEvent{IdemKey: idem, ClientKeyID: req.ClientKeyID, Payload: out})
		if err == nil && len(evs) > 0 {
			eventID = evs[0].ID
		}
		return err
	})
	return out, eventID, err
}

// CheckRewind is Rewind's refusals without the rewind: nil when, as the
// log stands, req would rewind at least one turn. A rewind interrupts the
// running turn before it reads the log, so a request it would refuse is
// refused here first, leaving a running turn alone. Rewind still decides.
func (s *Store) CheckRewind(ctx context.Context, sessionID string, req RewindRequest) error {
	var state string
	var forkedAt int64
	if err := s.Pool.QueryRow(ctx, `SELECT state, coalesce(forked_event_seq, 0) FROM sessions WHERE id = $1`, sessionID).Scan(&state, &forkedAt); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("rewind: session %s: %w", sessionID, ErrNotFound)
		}
		return fmt.Errorf("rewind: read session: %w", err)
	}
	if state != StateOpen {
		return &NotOpenError{State: state}
	}
	point, err := rewindPoint(ctx, s.Pool, sessionID, req, forkedAt)
	if err != nil {
		return err
	}
	turns, err := rewindableTurns(ctx, s.Pool, sessionID, point)
	if err != nil {
		return err
	}
	if len(turns) == 0 {
		return ErrNothingToRewind
	}
	return nil
}

// rewindPoint is the last event kept: the one before the first event of
// the turn named, or of the turn holding the event named, or before the
// event named when it is in no turn.
func rewindPoint(ctx context.Context, tx dbtx, sessionID string, req RewindRequest, forkedAt int64) (int64, error) {
	turnID := req.TurnID
	if turnID == "" {
		var tid *string
		var seq int64
		err := tx.QueryRow(ctx, `SELECT seq, turn_id FROM `+eventLog("$1", "e.seq = $2", "")+` e`, sessionID, req.BeforeSeq).Scan(&seq, &tid)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, ErrRewindPoint
		}
		if err != nil {
			return 0, fmt.Errorf("rewind: find event: %w", err)
		}
		if tid == nil {
			if seq <= forkedAt {
				return 0, ErrRewindBeforeFork
			}
			return seq - 1, nil
		}
		turnID = *tid
	}
	var first *int64
	if err := tx.QueryRow(ctx, `SELECT min(seq) FROM `+eventLog("$1", "e.turn_id = $2", "")+` e`, sessionID, turnID).Scan(&first); err != nil {
		return 0, fmt.Errorf("rewind: find turn: %w", err)
	}
	if first == nil {
		return 0, ErrRewindPoint
	}
	if *first <= forkedAt {
		return 0, ErrRewindBeforeFork
	}
	return *first - 1, nil
}

// rewindableTurns are the session's own turns with events after point that
// no earlier rewind took out, oldest first.
func rewindableTurns(ctx context.Context, tx dbtx, sessionID string, point int64) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT turn_id FROM session_events
		WHERE session_id = $1 AND seq > $2 AND turn_id IS NOT NULL
		AND turn_id NOT IN (SELECT json_array_elements_text(payload->'turn_ids') FROM session_events
			WHERE session_id = $1 AND event_type = $3)
		GROUP BY turn_id ORDER BY min(seq)`, sessionID, point, string(events.SessionRewind))
	if err != nil {
		return nil, fmt.Errorf("rewind: find turns: %w", err)
	}
	turns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("rewind: find turns: %w", err)
	}
	return turns, nil
}

// rewoundToolCalls are the tool calls the turns made, in log order.
func rewoundToolCalls(ctx context.Context, tx dbtx, sessionID string, turns []string) ([]events.RewoundToolCall, error) {
	rows, err := tx.Query(ctx, `SELECT turn_id, coalesce(payload->>'id', ''), coalesce(payload->>'name', ''),
			coalesce(payload->>'dispatch', ''), payload->>'server_name'
		FROM session_events WHERE session_id = $1 AND event_type = $2 AND turn_id = ANY($3) ORDER BY seq`,
		sessionID, string(events.ToolCall), turns)
	if err != nil {
		return nil, fmt.Errorf("rewind: find tool calls: %w", err)
	}
	calls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (events.RewoundToolCall, error) {
		var c events.RewoundToolCall
		var dispatch string
		err := r.Scan(&c.TurnID, &c.ToolUseID, &c.Name, &dispatch, &c.ServerName)
		c.Dispatch = events.Dispatch(dispatch)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("rewind: find tool calls: %w", err)
	}
	if calls == nil {
		calls = []events.RewoundToolCall{}
	}
	return calls, nil
}

// dropTurns takes the turns' messages out of the conversation under one
// new counter value, which it returns (0 when none was in it).
func dropTurns(ctx context.Context, tx dbtx, sessionID string, turns []string) (int64, error) {
	var at *int64
	err := tx.QueryRow(ctx, `WITH hit AS (
			SELECT seq FROM session_messages
			WHERE session_id = $1 AND split_part(idem_key, '/', 1) = ANY($2) AND dropped_seq IS NULL FOR UPDATE
		), d AS (
			UPDATE sessions SET last_message_seq = last_message_seq + 1 WHERE id = $1 AND EXISTS (SELECT 1 FROM hit) RETURNING last_message_seq
		), upd AS (
			UPDATE session_messages m SET dropped_seq = d.last_message_seq FROM d WHERE m.session_id = $1 AND m.seq IN (SELECT seq FROM hit) RETURNING 1
		)
		SELECT (SELECT last_message_seq FROM d) FROM (SELECT count(*) FROM upd) n`, sessionID, turns).Scan(&at)
	if err != nil {
		return 0, fmt.Errorf("rewind: take turns out of the conversation: %w", err)
	}
	if at == nil {
		return 0, nil
	}
	return *at, nil
}

package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/bae-go/bae-go/events"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bae-go/bae-go/internal/ids"
)

// EventsChannel is the LISTEN/NOTIFY channel that announces appended events;
// the payload is the session id.
const EventsChannel = "bae_events"

// dbtx is what both a pool and a transaction offer.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// NewEvent is an event to append.
type NewEvent struct {
	// IdemKey, when set, makes the append a no-op if an event with the same
	// key already exists in the session (a retried activity).
	IdemKey     string
	TurnID      string
	ClientKeyID string
	// Payload names the event's type (see package events).
	Payload events.Payload
}

// Type is the event type its payload names.
func (e NewEvent) Type() events.Type { return e.Payload.EventType() }

// Event is a stored event.
type Event struct {
	Seq         int64
	ID          string
	SessionID   string
	ClientKeyID string
	TurnID      string
	IdemKey     string
	Type        events.Type
	Payload     json.RawMessage
	CreatedAt   time.Time
}

// TimeFormat is the wire format of every timestamp: UTC, milliseconds, Z.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// FormatTime renders t in TimeFormat.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// MarshalJSON renders the documented EventView shape.
func (e Event) MarshalJSON() ([]byte, error) {
	var ck any
	if e.ClientKeyID != "" {
		ck = e.ClientKeyID
	}
	payload := e.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("{}")
	}
	return json.Marshal(struct {
		ID          string          `json:"id"`
		SessionID   string          `json:"session_id"`
		ClientKeyID any             `json:"client_key_id"`
		EventType   events.Type     `json:"event_type"`
		Payload     json.RawMessage `json:"payload"`
		CreatedAt   string          `json:"created_at"`
	}{e.ID, e.SessionID, ck, e.Type, payload, FormatTime(e.CreatedAt)})
}

const eventCols = `seq, id, session_id, coalesce(client_key_id, ''), coalesce(turn_id, ''), coalesce(idem_key, ''), event_type, payload, created_at`

func scanEvent(row pgx.Row) (Event, error) {
	var e Event
	var payload []byte
	err := row.Scan(&e.Seq, &e.ID, &e.SessionID, &e.ClientKeyID, &e.TurnID, &e.IdemKey, &e.Type, &payload, &e.CreatedAt)
	e.Payload = payload
	return e, err
}

func marshalPayload(p events.Payload) ([]byte, error) {
	return json.Marshal(p)
}

// AppendEvents appends events to one session atomically and in order.
func (s *Store) AppendEvents(ctx context.Context, sessionID string, evs ...NewEvent) ([]Event, error) {
	var out []Event
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var err error
		out, err = appendEvents(ctx, tx, sessionID, evs)
		return err
	})
	return out, err
}

// AppendEventsTx appends within a caller's transaction.
func AppendEventsTx(ctx context.Context, tx pgx.Tx, sessionID string, evs ...NewEvent) ([]Event, error) {
	return appendEvents(ctx, tx, sessionID, evs)
}

// appendEvents allocates per-session sequence numbers under the session row
// lock, so commit order equals seq order for each session and a reader that
// tails "seq > last" can never skip an event committed late. Events whose
// idempotency key already exists are returned as stored, not re-inserted, so
// the sequence has no gaps and no duplicates.
func appendEvents(ctx context.Context, tx dbtx, sessionID string, evs []NewEvent) ([]Event, error) {
	var last int64
	if err := tx.QueryRow(ctx, `SELECT last_event_seq FROM sessions WHERE id = $1 FOR UPDATE`, sessionID).Scan(&last); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("append events: session %s: %w", sessionID, ErrNotFound)
		}
		return nil, fmt.Errorf("append events: lock session: %w", err)
	}
	out := make([]Event, 0, len(evs))
	inserted := 0
	for _, ev := range evs {
		if ev.IdemKey != "" {
			existing, err := scanEvent(tx.QueryRow(ctx, `SELECT `+eventCols+` FROM session_events WHERE session_id = $1 AND idem_key = $2`, sessionID, ev.IdemKey))
			if err == nil {
				out = append(out, existing)
				continue
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return nil, fmt.Errorf("append events: check idempotency key: %w", err)
			}
		}
		payload, err := marshalPayload(ev.Payload)
		if err != nil {
			return nil, fmt.Errorf("append events: marshal %s payload: %w", ev.Type(), err)
		}
		last++
		e, err := scanEvent(tx.QueryRow(ctx, `INSERT INTO session_events (session_id, seq, id, idem_key, turn_id, client_key_id, event_type, payload)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+eventCols,
			sessionID, last, ids.New(ids.EventPrefix), nullable(ev.IdemKey), nullable(ev.TurnID), nullable(ev.ClientKeyID), string(ev.Type()), string(payload)))
		if err != nil {
			return nil, fmt.Errorf("append events: insert %s: %w", ev.Type(), err)
		}
		out = append(out, e)
		inserted++
	}
	if inserted > 0 {
		if _, err := tx.Exec(ctx, `UPDATE sessions SET last_event_seq = $2 WHERE id = $1`, sessionID, last); err != nil {
			return nil, fmt.Errorf("append events: advance sequence: %w", err)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, EventsChannel, sessionID); err != nil {
			return nil, fmt.Errorf("append events: notify: %w", err)
		}
	}
	return out, nil
}

// EventsAfter returns up to limit events with seq > after, oldest first.
func (s *Store) EventsAfter(ctx context.Context, sessionID string, after int64, limit int) ([]Event, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+eventCols+` FROM session_events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, sessionID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) { return scanEvent(r) })
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return list, nil
}

// ListEvents pages a session's events.
func (s *Store) ListEvents(ctx context.Context, sessionID string, after int64, limit int) (Page[Event], error) {
	list, err := s.EventsAfter(ctx, sessionID, after, limit+1)
	if err != nil {
		return Page[Event]{}, err
	}
	return pageOf(list, limit, func(e Event) int64 { return e.Seq }), nil
}

// TurnEvents returns every event tagged with turnID, in order.
func (s *Store) TurnEvents(ctx context.Context, sessionID, turnID string) ([]Event, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+eventCols+` FROM session_events WHERE session_id = $1 AND turn_id = $2 ORDER BY seq`, sessionID, turnID)
	if err != nil {
		return nil, fmt.Errorf("read turn events: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) { return scanEvent(r) })
}

// FirstTurnEventSeq is the seq of the turn's first event, or 0 when the turn
// has not started yet.
func (s *Store) FirstTurnEventSeq(ctx context.Context, sessionID, turnID string) (int64, error) {
	var seq *int64
	err := s.Pool.QueryRow(ctx, `SELECT min(seq) FROM session_events WHERE session_id = $1 AND turn_id = $2`, sessionID, turnID).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("find turn start: %w", err)
	}
	if seq == nil {
		return 0, nil
	}
	return *seq, nil
}

// SeqOfEvent resolves an event id within a session.
func (s *Store) SeqOfEvent(ctx context.Context, sessionID, eventID string) (int64, error) {
	var seq int64
	err := s.Pool.QueryRow(ctx, `SELECT seq FROM session_events WHERE session_id = $1 AND id = $2`, sessionID, eventID).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("resolve event id: %w", err)
	}
	return seq, nil
}

// LastEventSeq is the session's current head.
func (s *Store) LastEventSeq(ctx context.Context, sessionID string) (int64, error) {
	var seq int64
	if err := s.Pool.QueryRow(ctx, `SELECT last_event_seq FROM sessions WHERE id = $1`, sessionID).Scan(&seq); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, ErrNotFound
		}
		return 0, fmt.Errorf("read head: %w", err)
	}
	return seq, nil
}

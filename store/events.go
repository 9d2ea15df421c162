package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/lib/ids"
)

// EventsChannel is the LISTEN/NOTIFY channel that announces appended events;
// the payload is the session id.
const EventsChannel = "bae_events"

// dbtx is what both a pool and a transaction offer.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
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
	// MessagesAt, when set, stores the payload's "messages" by reference:
	// the conversation as of this message counter (Store.Conversation),
	// materialized whenever the event is read. Payload must leave
	// "messages" out.
	MessagesAt *int64
	// View, with MessagesAt, stores a compacted request's "messages": the
	// view of that conversation compaction.Render made with View. Only
	// what it adds is stored (the message the summary stands for last,
	// the cleared boundary and the summary's compaction id, whose text
	// session_summaries keeps); readers render the view again. A view with
	// a summary must name it (SummaryID).
	View *compaction.State
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
	// Inherited: read for a fork, the event is its source's (SessionID
	// and ID are the source's); rendered as "inherited": true.
	Inherited bool
	// byRef: Payload is stored without its "messages", which are the
	// conversation as of messagesAt (see Store.materialize).
	byRef      bool
	messagesAt int64
	// view: a compacted request, stored as what its view adds to the
	// conversation (Summary is filled in when the event is materialized).
	view *compaction.State
}

// TimeFormat is the wire format of every timestamp: UTC, milliseconds, Z.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// FormatTime renders t in TimeFormat.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// MarshalJSON renders the documented EventView shape.
func (e Event) MarshalJSON() ([]byte, error) {
	return e.AppendJSON(nil), nil
}

// AppendJSON appends the EventView JSON of e to dst. The payload is copied
// as stored, never decoded and encoded again: a stream of long sessions'
// provider.request events is mostly their conversation, and this is what
// keeps writing it a copy.
func (e Event) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, e.ID)
	dst = append(dst, `,"session_id":`...)
	dst = appendString(dst, e.SessionID)
	dst = append(dst, `,"client_key_id":`...)
	if e.ClientKeyID == "" {
		dst = append(dst, "null"...)
	} else {
		dst = appendString(dst, e.ClientKeyID)
	}
	dst = append(dst, `,"event_type":`...)
	dst = appendString(dst, string(e.Type))
	dst = append(dst, `,"payload":`...)
	if p := bytes.TrimSpace(e.Payload); len(p) == 0 {
		dst = append(dst, "{}"...)
	} else {
		dst = append(dst, p...)
	}
	dst = append(dst, `,"created_at":"`...)
	dst = e.CreatedAt.UTC().AppendFormat(dst, TimeFormat)
	if e.Inherited {
		return append(dst, `","inherited":true}`...)
	}
	return append(dst, `"}`...)
}

// appendString appends s as a JSON string: ids and event types are plain
// ASCII, anything else goes through encoding/json.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

const eventCols = `seq, id, session_id, coalesce(client_key_id, ''), coalesce(turn_id, ''), coalesce(idem_key, ''), event_type, payload, created_at, messages_upto,
	view_through, view_cleared, view_summary`

func scanEvent(row pgx.Row) (Event, error) { return scanEventAnd(row) }

// scanEventAnd scans eventCols followed by extra columns.
func scanEventAnd(row pgx.Row, extra ...any) (Event, error) {
	var e Event
	var r refCols
	err := row.Scan(append([]any{&e.Seq, &e.ID, &e.SessionID, &e.ClientKeyID, &e.TurnID, &e.IdemKey, &e.Type, &r.payload, &e.CreatedAt,
		&r.at, &r.through, &r.cleared, &r.summary}, extra...)...)
	r.fill(&e)
	return e, err
}

// refCols are the stored columns that say how a payload is kept.
type refCols struct {
	payload              []byte
	at, through, cleared *int64
	summary              *string
}

func (r refCols) fill(e *Event) {
	e.Payload = r.payload
	if r.at == nil {
		return
	}
	e.byRef, e.messagesAt = true, *r.at
	if r.through != nil {
		e.view = &compaction.State{ThroughSeq: *r.through}
		if r.cleared != nil {
			e.view.ClearedSeq = *r.cleared
		}
		if r.summary != nil {
			e.view.SummaryID = *r.summary
		}
	}
}

func marshalPayload(p events.Payload) ([]byte, error) {
	return json.Marshal(p)
}

// AppendEvents appends events to one session atomically and in order.
func (s *Store) AppendEvents(ctx context.Context, sessionID string, evs ...NewEvent) ([]Event, error) {
	var out []Event
	err := s.tx(ctx, func(tx *trackedTx) error {
		var err error
		out, err = appendEvents(ctx, tx, sessionID, evs)
		return err
	})
	if err == nil {
		s.noteSummaries(sessionID, evs)
	}
	return out, err
}

// AppendEvents appends within a caller's transaction.
func (t *Tx) AppendEvents(ctx context.Context, sessionID string, evs ...NewEvent) ([]Event, error) {
	out, err := appendEvents(ctx, t.db, sessionID, evs)
	if err == nil {
		t.s.noteSummaries(sessionID, evs)
	}
	return out, err
}

// noteSummaries keeps the summaries of the views appended, so reading the
// requests back (the turn's own stream first) needs no query for them. A
// summary's text never changes, so one noted by a transaction that then
// failed is still right.
func (s *Store) noteSummaries(sessionID string, evs []NewEvent) {
	for _, ev := range evs {
		if v := ev.View; v != nil && v.SummaryID != "" {
			e := s.conv.entry(sessionID)
			e.mu.Lock()
			e.noteSummary(v.SummaryID, v.Summary)
			e.mu.Unlock()
		}
	}
}

// appendEvents allocates per-session sequence numbers under the session row
// lock, so commit order equals seq order for each session and a reader that
// tails "seq > last" can never skip an event committed late. Events whose
// idempotency key already exists are returned as stored, not re-inserted, so
// the sequence has no gaps and no duplicates. It is one round trip: the lock,
// then one statement that looks the keys up, inserts the rest, advances the
// sequence and sends the notice. That statement starts after the lock is
// held, so it sees every event committed before it, and no other append to
// the session can commit until this transaction ends.
func appendEvents(ctx context.Context, tx dbtx, sessionID string, evs []NewEvent) ([]Event, error) {
	return appendChecked(ctx, tx, sessionID, evs, false)
}

// appendEnding is appendEvents for a writer that ends the session itself in
// the same transaction (a close, an audit session born in error): its
// events are written whatever the session's state.
func appendEnding(ctx context.Context, tx dbtx, sessionID string, evs []NewEvent) ([]Event, error) {
	return appendChecked(ctx, tx, sessionID, evs, true)
}

func appendChecked(ctx context.Context, tx dbtx, sessionID string, evs []NewEvent, ending bool) ([]Event, error) {
	p, err := planAppend(sessionID, evs, ending)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	p.queue(b)
	br := tx.SendBatch(ctx, b)
	out, inserted, err := p.read(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("append events: %w", cerr)
	}
	if err != nil {
		return nil, err
	}
	return out, appended(ctx, tx, sessionID, inserted)
}

// appended sends the notice of the events an append inserted, and has a
// tracked transaction hand them to the tail once it committed.
func appended(ctx context.Context, tx dbtx, sessionID string, inserted []Event) error {
	if len(inserted) == 0 {
		return nil
	}
	head := inserted[len(inserted)-1].Seq
	// The notice is delivered at commit whenever it is sent: in a tracked
	// transaction it rides with the next round trip, usually the COMMIT.
	if tt, tracked := tx.(*trackedTx); tracked {
		tt.queue(queuedWrite{what: "notify appended events", sql: `SELECT pg_notify($1, $2)`, args: []any{EventsChannel, eventsNotice(sessionID, head, tt.origin)}, rows: -1})
		tt.record(sessionID, inserted)
	} else if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, EventsChannel, eventsNotice(sessionID, head, "")); err != nil {
		return fmt.Errorf("append events: notify: %w", err)
	}
	return nil
}

// appendPlan is one append's rows, as appendSQL takes them.
type appendPlan struct {
	sessionID    string
	evs          []NewEvent
	idList, keys []string
	firstOf      []int // index in evs of each row sent
	followsClose bool
	args         []any // appendSQL's
}

func planAppend(sessionID string, evs []NewEvent, ending bool) (*appendPlan, error) {
	n := len(evs)
	var (
		idList, keys, turns, clients, types, payloads = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		upto, through, cleared                        = make([]*int64, 0, n), make([]*int64, 0, n), make([]*int64, 0, n)
		summaries                                     = make([]*string, 0, n)
		sent                                          = map[string]bool{}
		firstOf                                       = make([]int, 0, n)
	)
	for i, ev := range evs {
		if ev.IdemKey != "" {
			if sent[ev.IdemKey] {
				continue // a key repeated within one call is stored once
			}
			sent[ev.IdemKey] = true
		}
		payload, err := marshalPayload(ev.Payload)
		if err != nil {
			return nil, fmt.Errorf("append events: marshal %s payload: %w", ev.Type(), err)
		}
		var th, cl *int64
		var sum *string
		if v := ev.View; v != nil {
			if ev.MessagesAt == nil || (v.Summary != "") != (v.SummaryID != "") {
				return nil, fmt.Errorf("append events: %s: a view is stored with its conversation's counter and its summary's id", ev.Type())
			}
			th, cl = &v.ThroughSeq, &v.ClearedSeq
			if v.SummaryID != "" {
				sum = &v.SummaryID
			}
		}
		through, cleared, summaries = append(through, th), append(cleared, cl), append(summaries, sum)
		idList = append(idList, ids.New(ids.EventPrefix))
		keys, turns, clients = append(keys, ev.IdemKey), append(turns, ev.TurnID), append(clients, ev.ClientKeyID)
		types, payloads, upto = append(types, string(ev.Type())), append(payloads, string(payload)), append(upto, ev.MessagesAt)
		firstOf = append(firstOf, i)
	}
	// Once the session is not open, only what may follow its close is
	// written (events.Type.FollowsClose); the lock orders this check with
	// the close, so no turn's event lands after a session.close.
	followsClose := true
	for _, ev := range evs {
		if ending {
			break
		}
		followsClose = followsClose && ev.Type().FollowsClose()
	}
	return &appendPlan{sessionID: sessionID, evs: evs, idList: idList, keys: keys, firstOf: firstOf, followsClose: followsClose,
		args: []any{sessionID, idList, keys, turns, clients, types, payloads, upto, followsClose, through, cleared, summaries}}, nil
}

// queue adds the append's two statements to b: the session lock, then
// appendSQL.
func (p *appendPlan) queue(b *pgx.Batch) {
	// The lock also switches this transaction to generic plans before the
	// append statement is bound. PostgreSQL otherwise keeps planning that
	// statement afresh on every call (its custom plan, which knows the
	// arrays' lengths, always looks cheaper than the generic one), and
	// planning it cost more CPU than running it: about 0.3 ms per append.
	// The generic plan is the same index probes. The setting ends with the
	// transaction; the statements after it in the transaction are keyed
	// probes too, where the generic plan is the custom one.
	b.Queue(`SELECT state, set_config('plan_cache_mode', 'force_generic_plan', true) FROM sessions WHERE id = $1 FOR UPDATE`, p.sessionID)
	b.Queue(appendSQL, p.args...)
}

// queueWithMessage is queue appending the message msg (the arguments of
// Tx.AppendMessage) with the events (appendWithMessageSQL).
func (p *appendPlan) queueWithMessage(b *pgx.Batch, msg []any) {
	b.Queue(`SELECT state, set_config('plan_cache_mode', 'force_generic_plan', true) FROM sessions WHERE id = $1 FOR UPDATE`, p.sessionID)
	b.Queue(appendWithMessageSQL, append(append([]any{}, p.args...), msg[1:]...)...)
}

// read reads the results of queue's statements: every event of the call
// (stored now or before under its key) and those inserted now, in seq
// order.
func (p *appendPlan) read(br pgx.BatchResults) (out, inserted []Event, err error) {
	sessionID, evs, idList, keys := p.sessionID, p.evs, p.idList, p.keys
	var state string
	if err := br.QueryRow().Scan(&state, nil); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil, fmt.Errorf("append events: session %s: %w", sessionID, ErrNotFound)
		}
		return nil, nil, fmt.Errorf("append events: lock session: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("append events: %w", err)
	}
	byID := make(map[string]Event, len(idList))
	stored := map[string]Event{}
	for rows.Next() {
		var fresh bool
		var e Event
		var r refCols
		if err := rows.Scan(&fresh, &e.Seq, &e.ID, &e.SessionID, &e.ClientKeyID, &e.TurnID, &e.IdemKey, &e.Type, &r.payload, &e.CreatedAt,
			&r.at, &r.through, &r.cleared, &r.summary); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("append events: %w", err)
		}
		r.fill(&e)
		if fresh {
			byID[e.ID] = e
			inserted = append(inserted, e)
		} else {
			stored[e.IdemKey] = e
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("append events: %w", err)
	}
	if state != StateOpen && !p.followsClose {
		// appendSQL wrote nothing; a keyed event stored before the close
		// is still answered as stored.
		for j := range idList {
			if _, ok := stored[keys[j]]; !ok || keys[j] == "" {
				return nil, nil, fmt.Errorf("append events: session %s: %w", sessionID, &NotOpenError{State: state})
			}
		}
	}
	out = make([]Event, len(evs))
	for j, i := range p.firstOf {
		e, ok := byID[idList[j]]
		if !ok {
			if e, ok = stored[keys[j]]; !ok || keys[j] == "" {
				return nil, nil, fmt.Errorf("append events: %s neither stored nor found", evs[i].Type())
			}
		}
		out[i] = e
		if keys[j] != "" {
			stored[keys[j]] = e
		}
	}
	slices.SortFunc(inserted, func(a, b Event) int { return cmp.Compare(a.Seq, b.Seq) })
	return dedupe(out, evs, stored), inserted, nil
}

// appendCTEs are the append statements' common part: the input, the keys
// already stored, the fresh events and their insert (ins).
const appendCTEs = `WITH input AS (
	SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int8[], $10::int8[], $11::int8[], $12::text[]) WITH ORDINALITY
		AS i(id, idem_key, turn_id, client_key_id, event_type, payload, messages_upto, view_through, view_cleared, view_summary, ord)
), found AS (
	-- One probe of the unique index per key (OFFSET 0 keeps the planner
	-- from turning them into one scan of the session's events).
	SELECT e.* FROM unnest($3::text[]) k(key)
	CROSS JOIN LATERAL (SELECT * FROM session_events WHERE session_id = $1 AND idem_key = k.key OFFSET 0) e
	WHERE k.key <> ''
), fresh AS (
	SELECT i.*, row_number() OVER (ORDER BY i.ord) AS n FROM input i
	WHERE (i.idem_key = '' OR NOT EXISTS (SELECT 1 FROM found WHERE found.idem_key = i.idem_key))
	  AND ($9::bool OR (SELECT state FROM sessions WHERE id = $1) = 'open')
), ins AS (
	INSERT INTO session_events (session_id, seq, id, idem_key, turn_id, client_key_id, event_type, payload, messages_upto, view_through, view_cleared, view_summary)
	SELECT $1, s.last_event_seq + f.n, f.id, NULLIF(f.idem_key, ''), NULLIF(f.turn_id, ''), NULLIF(f.client_key_id, ''), f.event_type, f.payload::json, f.messages_upto,
		f.view_through, f.view_cleared, f.view_summary
	FROM fresh f CROSS JOIN (SELECT last_event_seq FROM sessions WHERE id = $1) s
	RETURNING *
)`

// appendSQL is appendEvents's statement: $2..$8 are the new events' ids,
// idempotency keys, turns, client keys, types, payloads and conversation
// counters ("" for none); $9 says every event may follow the session's
// close (events.Type.FollowsClose), else none is inserted unless the
// session is open; $10..$12 are the views' columns (NewEvent.View). It
// returns the inserted events (true) and those whose key was already
// stored (false).
const appendSQL = appendCTEs + `, head AS (
	UPDATE sessions SET last_event_seq = last_event_seq + (SELECT count(*) FROM fresh)
	WHERE id = $1 AND EXISTS (SELECT 1 FROM fresh)
)
SELECT true, ` + eventCols + ` FROM ins
UNION ALL
SELECT false, ` + eventCols + ` FROM found`

// appendWithMessageSQL is appendSQL that also appends the conversation
// message $13 (key), $14 (role), $15 (content) as Tx.AppendMessage does,
// unless one is stored under its key: both counters move in one update of
// the session row instead of two. Only after the append's lock of the row
// (appendPlan.queue), so the counter read is the row's latest.
const appendWithMessageSQL = appendCTEs + `, mins AS (
	INSERT INTO session_messages (session_id, seq, idem_key, role, content)
	SELECT $1::text, s.last_message_seq + 1, $13::text, $14::text, $15::json
	FROM (SELECT last_message_seq FROM sessions WHERE id = $1) s
	WHERE NOT EXISTS (SELECT 1 FROM session_messages WHERE session_id = $1 AND idem_key = $13)
	RETURNING 1
), head AS (
	UPDATE sessions SET last_event_seq = last_event_seq + (SELECT count(*) FROM fresh),
		last_message_seq = last_message_seq + (SELECT count(*) FROM mins)
	WHERE id = $1 AND (EXISTS (SELECT 1 FROM fresh) OR EXISTS (SELECT 1 FROM mins))
)
SELECT true, ` + eventCols + ` FROM ins
UNION ALL
SELECT false, ` + eventCols + ` FROM found`

// dedupe fills the slots of keys repeated within one call with the event
// stored for the first of them.
func dedupe(out []Event, evs []NewEvent, stored map[string]Event) []Event {
	for i, ev := range evs {
		if out[i].ID == "" && ev.IdemKey != "" {
			out[i] = stored[ev.IdemKey]
		}
	}
	return out
}

// EventsAfter returns up to limit events with seq > after, oldest first.
func (s *Store) EventsAfter(ctx context.Context, sessionID string, after int64, limit int) ([]Event, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+eventCols+` FROM `+eventLog("$1", "e.seq > $2", "ORDER BY e.seq LIMIT $3")+` e ORDER BY seq LIMIT $3`, sessionID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) { return scanEvent(r) })
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	markInherited(sessionID, list)
	if err := s.materialize(ctx, s.Pool, sessionID, list); err != nil {
		return nil, err
	}
	return list, nil
}

// TurnEvents returns every event tagged with turnID, in order.
func (s *Store) TurnEvents(ctx context.Context, sessionID, turnID string) ([]Event, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+eventCols+` FROM session_events WHERE session_id = $1 AND turn_id = $2 ORDER BY seq`, sessionID, turnID)
	if err != nil {
		return nil, fmt.Errorf("read turn events: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) { return scanEvent(r) })
	if err != nil {
		return nil, fmt.Errorf("read turn events: %w", err)
	}
	if err := s.materialize(ctx, s.Pool, sessionID, list); err != nil {
		return nil, err
	}
	return list, nil
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

// LastCallingTurn is the turn of the session's latest provider.request:
// the turn whose provider call runs, when one runs (ErrNotFound when the
// session never called a provider).
func (s *Store) LastCallingTurn(ctx context.Context, sessionID string) (string, error) {
	var turnID string
	err := s.Pool.QueryRow(ctx, `SELECT turn_id FROM session_events WHERE session_id = $1 AND event_type = $2 AND turn_id IS NOT NULL
		ORDER BY seq DESC LIMIT 1`, sessionID, string(events.ProviderRequest)).Scan(&turnID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("find calling turn: %w", err)
	}
	return turnID, nil
}

// SeqOfEvent resolves an event id within a session.
func (s *Store) SeqOfEvent(ctx context.Context, sessionID, eventID string) (int64, error) {
	var seq int64
	err := s.Pool.QueryRow(ctx, `SELECT seq FROM `+eventLog("$1", "e.id = $2", "")+` e`, sessionID, eventID).Scan(&seq)
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

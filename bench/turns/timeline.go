package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// phase is one segment of the server-side timeline of a turn.
type phase struct {
	Name string `json:"name"`
	What string `json:"what"`
	Dist dist   `json:"dist"`
}

// timeline splits each measured turn into phases using wall-clock stamps
// from four sources on the same host: the load generator (request sent,
// terminal read), PostgreSQL (created_at = now(), the start of the
// transaction that appended the event, microsecond precision) and the fake
// (handler entry and exit). The wire created_at is rounded to milliseconds,
// so the stamps are read from the database after the run instead.
func timeline(ctx context.Context, dbURL string, turns []turnRec) ([]phase, int, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, 0, fmt.Errorf("timeline: connect: %w", err)
	}
	defer conn.Close(ctx)
	// The client.message.send payload carries the turn's unique token, which
	// joins the database's events to the bench's records.
	rows, err := conn.Query(ctx, `
		SELECT c.payload->>'content',
		       min(e.created_at) FILTER (WHERE e.event_type = 'client.message.send'),
		       min(e.created_at) FILTER (WHERE e.event_type = 'provider.request'),
		       max(e.created_at) FILTER (WHERE e.event_type = 'provider.response')
		FROM session_events c
		JOIN session_events e ON e.session_id = c.session_id AND e.turn_id = c.turn_id
		WHERE c.event_type = 'client.message.send'
		GROUP BY 1`)
	if err != nil {
		return nil, 0, fmt.Errorf("timeline: query: %w", err)
	}
	type stamps struct{ cms, preq, presp *time.Time }
	byToken := map[string]stamps{}
	for rows.Next() {
		var tok string
		var s stamps
		if err := rows.Scan(&tok, &s.cms, &s.preq, &s.presp); err != nil {
			return nil, 0, fmt.Errorf("timeline: scan: %w", err)
		}
		byToken[tok] = s
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("timeline: rows: %w", err)
	}

	names := []struct{ name, what string }{
		{"accept", "request sent -> BeginTurn tx (HTTP, auth, store input, Update to workflow, workflow task, local activity)"},
		{"dispatch", "BeginTurn -> provider.request tx (workflow task completes, activity task via matching, history + tools read)"},
		{"provider_out", "provider.request tx -> fake entered (append commit, HTTP request to provider)"},
		{"fake", "inside the fake provider's handler"},
		{"provider_in", "fake left -> provider.response tx (HTTP response, decode)"},
		{"complete", "provider.response tx -> terminal read (append commit, activity completion, workflow task, Update result, TurnEvents read, relay, client decode)"},
	}
	cols := make([][]time.Duration, len(names))
	used := 0
	for _, t := range turns {
		s, ok := byToken[t.token]
		if t.err != nil || !ok || s.cms == nil || s.preq == nil || s.presp == nil || !t.fakeOK {
			continue
		}
		marks := []time.Time{t.start, *s.cms, *s.preq, t.fake.First, t.fake.Last, *s.presp, t.end}
		for i := range names {
			cols[i] = append(cols[i], marks[i+1].Sub(marks[i]))
		}
		used++
	}
	out := make([]phase, len(names))
	for i, n := range names {
		out[i] = phase{Name: n.name, What: n.what, Dist: summarise(cols[i])}
	}
	return out, used, nil
}

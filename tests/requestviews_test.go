package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// TestCompactedRequestsReadAsSent: a compacted provider.request is stored as
// what its view adds to the conversation (a few columns, the payload the
// same small size on every turn), and every reader gets back, byte for
// byte, the messages the provider was sent: GET /events on the client and
// admin APIs, a subscribe replay, a store with a cold cache (another
// replica), a fork's inherited events and the fork's own compacted
// requests, which name its source's summary. Rows stored whole, as before
// storage by reference, still read as sent.
func TestCompactedRequestsReadAsSent(t *testing.T) {
	// Without prompt caching an anthropic body carries the canonical
	// messages as they are, so the bytes compare directly.
	e, _, pid := newCompactionEnvWith(t, "anthropic", windowTokens, map[string]any{}, "prompt_cache = false\n")
	d := e.openOn(pid, nil)
	d.register()
	const turns = 60
	for i := range turns {
		_, term := d.send(userText(i))
		require.Nil(t, term["error"], "turn %d: %v", i, term["error"])
	}
	sent := sentMessages(t, e.fake, 0)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.srv.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(ctx)

	// Storage: every request by reference, the compacted ones as views,
	// none carrying its messages.
	var reqs, views, maxSize int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), count(view_through), max(octet_length(payload::text)) FROM session_events
		WHERE session_id = $1 AND event_type = 'provider.request' AND messages_upto IS NOT NULL AND payload->'messages' IS NULL`, d.sid).Scan(&reqs, &views, &maxSize))
	require.Len(t, sent, reqs, "one provider.request per request sent, all by reference")
	require.Greater(t, views, turns/2, "most requests were compacted views")
	var summaries int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(DISTINCT view_summary) FROM session_events WHERE session_id = $1`, d.sid).Scan(&summaries))
	require.Greater(t, summaries, 1, "the views name more than one summary")
	assert.Less(t, maxSize, 400, "a stored request does not carry its view")
	t.Logf("%d requests, %d of them views naming %d summaries, stored payloads at most %d bytes", reqs, views, summaries, maxSize)

	requireSameBytes(t, "client GET /events", sent, rawRequests(t, pageEvents(t, e, "/api/v1/sessions/"+d.sid+"/events", d.sk)))
	requireSameBytes(t, "admin GET /events", sent, rawRequests(t, pageEvents(t, e, "/admin/v1/sessions/"+d.sid+"/events", "")))
	requireSameBytes(t, "subscribe replay", sent, rawRequests(t, replayEvents(t, e, d)))
	cold := coldStore(t, ctx, e)
	coldEvents := func(sid string) []json.RawMessage {
		evs, err := cold.EventsAfter(ctx, sid, 0, 10_000)
		require.NoError(t, err)
		var out []json.RawMessage
		for _, ev := range evs {
			out = append(out, ev.AppendJSON(nil))
		}
		return out
	}
	requireSameBytes(t, "a cold store", sent, rawRequests(t, coldEvents(d.sid)))

	// A fork inherits the requests and compacts on from the source's
	// summary.
	f, _ := d.forkOf(map[string]any{"client_version": "test"})
	before := len(e.fake.Requests())
	for i := turns; i < turns+30; i++ {
		_, term := f.send(userText(i))
		require.Nil(t, term["error"], "fork turn %d: %v", i, term["error"])
	}
	forkSent := append(append([][]byte(nil), sent...), sentMessages(t, e.fake, before)...)
	var forkViews int
	var namesSource bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(view_through), coalesce(bool_or(view_summary IN (SELECT id FROM session_summaries WHERE session_id = $2)), false)
		FROM session_events WHERE session_id = $1 AND event_type = 'provider.request'`, f.sid, d.sid).Scan(&forkViews, &namesSource))
	require.Positive(t, forkViews, "the fork's own requests are views")
	require.True(t, namesSource, "and the first of them name the source's summary")
	requireSameBytes(t, "fork GET /events", forkSent, rawRequests(t, pageEvents(t, e, "/api/v1/sessions/"+f.sid+"/events", f.sk)))
	cold = coldStore(t, ctx, e)
	requireSameBytes(t, "fork, a cold store", forkSent, rawRequests(t, coldEvents(f.sid)))

	// Rows stored before storage by reference: the view in the payload, no
	// counter. Rewritten as the earlier code wrote them, they read as sent.
	rows, err := conn.Query(ctx, `SELECT id FROM session_events WHERE session_id = $1 AND event_type = 'provider.request' AND view_through IS NOT NULL ORDER BY seq`, d.sid)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	byID := map[string]json.RawMessage{}
	for _, raw := range pageEvents(t, e, "/api/v1/sessions/"+d.sid+"/events", d.sk) {
		var ev struct {
			ID      string          `json:"id"`
			Payload json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(raw, &ev))
		byID[ev.ID] = ev.Payload
	}
	for _, id := range ids {
		var p struct {
			Attempt   int             `json:"attempt"`
			Kind      string          `json:"kind"`
			Provider  string          `json:"provider"`
			BaseURL   string          `json:"base_url"`
			Model     string          `json:"model"`
			MaxTokens int             `json:"max_tokens"`
			Messages  json.RawMessage `json:"messages"`
			Tools     json.RawMessage `json:"tools"`
		}
		require.NoError(t, json.Unmarshal(byID[id], &p))
		whole, err := json.Marshal(events.ProviderRequestPayload{Attempt: p.Attempt, Kind: p.Kind, Provider: p.Provider, BaseURL: p.BaseURL,
			Model: p.Model, MaxTokens: p.MaxTokens, Messages: p.Messages, Tools: p.Tools})
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `UPDATE session_events SET payload = $2::json, messages_upto = NULL, view_through = NULL, view_cleared = NULL, view_summary = NULL
			WHERE session_id = $1 AND id = $3`, d.sid, string(whole), id)
		require.NoError(t, err)
	}
	cold = coldStore(t, ctx, e)
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM session_events WHERE session_id = $1 AND event_type = 'provider.request' AND messages_upto IS NULL`, d.sid).Scan(&reqs))
	require.Equal(t, len(ids), reqs, "the views are stored whole now")
	requireSameBytes(t, "rows stored whole, GET /events", sent, rawRequests(t, pageEvents(t, e, "/api/v1/sessions/"+d.sid+"/events", d.sk)))
	requireSameBytes(t, "rows stored whole, a cold store", sent, rawRequests(t, coldEvents(d.sid)))
	requireSameBytes(t, "rows stored whole, fork", forkSent, rawRequests(t, pageEvents(t, e, "/api/v1/sessions/"+f.sid+"/events", f.sk)))
}

// sentMessages are the "messages" bytes of the requests the compaction
// lane answered from the after-th request on, summarizer calls apart and a
// request sent again (a retried call) once.
func sentMessages(t *testing.T, fake *fakeprovider.Server, after int) [][]byte {
	t.Helper()
	var out [][]byte
	var last []byte
	for _, r := range fake.Requests()[after:] {
		if r.Lane != "small" || summarizing(r) || bytes.Equal(r.RawBody, last) {
			continue
		}
		last = r.RawBody
		out = append(out, rawField(t, r.RawBody, "messages"))
	}
	return out
}

func rawField(t *testing.T, obj []byte, name string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(obj, &m))
	return m[name]
}

// rawRequests are the "messages" bytes of the provider.request events
// among evs (EventView JSON), in order.
func rawRequests(t *testing.T, evs []json.RawMessage) [][]byte {
	t.Helper()
	var out [][]byte
	for _, raw := range evs {
		var ev struct {
			Type    string          `json:"event_type"`
			Payload json.RawMessage `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(raw, &ev))
		if ev.Type == "provider.request" {
			out = append(out, rawField(t, ev.Payload, "messages"))
		}
	}
	return out
}

// requireSameBytes: each request read is byte for byte the one sent.
func requireSameBytes(t *testing.T, reader string, sent, read [][]byte) {
	t.Helper()
	require.Len(t, read, len(sent), "%s: one provider.request per request sent", reader)
	for i := range sent {
		if !bytes.Equal(sent[i], read[i]) {
			n := 0
			for n < min(len(sent[i]), len(read[i])) && sent[i][n] == read[i][n] {
				n++
			}
			require.Failf(t, "not the bytes sent", "%s, request %d: %d bytes sent, %d read, first difference at %d: sent %.80q, read %.80q",
				reader, i, len(sent[i]), len(read[i]), n, sent[i][n:], read[i][n:])
		}
	}
}

// pageEvents reads every event of path (an events listing) as it came on
// the wire; token "" is the admin key.
func pageEvents(t *testing.T, e *env, path, token string) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	cursor := ""
	for {
		u := path + "?limit=200&cursor=" + cursor
		var r struct {
			Status int
			Raw    []byte
		}
		if token == "" {
			res := e.srv.Admin(t, http.MethodGet, u, nil)
			r.Status, r.Raw = res.Status, res.Raw
		} else {
			res := e.srv.Client(t, http.MethodGet, u, token, nil)
			r.Status, r.Raw = res.Status, res.Raw
		}
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor *string           `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal(r.Raw, &page))
		out = append(out, page.Items...)
		if page.NextCursor == nil {
			return out
		}
		cursor = *page.NextCursor
	}
}

// replayEvents replays d's session through session.subscribe from its
// start and returns the events' lines as they came, up to the head.
func replayEvents(t *testing.T, e *env, d *driver) []json.RawMessage {
	t.Helper()
	var head int64
	require.NoError(t, e.srv.Parts.Store.Pool.QueryRow(context.Background(), `SELECT last_event_seq FROM sessions WHERE id = $1`, d.sid).Scan(&head))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := `{"jsonrpc":"2.0","id":7,"method":"session.subscribe","params":{"since_event_id":"evt_unknown"}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.ClientURL+"/api/v1/sessions/"+d.sid+"/rpc", bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+d.sk)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []json.RawMessage
	for n := int64(0); n < head && sc.Scan(); {
		var line struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		if line.Method == "session.event" {
			out = append(out, line.Params)
			n++
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// TestClearedToolResultsReadAsSent: with tool results cleared past the
// summary (the view's cleared boundary beyond its summarized one), a
// compacted request stored by reference still reads as the messages the
// provider was sent. The stored messages keep bae-go's routing tags on
// tool_use blocks, which a provider is never sent, so the comparison is of
// the decoded messages without them.
func TestClearedToolResultsReadAsSent(t *testing.T) {
	e, lane, pid := newCompactionEnvWith(t, "anthropic", windowTokens, map[string]any{"context": map[string]any{"keep_turns": 2}}, "prompt_cache = false\n")
	d := openFileReader(e, lane, pid)
	for i := range 30 {
		readFileTurn(t, d, i)
	}
	var clearedPast int
	require.NoError(t, e.srv.Parts.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM session_events
		WHERE session_id = $1 AND event_type = 'provider.request' AND view_cleared > view_through`, d.sid).Scan(&clearedPast))
	require.Positive(t, clearedPast, "some views clear tool results past their summary")

	var sent []any
	var last []byte
	for _, r := range e.fake.Requests() {
		if r.Lane != "small" || summarizing(r) || bytes.Equal(r.RawBody, last) {
			continue
		}
		last = r.RawBody
		sent = append(sent, r.Body["messages"])
	}
	evs, err := coldStore(t, context.Background(), e).EventsAfter(context.Background(), d.sid, 0, 10_000)
	require.NoError(t, err)
	var coldRaw []json.RawMessage
	for _, ev := range evs {
		coldRaw = append(coldRaw, ev.AppendJSON(nil))
	}
	for reader, raws := range map[string][]json.RawMessage{
		"GET /events":  pageEvents(t, e, "/api/v1/sessions/"+d.sid+"/events", d.sk),
		"a cold store": coldRaw,
	} {
		read := rawRequests(t, raws)
		require.Len(t, read, len(sent), "%s: one provider.request per request sent", reader)
		for i, raw := range read {
			var got any
			require.NoError(t, json.Unmarshal(raw, &got))
			require.Equal(t, sent[i], withoutRoutingTags(got), "%s, request %d", reader, i)
		}
	}
}

// withoutRoutingTags is decoded messages without the tool_use fields a
// provider is never sent.
func withoutRoutingTags(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if x["type"] == "tool_use" && (k == "dispatch" || k == "caller") {
				continue
			}
			out[k] = withoutRoutingTags(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = withoutRoutingTags(e)
		}
		return out
	}
	return v
}

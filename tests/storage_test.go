package tests

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// TestProviderRequestStorageIsLinear: provider.request events carry the whole
// conversation on the wire (the contract), but storage grows with the
// conversation, not with its square: the stored event is the same size on
// every turn, and each message is stored once. What readers get back, in
// the live stream, the terminal result, GET /events and a subscribe replay,
// is exactly the conversation the provider was sent, in the contract's
// provider.request shape, including after a failed turn left the
// conversation.
func TestProviderRequestStorageIsLinear(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := e.open()
	conn, err := pgx.Connect(context.Background(), e.srv.DatabaseURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	exec := func(sql string) {
		_, err := conn.Exec(context.Background(), sql)
		require.NoError(t, err)
	}
	const turns = 12
	var live, terminal []map[string]any
	for i := range turns {
		if i == 5 {
			// This turn fails storing its answer, past its retries, and
			// leaves the conversation; its request still names it.
			exec(`CREATE FUNCTION refuse_assistant() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF NEW.role = 'assistant' THEN RAISE EXCEPTION 'assistant messages refused'; END IF; RETURN NEW; END $$`)
			exec(`CREATE TRIGGER refuse BEFORE INSERT ON session_messages FOR EACH ROW EXECUTE FUNCTION refuse_assistant()`)
		}
		notifs, term := d.send(fmt.Sprintf("message %02d with some words to make it longer", i))
		for _, n := range notifications(notifs) {
			if n["event_type"] == "provider.request" {
				live = append(live, n)
			}
		}
		if i == 5 {
			require.Contains(t, term, "error", "the turn failed: %v", term)
			exec(`DROP TRIGGER refuse ON session_messages`)
			continue
		}
		for _, ev := range resultEvents(term) {
			if ev["event_type"] == "provider.request" {
				terminal = append(terminal, ev)
			}
		}
	}
	// A failing attempt is tried again, calling the provider again with the
	// same request: one stored provider.request for each distinct one.
	var reqs []fakeprovider.Recorded
	for _, r := range e.fake.Requests() {
		if n := len(reqs); n > 0 && string(reqs[n-1].RawBody) == string(r.RawBody) {
			continue
		}
		reqs = append(reqs, r)
	}

	// Storage: one stored provider.request per provider call, all the same
	// size (they differ only in the counter they name); messages stored once.
	rows, err := conn.Query(context.Background(), `SELECT octet_length(payload::text), messages_upto FROM session_events
		WHERE session_id = $1 AND event_type = 'provider.request' ORDER BY seq`, d.sid)
	require.NoError(t, err)
	var sizes []int
	for rows.Next() {
		var size int
		var upto *int64
		require.NoError(t, rows.Scan(&size, &upto))
		require.NotNil(t, upto, "stored by reference")
		sizes = append(sizes, size)
	}
	require.NoError(t, rows.Err())
	require.Len(t, sizes, len(reqs), "one provider.request per provider call")
	sort.Ints(sizes)
	assert.LessOrEqual(t, sizes[len(sizes)-1]-sizes[0], 8, "stored requests do not grow with the conversation: %v", sizes)
	var msgBytes, msgRows int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT coalesce(sum(octet_length(content::text)), 0), count(*) FROM session_messages WHERE session_id = $1`, d.sid).Scan(&msgBytes, &msgRows))
	var sent int
	for _, r := range reqs {
		sent += len(r.RawBody)
	}
	assert.Less(t, msgBytes*4, sent, "the conversation is stored once, not once per request (%d bytes stored, %d sent)", msgBytes, sent)
	// The failed turn left the conversation: the next request does not have it.
	after := reqs[6].Messages()
	for _, m := range after {
		assert.NotContains(t, fmt.Sprint(m["content"]), "message 05", "the failed turn is out of later requests")
	}
	assert.Contains(t, fmt.Sprint(reqs[5].Messages()), "message 05")
	assert.LessOrEqual(t, msgRows, 2*turns+2, "one row per message")

	// Every reader sees the conversation the provider was sent.
	var stored []map[string]any
	for _, ev := range d.allEvents() {
		if ev["event_type"] == "provider.request" {
			stored = append(stored, ev)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub := e.srv.RPCStream(t, ctx, d.sid, d.sk, map[string]any{"jsonrpc": "2.0", "id": 99, "method": "session.subscribe", "params": map[string]any{"since_event_id": "evt_unknown"}})
	defer sub.Close()
	var replayed []map[string]any
	for len(replayed) < len(reqs) {
		m := sub.Next(30 * time.Second)
		require.NotNil(t, m, "replay ends early")
		if ev := m["params"].(map[string]any); ev["event_type"] == "provider.request" {
			replayed = append(replayed, ev)
		}
	}
	require.Len(t, stored, len(reqs))
	require.Len(t, live, len(reqs))
	require.Len(t, terminal, len(reqs)-1, "all but the failed turn's")
	for i, r := range reqs {
		// As sent, but for the prompt cache's transport: the markers, and
		// string content sent as its one text block.
		want := asBlocks(fakeprovider.WithoutCacheControl(r.Body["messages"]))
		for name, evs := range map[string][]map[string]any{"GET /events": stored, "live stream": live, "terminal result": terminal, "subscribe replay": replayed} {
			j := i
			if name == "terminal result" {
				if i == 5 {
					continue
				}
				if i > 5 {
					j = i - 1
				}
			}
			p := payload(evs[j])
			assert.Equal(t, want, asBlocks(p["messages"]), "%s, request %d: the messages sent", name, i)
			keys := make([]string, 0, len(p))
			for k := range p {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			assert.Equal(t, []string{"attempt", "base_url", "kind", "max_tokens", "messages", "model", "provider", "tools"}, keys, "%s: the contract's provider.request fields", name)
		}
	}
}

// asBlocks is decoded canonical messages with string content written as
// its one text block, the form an anthropic request with prompt caching
// sends.
func asBlocks(v any) any {
	msgs, ok := v.([]any)
	if !ok {
		return v
	}
	out := make([]any, len(msgs))
	for i, m := range msgs {
		msg, ok := m.(map[string]any)
		if !ok {
			out[i] = m
			continue
		}
		c := make(map[string]any, len(msg))
		for k, x := range msg {
			c[k] = x
		}
		if s, ok := c["content"].(string); ok {
			c["content"] = []any{map[string]any{"type": "text", "text": s}}
		}
		out[i] = c
	}
	return out
}

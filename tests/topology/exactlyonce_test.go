//go:build topology

package topology

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/workflows"
)

// resendPause spaces a client's resends after a failure it cannot judge
// (a broken stream, a refused connection): back-off, not synchronisation.
const resendPause = 200 * time.Millisecond

// delivery is what the client saw of one message over all its sends.
type delivery struct {
	Text     string
	Terminal map[string]any // the terminal object that ended the sending
	Sends    int
	Via      []string // the replica of each send
}

// sendKeyed sends text as one message under one Idempotency-Key, as a
// client behind a load balancer would: through the replicas of via in turn,
// moving on after any failure whose outcome it cannot know (no connection,
// a stream cut before its terminal, a 5xx, an internal error), until it
// holds a definite terminal result or ctx ends.
func (c *cluster) sendKeyed(ctx context.Context, sid, sk, text, key string, via ...string) delivery {
	d := delivery{Text: text}
	for i := 0; ; i++ {
		name := via[i%len(via)]
		d.Sends++
		d.Via = append(d.Via, name)
		term, err := c.sendOnce(ctx, name, sid, sk, text, key)
		if err == nil && !retryable(term) {
			d.Terminal = term
			return d
		}
		if ctx.Err() != nil {
			return d
		}
		select {
		case <-ctx.Done():
			return d
		case <-time.After(resendPause):
		}
	}
}

// sendOnce posts one session.sendMessage and reads its stream to the
// terminal object.
func (c *cluster) sendOnce(ctx context.Context, name, sid, sk, text, key string) (map[string]any, error) {
	body, err := json.Marshal(sendRequest(1, text))
	if err != nil {
		return nil, err
	}
	p := c.reps[name]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.clientAddr+"/api/v1/sessions/"+sid+"/rpc", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+sk)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, err
		}
		if _, ok := m["id"]; ok {
			return m, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("stream ended without a terminal object")
}

// retryable is a terminal error after which the turn may or may not exist:
// the server could not store, relay or learn the outcome, which is what the
// key is for (as bench/crash's client judges it).
func retryable(term map[string]any) bool {
	e, ok := term["error"].(map[string]any)
	if !ok {
		return false
	}
	code, _ := e["code"].(float64)
	msg, _ := e["message"].(string)
	switch {
	case code == -32603 && strings.HasPrefix(msg, "Internal error: the turn failed"):
		return false // the turn ran and failed: a definite result
	case code == -32603, msg == "session loop failed":
		return true
	}
	return false
}

// wireEvent is one event of the public log.
type wireEvent struct {
	ID, Type string
	Payload  map[string]any
}

// checkExactlyOnce checks a session's public event log, its workflow and
// the database the way tests/crash_test.go (bench/crash) does: every sent
// message is exactly one client.message.send, in send order, whose turn
// has exactly one server.message.send carrying "echo: <text>" (the
// terminal the client got, too), provider calls logged as one successful
// request/response pair with none left open, no event id twice, no turn
// nobody sent, no session.error, no stored message that never began a
// turn, and the Session workflow idle.
func (c *cluster) checkExactlyOnce(t *testing.T, via, sid, sk string, sent []delivery) {
	t.Helper()
	var evs []wireEvent
	seen := map[string]bool{}
	for _, raw := range events(t, c.api(via), sid, sk) {
		e := wireEvent{ID: raw["id"].(string), Type: raw["event_type"].(string)}
		e.Payload, _ = raw["payload"].(map[string]any)
		assert.False(t, seen[e.ID], "event id %s (%s) logged twice", e.ID, e.Type)
		seen[e.ID] = true
		evs = append(evs, e)
	}
	type segment struct {
		msg    wireEvent
		events []wireEvent
	}
	var segs []segment
	for _, e := range evs {
		switch {
		case e.Type == "client.message.send":
			segs = append(segs, segment{msg: e})
		case len(segs) > 0:
			segs[len(segs)-1].events = append(segs[len(segs)-1].events, e)
		}
	}
	require.Len(t, segs, len(sent), "one turn per message sent, no more, no fewer")
	for i, d := range sent {
		seg := segs[i]
		assert.Equal(t, d.Text, firstText(seg.msg.Payload), "turn %d is message %d, in send order", i, i)
		var replies []string
		var problems []string
		open, pairs := -1, 0
		for _, e := range seg.events {
			switch e.Type {
			case "server.message.send":
				replies = append(replies, firstText(e.Payload))
			case "session.error":
				problems = append(problems, fmt.Sprintf("session.error %v", e.Payload))
			case "provider.request":
				a, _ := e.Payload["attempt"].(float64)
				if open >= 0 {
					problems = append(problems, fmt.Sprintf("provider.request a%d while a%d has no response", int(a), open))
				}
				open = int(a)
			case "provider.response":
				a, _ := e.Payload["attempt"].(float64)
				ok, _ := e.Payload["ok"].(bool)
				switch {
				case open < 0:
					problems = append(problems, fmt.Sprintf("provider.response a%d without a request", int(a)))
				case int(a) != open:
					problems = append(problems, fmt.Sprintf("provider.response a%d answers request a%d", int(a), open))
				case !ok:
					problems = append(problems, fmt.Sprintf("provider.response a%d not ok: %v", int(a), e.Payload))
				default:
					pairs++
				}
				open = -1
			}
		}
		if open >= 0 {
			problems = append(problems, fmt.Sprintf("provider.request a%d has no response", open))
		}
		if pairs != 1 {
			problems = append(problems, fmt.Sprintf("%d provider request/response pairs, want 1", pairs))
		}
		assert.Empty(t, problems, "message %q", d.Text)
		assert.Equal(t, []string{"echo: " + d.Text}, replies, "message %q answered exactly once", d.Text)
		if assert.NotNil(t, d.Terminal, "message %q: the client got a terminal result (%d sends via %v)", d.Text, d.Sends, d.Via) {
			if assert.Contains(t, d.Terminal, "result", "message %q: %v", d.Text, d.Terminal) {
				assert.Equal(t, "echo: "+d.Text, firstText(message(d.Terminal)), "message %q: the client's result", d.Text)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var orphans int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM turn_inputs WHERE session_id = $1 AND begin_result IS NULL`, sid).Scan(&orphans))
	assert.Zero(t, orphans, "messages stored that never began a turn")

	resp, err := temporalClient(t).QueryWorkflow(ctx, sid, "", workflows.QueryControl)
	require.NoError(t, err, "query the Session workflow")
	var cv workflows.ControlView
	require.NoError(t, resp.Get(&cv))
	assert.False(t, cv.Busy || cv.Queued > 0 || cv.Closed || cv.Paused != nil, "Session workflow idle at the end: %+v", cv)
}

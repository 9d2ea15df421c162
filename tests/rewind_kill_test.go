package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/procserver"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// killedSession is a baesrv process on a strict echoing fake with one
// registered driver's session that ran three turns.
type killedSession struct {
	ks      killableServer
	srv     *procserver.Server
	fake    *fakeprovider.Server
	sid, sk string
	conn    *pgx.Conn
}

func newKilledSession(t *testing.T, ctx context.Context) *killedSession {
	t.Helper()
	ks := newKillable(t)
	fake := fakeprovider.New(t)
	fake.Strict(true)
	lane := fake.Lane("main")
	lane.Respond(func(fakeprovider.Recorded) fakeprovider.Reply { return fakeprovider.Echo() })
	srv := procserver.Start(t, procserver.Options{
		Bin: ks.bin, DatabaseURL: ks.db, Temporal: procserver.Temporal(t), DataDir: ks.dir,
		ConfigTOML: fmt.Sprintf(`
[[providers.entries]]
name = "main"
provider = "anthropic"
base_url = %q
model = "m"
auth_token = "literal-token"
max_tokens = 1000
`, lane.URL()),
	})
	api := srv.API
	pid := api.Profile(t, map[string]any{"name": "killed", "primary_provider": "main", "allowed_tools": []string{}})
	_, ck := api.Key(t, pid)
	sid, sk := api.Open(t, ck, map[string]any{"client_version": "test"})
	api.Call(t, sid, sk, "session.registerDriver", nil)
	for i := range 3 {
		st := sendKeyed(t, ctx, api, sid, sk, fmt.Sprintf("turn-%d", i), fmt.Sprintf("message %d", i), nil)
		term := terminalOf(st, 2*time.Minute)
		st.Close()
		require.NotNil(t, term)
		require.Nil(t, term["error"], "%v", term["error"])
	}
	conn, err := pgx.Connect(ctx, ks.db)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &killedSession{ks: ks, srv: srv, fake: fake, sid: sid, sk: sk, conn: conn}
}

// killMidCall sends an RPC and SIGKILLs the process inside the call's
// transaction: the test holds session_events locked against writes (reads
// go on), so the call's transaction does every write before its event and
// then waits on the lock, where the process dies. A call that committed
// part of its work separately would leave that part behind.
func (k *killedSession) killMidCall(t *testing.T, method string, params any) {
	t.Helper()
	ctx := context.Background()
	lock, err := k.conn.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, `LOCK TABLE session_events IN EXCLUSIVE MODE`)
	require.NoError(t, err)
	defer lock.Rollback(ctx) //nolint:errcheck // released after the kill
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	require.NoError(t, err)
	wrote := make(chan struct{})
	traced := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) }})
	req, err := http.NewRequestWithContext(traced, http.MethodPost, k.srv.API.ClientURL+"/api/v1/sessions/"+k.sid+"/rpc", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+k.sk)
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	var answer string
	go func() {
		defer close(done)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answer = err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answer = fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	<-wrote
	// What the database's other backends were doing, for a call that
	// never reaches the lock.
	var backends []string
	defer func() {
		if t.Failed() {
			t.Logf("backends at the last look:\n%s", strings.Join(backends, "\n"))
		}
	}()
	ended := false
	require.Eventually(t, func() bool {
		select {
		case <-done:
			ended = true
			return true
		default:
		}
		rows, err := k.conn.Query(ctx, `SELECT coalesce(state, ''), coalesce(wait_event_type, ''), coalesce(wait_event, ''), left(query, 160)
			FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
		require.NoError(t, err)
		backends = backends[:0]
		waiting := false
		for rows.Next() {
			var state, waitType, wait, query string
			require.NoError(t, rows.Scan(&state, &waitType, &wait, &query))
			backends = append(backends, fmt.Sprintf("%s | %s %s | %s", state, waitType, wait, query))
			waiting = waiting || waitType == "Lock"
		}
		require.NoError(t, rows.Err())
		return waiting
	}, time.Minute, 10*time.Millisecond, "the call never reached its event's write")
	require.False(t, ended, "the call ended before its event's write: %s", answer)
	k.srv.Kill()
	<-done
	require.NoError(t, lock.Rollback(ctx))
	k.srv.Start()
}

// TestSIGKILLDuringRewind: the process dies while a rewind is in flight.
// After the restart the rewind happened once or not at all: a
// session.rewind event exists exactly when the turn's messages are out of
// the conversation; the driver's retry completes it (or finds it done),
// and the next turn's conversation, without the turn, is one the strict
// fake accepts.
func TestSIGKILLDuringRewind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k := newKilledSession(t, ctx)
	var last string
	require.NoError(t, k.conn.QueryRow(ctx, `SELECT turn_id FROM session_events WHERE session_id = $1 AND turn_id IS NOT NULL
		GROUP BY turn_id ORDER BY min(seq) DESC LIMIT 1`, k.sid).Scan(&last))

	consistent := func() int {
		var rewinds, dropped, msgs int
		require.NoError(t, k.conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM session_events WHERE session_id = $1 AND event_type = 'session.rewind'),
			(SELECT count(*) FILTER (WHERE dropped_seq IS NOT NULL) FROM session_messages WHERE session_id = $1 AND starts_with(idem_key, $2)),
			(SELECT count(*) FROM session_messages WHERE session_id = $1 AND starts_with(idem_key, $2))`, k.sid, last+"/").Scan(&rewinds, &dropped, &msgs))
		require.LessOrEqual(t, rewinds, 1)
		require.Positive(t, msgs)
		if rewinds == 1 {
			assert.Equal(t, msgs, dropped, "a stored rewind took all of the turn out")
		} else {
			assert.Zero(t, dropped, "no rewind stored, nothing taken out")
		}
		return rewinds
	}

	k.killMidCall(t, "session.rewind", map[string]any{"turn_id": last})
	consistent()
	term := testenv.Terminal(t, k.srv.API.Call(t, k.sid, k.sk, "session.rewind", map[string]any{"turn_id": last}))
	if term["error"] != nil {
		assert.Contains(t, term["error"].(map[string]any)["message"], "nothing_to_rewind", "the rewind before the kill happened")
	} else {
		assert.Equal(t, []any{last}, term["result"].(map[string]any)["turn_ids"])
	}
	assert.Equal(t, 1, consistent())

	n := len(k.fake.Requests())
	st := sendKeyed(t, ctx, k.srv.API, k.sid, k.sk, "after", "after the rewind", nil)
	term = terminalOf(st, 2*time.Minute)
	st.Close()
	require.NotNil(t, term, "%s", k.srv.Log())
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, []string{"message 0", "echo: message 0", "message 1", "echo: message 1", "after the rewind"}, texts(k.fake.Requests()[n].Messages()))
	assert.Zero(t, k.fake.StrictRefusals())
}

// TestSIGKILLDuringFork: the process dies while a fork is in flight. After
// the restart the source has no fork or one complete fork (its row, its
// key, its client and its session.open together); a retried fork works
// and starts where the source is.
func TestSIGKILLDuringFork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k := newKilledSession(t, ctx)

	complete := func() int {
		rows, err := k.conn.Query(ctx, `SELECT s.id,
				(SELECT count(*) FROM keys WHERE session_id = s.id),
				(SELECT count(*) FROM session_clients WHERE session_id = s.id),
				(SELECT count(*) FROM session_events WHERE session_id = s.id AND event_type = 'session.open')
			FROM sessions s WHERE s.forked_from = $1`, k.sid)
		require.NoError(t, err)
		n := 0
		for rows.Next() {
			var id string
			var keys, clients, opens int
			require.NoError(t, rows.Scan(&id, &keys, &clients, &opens))
			assert.Equal(t, [3]int{1, 1, 1}, [3]int{keys, clients, opens}, "fork %s is whole", id)
			n++
		}
		require.NoError(t, rows.Err())
		return n
	}

	k.killMidCall(t, "session.fork", map[string]any{})
	before := complete()
	assert.LessOrEqual(t, before, 1)
	term := testenv.Terminal(t, k.srv.API.Call(t, k.sid, k.sk, "session.fork", map[string]any{}))
	require.Nil(t, term["error"], "%v", term["error"])
	res := term["result"].(map[string]any)
	assert.Equal(t, before+1, complete())

	fid, fsk := res["session_id"].(string), res["session_key"].(string)
	k.srv.API.Call(t, fid, fsk, "session.registerDriver", nil)
	n := len(k.fake.Requests())
	st := sendKeyed(t, ctx, k.srv.API, fid, fsk, "fork-1", "on the fork", nil)
	term = terminalOf(st, 2*time.Minute)
	st.Close()
	require.NotNil(t, term, "%s", k.srv.Log())
	require.Nil(t, term["error"], "%v", term["error"])
	msgs := texts(k.fake.Requests()[n].Messages())
	require.Len(t, msgs, 7)
	assert.Equal(t, "on the fork", msgs[6])
	assert.Zero(t, k.fake.StrictRefusals())
}

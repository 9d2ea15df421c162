package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/internal/testing/testlog"
)

// TestIdleSessionCostsTemporalNothing: opening a session starts no
// workflow (so a burst of opens queues no workflow tasks in front of other
// sessions' turns); its first message starts it, and closing a session that
// never had a turn still runs the workflow's cleanup.
func TestIdleSessionCostsTemporalNothing(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	busy := e.open()
	_, err := e.srv.Temporal.DescribeWorkflowExecution(ctx, busy.sid, "")
	var nf *serviceerror.NotFound
	require.ErrorAs(t, err, &nf, "an open session with no turn has no workflow")

	_, term := busy.send("hello")
	require.Contains(t, term, "result", "the first message starts the workflow: %v", term)
	desc, err := e.srv.Temporal.DescribeWorkflowExecution(ctx, busy.sid, "")
	require.NoError(t, err)
	assert.Equal(t, enums.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.GetWorkflowExecutionInfo().GetStatus())

	idle := e.open()
	r := e.srv.Client(t, http.MethodDelete, "/api/v1/sessions/"+idle.sid, idle.sk, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	desc, err = e.srv.Temporal.DescribeWorkflowExecution(ctx, idle.sid, "")
	require.NoError(t, err, "closing runs the cleanup in a workflow")
	assert.Equal(t, enums.WORKFLOW_EXECUTION_STATUS_COMPLETED, desc.GetWorkflowExecutionInfo().GetStatus())
}

// idleTTL is the idle TTL of the tests below: the sweeper runs every
// quarter of it.
const idleTTL = time.Second

func idleEnv(t *testing.T, turnTimeout time.Duration) (*env, *testlog.Buffer) {
	logs := &testlog.Buffer{}
	return newEnv(t, envOpts{turnTimeout: turnTimeout, logs: logs, serverEnv: map[string]string{"BAE_SESSION_IDLE_TTL": idleTTL.String()}}), logs
}

// sweptPastTTL returns once the idle sweeper has run twice since the
// session's last event became older than the TTL: had the sweeper taken it
// for idle, it would have closed it.
func sweptPastTTL(t *testing.T, e *env, logs *testlog.Buffer, sid string) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		var old bool
		err := e.srv.Parts.Store.Pool.QueryRow(ctx, `SELECT coalesce((SELECT e.created_at FROM session_events e
			WHERE e.session_id = s.id AND e.seq = s.last_event_seq), s.created_at) < now() - $2 * interval '1 microsecond'
			FROM sessions s WHERE s.id = $1`, sid, idleTTL.Microseconds()).Scan(&old)
		return err == nil && old
	}, time.Minute, 20*time.Millisecond, "the session's last event never got older than the TTL")
	sweeps := func() int { return strings.Count(logs.String(), "idle session sweep done") }
	seen := sweeps()
	require.Eventually(t, func() bool { return sweeps() >= seen+2 }, time.Minute, 20*time.Millisecond, "the sweeper does not run")
}

func sessionState(t *testing.T, e *env, sid string) string {
	t.Helper()
	s, err := e.srv.Parts.Store.GetSession(context.Background(), sid)
	require.NoError(t, err)
	return s.State
}

// closedIdleLast waits for the sweeper to close the session once nothing
// keeps it open, and checks that its session.close (idle_timeout) is the
// log's last event.
func closedIdleLast(t *testing.T, e *env, d *driver) []map[string]any {
	t.Helper()
	require.Eventually(t, func() bool { return sessionState(t, e, d.sid) == "closed" }, time.Minute, 20*time.Millisecond,
		"an idle session with nothing in progress is closed")
	evs := d.allEvents()
	last := evs[len(evs)-1]
	assert.Equal(t, "session.close", last["event_type"], "no event after session.close: %v", types(evs))
	assert.Equal(t, map[string]any{"reason": "idle_timeout"}, payload(last))
	return evs
}

// TestIdleSweepSparesRunningAndQueuedTurns: a provider call that outlasts
// the idle TTL, with another driver's message queued behind it, keeps the
// session open while the sweeper runs; both turns answer, and only then is
// the session closed, its session.close after every turn's event.
func TestIdleSweepSparesRunningAndQueuedTurns(t *testing.T) {
	e, logs := idleEnv(t, 0)
	d := e.open()
	other := e.join(d)
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("slow answer").UntilReleased(), fakeprovider.Text("queued answer"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := d.stream(ctx, "first")
	defer first.Close()
	select {
	case <-e.fake.Started():
	case <-ctx.Done():
		t.Fatal("the provider call never started")
	}
	queued := other.stream(ctx, "second")
	defer queued.Close()
	require.Eventually(t, func() bool {
		var n int
		err := e.srv.Parts.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM turn_inputs WHERE session_id = $1`, d.sid).Scan(&n)
		return err == nil && n == 2
	}, time.Minute, 20*time.Millisecond, "the second message is stored")

	sweptPastTTL(t, e, logs, d.sid) // the provider is still held
	require.Equal(t, "open", sessionState(t, e, d.sid), "a session with a running turn is not idle")
	e.fake.Release()

	for i, s := range []*testenv.Stream{first, queued} {
		var term map[string]any
		for term == nil {
			m := s.Next(time.Minute)
			require.NotNil(t, m, "stream %d ended without an answer", i)
			if _, ok := m["id"]; ok {
				term = m
			}
		}
		require.Contains(t, term, "result", "turn %d: %v", i, term)
		assert.Equal(t, []string{"slow answer", "queued answer"}[i], firstText(message(term)))
	}
	evs := closedIdleLast(t, e, d)
	assert.Equal(t, 2, strings.Count(strings.Join(types(evs), " "), "server.message.send"))
}

// TestIdleSweepSparesPausedTurn: a turn paused for a client tool longer than
// the idle TTL (and than its turn timeout) keeps its session open; the
// owner resumes it, and then the idle session is closed.
func TestIdleSweepSparesPausedTurn(t *testing.T) {
	e, logs := idleEnv(t, idleTTL/2)
	d := e.open("get_time")
	e.fake.Lane("primary").Enqueue(fakeprovider.ToolUse("tu_1", "get_time", nil), fakeprovider.Text("It is noon."))
	_, term := d.send("What time is it?")
	require.Equal(t, "tool_use", message(term)["content"].([]any)[0].(map[string]any)["type"], "%v", term)

	sweptPastTTL(t, e, logs, d.sid) // a person is still looking for the time
	require.Equal(t, "open", sessionState(t, e, d.sid), "a session with a paused turn is not idle")

	_, term = d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_1", "content": "12:00"}})
	require.Contains(t, term, "result", "%v", term)
	assert.Equal(t, "It is noon.", firstText(message(term)))
	closedIdleLast(t, e, d)
}

// TestCloseMidTurnStoresNothingAfter: a session closed while its provider
// call runs gets no event after its session.close: the store refuses the
// turn's answer, and the turn ends at once, refused (its recorded result
// says so), without calling the provider again. (A short database budget
// makes a turn that instead waited out the refusals as an outage end
// soon too, as failed.)
func TestCloseMidTurnStoresNothingAfter(t *testing.T) {
	e := newEnv(t, envOpts{serverEnv: map[string]string{"BAE_DB_RETRY_BUDGET": "2s"}})
	d := e.open()
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("too late").UntilReleased())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := d.stream(ctx, "hello")
	defer s.Close()
	select {
	case <-e.fake.Started():
	case <-ctx.Done():
		t.Fatal("the provider call never started")
	}
	r := e.srv.Client(t, http.MethodDelete, "/api/v1/sessions/"+d.sid, d.sk, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	e.fake.Release()

	var term map[string]any
	for term == nil {
		m := s.Next(time.Minute)
		require.NotNil(t, m, "the stream ended without an answer")
		if _, ok := m["id"]; ok {
			term = m
		}
	}
	assert.Equal(t, map[string]any{"code": float64(-32000), "message": "session is closed, not open"}, term["error"], "%v", term)
	evs := d.allEvents()
	assert.Equal(t, []string{"session.open", "session.driver.register", "client.message.send", "provider.request", "session.close"}, types(evs))
	assert.Equal(t, 1, e.fake.RequestCount(), "the provider is not called again")

	var result map[string]any
	require.Eventually(t, func() bool {
		var raw []byte
		err := e.srv.Parts.Store.Pool.QueryRow(ctx, `SELECT result FROM turn_inputs WHERE session_id = $1 AND result IS NOT NULL`, d.sid).Scan(&raw)
		return err == nil && json.Unmarshal(raw, &result) == nil
	}, time.Minute, 20*time.Millisecond, "the turn's result is recorded")
	assert.Equal(t, map[string]any{"Outcome": "rejected", "Rejection": "session_not_open", "Detail": "closed"}, result)
}

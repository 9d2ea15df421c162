package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// TestTurnIDsDoNotCrossSessions is the attack of issue 35's finding 4: a
// driver of its own session A, with a key of another profile, names a turn
// of session B (turn ids reach every observer of B). Resuming deltas
// "after" B's turn on A gets what an unknown turn gets (a reset marker),
// not B's answer; session.interrupt and the admin route on A answer
// turn_not_running, publish no stop naming B's turn, and leave B's provider
// call running: B's turn ends with its whole answer from its one provider
// call.
func TestTurnIDsDoNotCrossSessions(t *testing.T) {
	e := newEnv(t, envOpts{})
	victim := e.open()
	other := e.srv.Profile(t, map[string]any{"name": "attacker", "primary_provider": "primary", "allowed_tools": []string{}})
	attacker := e.openOn(other, nil)
	attacker.register()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// B's turn streams its answer and ends; this replica keeps its deltas.
	e.fake.Lane("primary").Enqueue(fakeprovider.Text(streamedText).Streamed(12, 0))
	ds, term := untilTerminal(t, openRaw(t, ctx, e.srv, victim.sid, victim.sk, victim.request("tell me"), deltasOn))
	require.Nil(t, term["error"], "%v", term["error"])
	require.NotEmpty(t, ds)
	bTurn := ds[0]["params"].(map[string]any)["turn_id"].(string)

	sub := map[string]any{"jsonrpc": "2.0", "id": 5, "method": "session.subscribe", "params": map[string]any{}}
	resumed := openRaw(t, ctx, e.srv, attacker.sid, attacker.sk, sub, http.Header{"Bae-Deltas": {fmt.Sprintf("after=%s:0", bTurn)}})
	require.Equal(t, http.StatusOK, resumed.resp.StatusCode)
	_, m := resumed.next(20 * time.Second)
	require.NotNil(t, m, "the resumed stream wrote nothing")
	assert.Equal(t, map[string]any{"turn_id": bTurn, "type": "reset"}, m["params"], "another session's turn is resumed as an unknown turn: %v", m)

	// B's next turn holds its provider stream open mid-answer.
	e.fake.Lane("primary").Enqueue(fakeprovider.Text(streamedText).Streamed(10, 0).HangStream(4))
	send := openRaw(t, ctx, e.srv, victim.sid, victim.sk, victim.request("and again"), deltasOn)
	bTurn = textDeltas(t, send, 3)[0]["params"].(map[string]any)["turn_id"].(string)
	seq := e.fake.RequestCount()

	// A fence: A's subscribe stream ends on an unsubscribe published after
	// both interrupts, so by then this replica's listener has handled any
	// stop message they sent; the test's own listener sees every control
	// message up to it.
	fence := openRaw(t, ctx, e.srv, attacker.sid, attacker.sk, sub, nil)
	require.Equal(t, http.StatusOK, fence.resp.StatusCode)
	listener, err := pgx.Connect(ctx, e.srv.DatabaseURL)
	require.NoError(t, err)
	defer listener.Close(context.Background())
	_, err = listener.Exec(ctx, "LISTEN "+pgx.Identifier{live.ControlChannel}.Sanitize())
	require.NoError(t, err)

	msg := rpcError(t, attacker.call("session.interrupt", map[string]any{"turnId": bTurn}), -32000)
	assert.Contains(t, msg, "turn_not_running")
	r := e.srv.Admin(t, http.MethodPost, "/admin/v1/sessions/"+attacker.sid+"/interrupt", map[string]any{"turnId": bTurn})
	assert.Equal(t, http.StatusConflict, r.Status, string(r.Raw))
	assert.Equal(t, "turn_not_running", r.Body["type"])

	result(t, attacker.call("session.unsubscribe", nil))
	for {
		if l, _ := fence.next(20 * time.Second); l == nil {
			break
		}
	}
	for {
		n, err := listener.WaitForNotification(ctx)
		require.NoError(t, err)
		if n.Payload == "unsubscribe:"+attacker.sid {
			break
		}
		assert.NotContains(t, n.Payload, bTurn, "no control message names B's turn")
	}

	e.fake.Release()
	_, term = untilTerminal(t, send)
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, streamedText, firstText(message(term)), "B's answer is whole")
	end := streamEnd(t, e.fake, seq)
	assert.True(t, end.Whole, "B's provider stream was not stopped: %+v", end)
	assert.Equal(t, seq, e.fake.RequestCount(), "B's turn called its provider once")
	assert.Zero(t, stoppedAttempts(t, e.srv.Temporal, victim.sid), "no stop message reached B's call")
}

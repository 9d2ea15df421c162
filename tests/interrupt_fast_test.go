package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/workflows"
)

// endlessText is an answer far longer than any test waits for: streamed a
// word at a time it ends only when its client closes the stream.
var endlessText = strings.Repeat("and so on ", 20000)

// stoppedAttempts counts the session's provider attempts that an
// interrupt's stop message ended (their local activity failed with
// ErrAttemptStopped), as opposed to being cancelled by the workflow once
// the Interrupt update reached it.
func stoppedAttempts(t *testing.T, tc client.Client, sid string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := 0
	it := tc.GetWorkflowHistory(ctx, sid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		for f := ev.GetMarkerRecordedEventAttributes().GetFailure(); f != nil; f = f.GetCause() {
			if isStopped(f) {
				n++
				break
			}
		}
	}
	return n
}

func isStopped(f *failurepb.Failure) bool {
	return f.GetApplicationFailureInfo().GetType() == workflows.ErrAttemptStopped
}

// streamEnd waits for the fake's report of how request seq's stream ended.
func streamEnd(t *testing.T, fake *fakeprovider.Server, seq int) fakeprovider.StreamEnd {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case end := <-fake.StreamEnds():
			if end.Seq == seq {
				return end
			}
		case <-timeout:
			require.FailNow(t, "the fake's stream did not end")
		}
	}
}

// TestInterruptStopsTheProviderCall: interrupting a turn whose provider
// stream would go on for minutes closes that stream (the fake sees its
// client go away before the end of the answer) through the interrupt's
// stop message, not the workflow's cancellation that would come with the
// workflow task's heartbeat; the turn keeps what was streamed and the next
// turn's conversation is one the strict fake accepts. Both wire formats.
// Red with the fast path off (Deps.SlowInterrupt): no attempt is stopped.
func TestInterruptStopsTheProviderCall(t *testing.T) {
	for _, c := range []struct{ name, provider string }{{"anthropic", "primary"}, {"openai", "fallback"}} {
		t.Run(c.name, func(t *testing.T) {
			e, pid := interruptEnv(t, c.provider, nil)
			d := e.openOn(pid, nil)
			d.register()
			e.fake.Lane(c.provider).Enqueue(fakeprovider.Text(endlessText).Streamed(0, 5*time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			send := openRaw(t, ctx, e.srv, d.sid, d.sk, d.request("go on forever"), deltasOn)
			textDeltas(t, send, 3)
			seq := e.fake.RequestCount()

			res := result(t, d.call("session.interrupt", map[string]any{}))
			assert.Equal(t, true, res["interrupted"])
			end := streamEnd(t, e.fake, seq)
			assert.True(t, end.ClientGone, "the client closed the stream")
			assert.False(t, end.Whole, "before the end of the answer")

			_, term := untilTerminal(t, send)
			out := term["result"].(map[string]any)
			assert.Equal(t, true, out["interrupted"])
			kept := firstText(out["message"].(map[string]any))
			assert.True(t, strings.HasPrefix(endlessText, kept) && kept != "", "the streamed text is kept: %q", kept)
			evs := resultEvents(term)
			assert.Len(t, ofTypeIn(evs, "server.message.interrupted"), 1)
			assert.Empty(t, ofTypeIn(evs, "provider.response"), "no attempt after the stopped one")
			assert.Equal(t, 1, stoppedAttempts(t, e.srv.Temporal, d.sid), "the stop message ended the call")

			requireValidNextTurn(t, e, d, c.provider)
		})
	}
}

// TestInterruptFromAnotherReplica: the interrupt is served by replica B
// while the turn's provider call runs on replica A's worker (each replica
// runs the sessions it starts, on its own task queue): B's stop message
// reaches A, which stops the call.
func TestInterruptFromAnotherReplica(t *testing.T) {
	fake := fakeprovider.New(t)
	fake.Strict(true)
	a, b := startReplicaPair(t, fake.URL(), "interrupt")
	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, clientA := a.Key(t, pid)
	sid, sk := a.Open(t, clientA, nil)
	a.Call(t, sid, sk, "session.registerDriver", nil)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fake.Enqueue(fakeprovider.Text(endlessText).Streamed(0, 5*time.Millisecond))
	send := openRaw(t, ctx, a, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": "go on"}}}, deltasOn)
	textDeltas(t, send, 3)

	res := testenv.Terminal(t, b.Call(t, sid, sk, "session.interrupt", nil))
	require.Nil(t, res["error"], "%v", res["error"])
	assert.Equal(t, true, res["result"].(map[string]any)["interrupted"])
	end := streamEnd(t, fake, 1)
	assert.True(t, end.ClientGone && !end.Whole, "A's provider stream was closed before its end: %+v", end)
	_, term := untilTerminal(t, send)
	assert.Equal(t, true, term["result"].(map[string]any)["interrupted"])
	assert.Equal(t, 1, stoppedAttempts(t, a.Temporal, sid), "B's stop message ended A's call")

	fake.Enqueue(fakeprovider.Text("next"))
	next := testenv.Terminal(t, b.Call(t, sid, sk, "session.sendMessage", map[string]any{"message": map[string]any{"content": "and now"}}))
	require.Nil(t, next["error"], "%v", next["error"])
	assert.Equal(t, "next", firstText(message(next)))
	assert.Zero(t, fake.StrictRefusals())
}

// TestInterruptMCPToolWait: an interrupt while the turn waits for an MCP
// call (a tool that answers only when cancelled) ends the wait, closes the
// call's tool_use with an error result, and the next turn's conversation
// is one the strict fake accepts.
func TestInterruptMCPToolWait(t *testing.T) {
	e := newEnvFull(t, fakeprovider.New(t), envOpts{extraTOML: fsStdioTOML(t, "fs")}, nil)
	e.fake.Strict(true)
	pid := e.srv.Profile(t, map[string]any{"name": "mcp-interrupt", "primary_provider": "primary", "mcp_servers": []string{"fs"}, "allowed_tools": []string{}})
	d := e.openOn(pid, nil)
	d.register()
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("let me wait").WithToolUse("tu_h", "hang", nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	send := d.stream(ctx, "wait for it")
	defer send.Close()
	waitEvent(t, send, "mcp.request")

	res := result(t, d.call("session.interrupt", map[string]any{}))
	assert.Equal(t, true, res["interrupted"])
	term := testenv.Terminal(t, drain(send))
	assert.Equal(t, true, term["result"].(map[string]any)["interrupted"])
	evs := d.allEvents()
	last := evs[len(evs)-1]
	require.Equal(t, "server.message.interrupted", last["event_type"])
	assert.Equal(t, []any{"tu_h"}, payload(last)["closed_tool_use_ids"])
	results := ofTypeIn(evs, "tool.result")
	require.Len(t, results, 1)
	assert.Equal(t, true, payload(results[0])["is_error"])
	assert.Equal(t, "mcp", payload(results[0])["dispatch"])
	requireValidNextTurn(t, e, d, "primary")
}

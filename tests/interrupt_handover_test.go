package tests

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestInterruptKeepsTextOnAnotherWorker: the provider call of an
// interrupted turn is stopped on replica A, then A goes away and replica
// B (the same task queue) runs the workflow task that closes the turn.
// The turn keeps the text A had streamed, as the client saw it, not
// "[interrupted]": the stopped call stored it where B finds it. Red when
// the call keeps it only in A's memory.
func TestInterruptKeepsTextOnAnotherWorker(t *testing.T) {
	fake := fakeprovider.New(t)
	fake.Strict(true)
	ts := testenv.Temporal(t)
	db, dir := testdb.New(t), t.TempDir()
	opts := testenv.Options{
		DatabaseURL: db, Temporal: ts.GetDefaultClient(), DataDir: dir,
		ConfigTOML: testenv.PrimaryProviderTOML(fake.URL()),
		Env:        map[string]string{"BAE_TASK_QUEUE": "handover"},
	}
	// B starts once the turn runs on A, so A's worker has the workflow.
	a := testenv.Start(t, opts)
	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary", "allowed_tools": []string{}})
	_, clientA := a.Key(t, pid)
	sid, sk := a.Open(t, clientA, nil)
	a.Call(t, sid, sk, "session.registerDriver", nil)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fake.Enqueue(fakeprovider.Text(endlessText).Streamed(0, 5*time.Millisecond))
	send := openRaw(t, ctx, a, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": "go on"}}}, deltasOn)
	seen := textDeltas(t, send, 3)
	turnID := seen[0]["params"].(map[string]any)["turn_id"].(string)
	b := testenv.Start(t, opts)

	// The interrupt's first half: A's call stops and its workflow task
	// ends, waiting for the Interrupt update.
	require.NoError(t, live.Publish(ctx, a.Parts.Store.Pool, live.StopTurn(sid, turnID)))
	require.Eventually(t, func() bool { return stoppedAttempts(t, a.Temporal, sid) == 1 }, time.Minute, 50*time.Millisecond)
	saw := joinText(seen)
	// A goes away; the update's workflow task runs on B.
	a.Stop()
	res := testenv.Terminal(t, b.Call(t, sid, sk, "session.interrupt", nil))
	require.Nil(t, res["error"], "%v", res["error"])
	assert.Equal(t, true, res["result"].(map[string]any)["interrupted"])

	r := b.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events?limit=200", sk, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	var items []map[string]any
	for _, it := range r.Body["items"].([]any) {
		items = append(items, it.(map[string]any))
	}
	ints := ofTypeIn(items, "server.message.interrupted")
	require.Len(t, ints, 1)
	p := payload(ints[0])
	kept := textOf(p["content"])
	assert.Equal(t, true, p["partial"], "the streamed text is kept: %v", p)
	assert.True(t, kept != "" && strings.HasPrefix(endlessText, kept), "kept text is the answer's beginning: %q", kept)
	assert.True(t, strings.HasPrefix(kept, saw), "the kept text holds what the client saw (%d bytes): %q", len(saw), kept)

	// The conversation goes on from there, on B.
	fake.Enqueue(fakeprovider.Text("next"))
	next := testenv.Terminal(t, b.Call(t, sid, sk, "session.sendMessage", map[string]any{"message": map[string]any{"content": "and now"}}))
	require.Nil(t, next["error"], "%v", next["error"])
	assert.Equal(t, "next", firstText(message(next)))
	assert.Zero(t, fake.StrictRefusals())
}

package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/store"
)

// TestSendMessageRoundTrips: a text turn's request sends PostgreSQL two
// round trips of its own: the authentication with the budgets, then the
// message stored (under the queue caps, in one batch). Its relay reads
// the turn's events from memory, its catch-up included. A spent budget is
// refused from the first.
func TestSendMessageRoundTrips(t *testing.T) {
	e, pid := interruptEnv(t, "primary", nil)
	d := e.openOn(pid, nil)
	d.register()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Served in-process, so that what the request's own context sends is
	// counted apart from the turn's activities.
	router := api.ClientRouter(e.srv.Parts.Deps)
	send := func(text string) (map[string]any, store.DBCalls) {
		t.Helper()
		return d.sendCounted(ctx, router, text, nil)
	}
	// The session's first turn: its relay's first read is the table's.
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("one"))
	term, _ := send("first")
	require.Contains(t, term, "result", term)

	for _, text := range []string{"second", "third"} {
		e.fake.Lane("primary").Enqueue(fakeprovider.Text("answer to " + text))
		term, calls := send(text)
		require.Contains(t, term, "result", term)
		assert.Contains(t, string(mustJSON(t, term["result"])), "answer to "+text)
		assert.EqualValues(t, 2, calls.RoundTrips, "the authentication with the budgets, then the message stored")
	}

	r := e.srv.Admin(t, http.MethodPut, "/admin/v1/budgets/key/"+d.keyID, map[string]any{"unit": "tokens", "limit": 0})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	term, calls := send("refused")
	assert.Contains(t, rpcError(t, term, -32000), "quota_exceeded: the client key budget of "+d.keyID)
	assert.EqualValues(t, 1, calls.RoundTrips, "refused from the authentication's round trip")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// TestDeltasResumeOnAReplicaWithoutTheTurn: a driver streams its turn's
// deltas from replica A (which runs the turn), loses the connection, and
// resumes on replica B, which never had a stream on the session and so
// kept nothing of the turn. B is served A's kept deltas: the resumed
// stream has no reset and carries on from the last sequence seen, the
// two streams together making the whole answer. Red when B answers from
// its own buffer only (a reset).
func TestDeltasResumeOnAReplicaWithoutTheTurn(t *testing.T) {
	fake := fakeprovider.New(t)
	a, b := startReplicaPair(t, fake.URL(), "resume")
	pid := a.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	_, clientA := a.Key(t, pid)
	sid, sk := a.Open(t, clientA, nil)
	a.Call(t, sid, sk, "session.registerDriver", nil)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fake.Enqueue(fakeprovider.Text(streamedText).Streamed(10, 0).HangStream(4))
	send := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": "hi"}}}
	hdr := http.Header{"Bae-Deltas": {"on"}, "Idempotency-Key": {"resume-1"}}
	first := openRaw(t, ctx, a, sid, sk, send, hdr)
	seen := textDeltas(t, first, 4)
	last := seen[len(seen)-1]["params"].(map[string]any)
	turnID, lastSeq := last["turn_id"].(string), last["seq"].(float64)
	first.resp.Body.Close()

	// The resend of the same message resumes on B.
	resumed := openRaw(t, ctx, b, sid, sk, send, http.Header{
		"Bae-Deltas": {fmt.Sprintf("after=%s:%d", turnID, int64(lastSeq))}, "Idempotency-Key": {"resume-1"},
	})
	require.Equal(t, 200, resumed.resp.StatusCode)
	fake.Release()
	var rest []map[string]any
	for {
		_, m := resumed.next(20 * time.Second)
		require.NotNil(t, m, "resumed stream, have %v", rest)
		if _, ok := m["id"]; ok {
			require.Nil(t, m["error"], "%v", m["error"])
			break
		}
		if !isDelta(m) {
			continue
		}
		p := m["params"].(map[string]any)
		require.NotEqual(t, "reset", p["type"], "B serves the turn's kept deltas instead of a reset")
		assert.Greater(t, p["seq"].(float64), lastSeq, "nothing seen before is sent again")
		rest = append(rest, m)
	}
	assert.Equal(t, streamedText, joinText(append(seen, rest...)), "the first stream's deltas and the resumed one's make the whole answer")
}

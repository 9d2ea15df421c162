package baectl

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

func TestRewindCommand(t *testing.T) {
	fake := fakeprovider.New(t)
	s := testenv.Start(t, testenv.Options{ConfigTOML: fmt.Sprintf(`
[[providers.entries]]
name = "main"
provider = "anthropic"
model = "m"
auth_token = "t"
base_url = %q
`, fake.URL())})
	c := newCLI(t, s)
	pid := s.Profile(t, map[string]any{"name": "rewinds", "primary_provider": "main"})
	_, key := s.Key(t, pid)
	sid, sk := s.Open(t, key, map[string]any{})
	s.Call(t, sid, sk, "session.registerDriver", nil)
	for i, m := range []string{"one", "two"} {
		term := testenv.Terminal(t, s.RPC(t, sid, sk, map[string]any{"jsonrpc": "2.0", "id": i, "method": "session.sendMessage",
			"params": map[string]any{"message": map[string]any{"role": "user", "content": m}}}))
		require.Nil(t, term["error"], "%v", term["error"])
	}
	rows, err := s.Parts.Store.Pool.Query(context.Background(), `SELECT turn_id FROM session_events
		WHERE session_id = $1 AND turn_id IS NOT NULL GROUP BY turn_id ORDER BY min(seq)`, sid)
	require.NoError(t, err)
	turns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, turns, 2)

	r := c.run("rewind", "session", sid)
	assert.NotEqual(t, ExitOK, r.code, "a point is required")
	r = c.ok("rewind", "session", sid, "--turn", turns[1])
	assert.Contains(t, r.stdout, "rewound_turns:")
	assert.Contains(t, r.stdout, turns[1])
	r = c.run("rewind", "session", sid, "--turn", turns[1])
	assert.NotEqual(t, ExitOK, r.code)
	assert.Contains(t, r.stderr, "nothing_to_rewind")
	res := okJSON[map[string]any](c, "rewind", "session", sid, "--turn", turns[0])
	assert.Equal(t, []any{turns[0]}, res["turn_ids"])
	assert.Equal(t, "operator", res["by"])
}

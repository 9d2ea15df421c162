package baectl

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestUsageAndBudgetCommands: a turn's usage shows in `get usage`; a key
// budget is set, listed, reset and deleted, and the audit lists each
// change; bad input is a usage or runtime error with the server's problem.
func TestUsageAndBudgetCommands(t *testing.T) {
	fake := fakeprovider.New(t)
	s := testenv.Start(t, testenv.Options{ConfigTOML: testenv.PrimaryProviderTOML(fake.URL()) + "price = { input = 3.0, output = 15.0 }\n"})
	c := newCLI(t, s)
	pid := s.Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
	keyID, key := s.Key(t, pid)
	sid, sk := s.Open(t, key, map[string]any{"client_version": "test"})
	s.Call(t, sid, sk, "session.registerDriver", nil)
	term := testenv.Terminal(t, s.RPC(t, sid, sk, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"content": "hello"}}}))
	require.Nil(t, term["error"], "%v", term["error"])

	groups := okJSON[[]wire.UsageGroup](c, "get", "usage", "--by", "key")
	require.Len(t, groups, 1)
	assert.Equal(t, keyID, groups[0].Key)
	assert.EqualValues(t, 1, groups[0].Calls)
	assert.Positive(t, groups[0].InputTokens)
	want := float64(groups[0].InputTokens)*3e-6 + float64(groups[0].OutputTokens)*15e-6
	assert.InDelta(t, want, groups[0].CostUSD, 1e-9, "priced at the entry's table")
	out := c.ok("get", "usage", "--by", "session").stdout
	assert.Contains(t, out, sid)
	assert.Contains(t, out, "(total)")

	set := c.ok("set", "budget", "key", keyID, "2.5", "--unit", "usd", "--period", "month").stdout
	assert.Contains(t, set, "USD 2.500000")
	assert.Contains(t, set, "month")
	list := okJSON[[]wire.Budget](c, "list", "budgets")
	require.Len(t, list, 1)
	assert.Equal(t, 2.5, list[0].Limit)
	assert.InDelta(t, want, list[0].Spent, 1e-9)
	require.NotNil(t, list[0].ResetsAt)
	c.ok("reset", "budget", "key", keyID)
	assert.Contains(t, c.ok("delete", "budget", "key", keyID).stdout, "removed the key budget of "+keyID)
	changes := okJSON[[]wire.BudgetChange](c, "list", "budget-changes", "--scope", "key")
	var actions []string
	for _, ch := range changes {
		actions = append(actions, ch.Action)
	}
	assert.Equal(t, []string{"remove", "reset", "set"}, actions)

	r := c.run("set", "budget", "key", keyID, "lots")
	assert.Equal(t, ExitUsage, r.code)
	r = c.run("set", "budget", "session", sid, "10", "--period", "day")
	assert.Equal(t, ExitRuntime, r.code)
	assert.Contains(t, r.stderr, "400 bad_request")
	assert.True(t, strings.Contains(r.stderr, "lifetime cap"), r.stderr)
	assert.Equal(t, http.StatusNotFound, s.Admin(t, http.MethodGet, "/admin/v1/budgets/key/"+keyID, nil).Status)
}

package baectl

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testenv"
)

func TestForkAndLineageCommands(t *testing.T) {
	s := testenv.Start(t, testenv.Options{ConfigTOML: serverConfig})
	c := newCLI(t, s)
	pid := s.Profile(t, map[string]any{"name": "forks", "primary_provider": "alpha-provider"})
	keyID, key := s.Key(t, pid)
	sid, _ := s.Open(t, key, map[string]any{})

	r := c.ok("get", "lineage", sid)
	assert.Contains(t, r.stdout, "has no forks and was not forked")

	forked := okJSON[map[string]any](c, "fork", "session", sid, keyID)
	fork, _ := forked["session_id"].(string)
	require.Regexp(t, idRe("ses_"), fork)
	assert.NotEmpty(t, forked["session_key"])

	r = c.ok("get", "lineage", sid)
	assert.Contains(t, r.stdout, "fork")
	assert.Contains(t, r.stdout, fork)
	lineage := okJSON[map[string]any](c, "get", "lineage", fork)
	assert.Equal(t, sid, lineage["forked_from"].(map[string]any)["session_id"])

	r = c.ok("fork", "session", sid, keyID)
	assert.Contains(t, r.stdout, "session_key:")
	assert.Contains(t, r.stdout, "forked_from:")

	r = c.run("fork", "session", sid, "key_0123456789abcdef0123456789abcdef")
	assert.NotEqual(t, ExitOK, r.code)
	assert.Contains(t, r.stderr, "not a participant")
}

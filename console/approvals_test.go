package console

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// Approving with the model's arguments, however they are spaced, is a
// plain approval; anything else is an edit, and must be a JSON object.
func TestEditedArguments(t *testing.T) {
	model := json.RawMessage(`{"repo":"acme/prod","title":"Deploy"}`)
	for _, typed := range []string{"", "  ", "{\n  \"title\": \"Deploy\",\n  \"repo\": \"acme/prod\"\n}"} {
		got, err := editedArguments(model, typed)
		require.NoError(t, err)
		assert.Nil(t, got, "%q is the model's", typed)
	}
	got, err := editedArguments(model, `{"repo":"acme/prod","title":"Deploy v2"}`)
	require.NoError(t, err)
	assert.JSONEq(t, `{"repo":"acme/prod","title":"Deploy v2"}`, string(got))
	for _, bad := range []string{`["a"]`, `null`, `{"repo":`, `"text"`} {
		_, err := editedArguments(model, bad)
		assert.Error(t, err, bad)
	}
}

// A card shows the call, its arguments in the edit box, the conversation
// of its turn and the one before, and CSRF-carrying forms; text from the
// model is escaped.
func TestApprovalCardRenders(t *testing.T) {
	evs := []store.Event{
		ev(1, "trn_0", events.ClientMessageSend, map[string]any{"content": "earlier"}),
		ev(2, "trn_0", events.ServerMessageSend, map[string]any{"content": "earlier answer"}),
		ev(3, "trn_a", events.ClientMessageSend, map[string]any{"content": "open the <b>deploy</b> issue"}),
		ev(4, "trn_b", events.ClientMessageSend, map[string]any{"content": "later"}),
	}
	var a approvalDoc
	require.NoError(t, json.Unmarshal([]byte(`{"id":"apr_1","session_id":"ses_1","turn_id":"trn_a","tool_call":{"id":"tu_1","kind":"mcp",
		"name":"create_issue","server":"github","arguments":{"title":"</textarea><script>x</script>"}},"deciders":"any_driver",
		"deadline":"2026-01-02T03:04:05.000Z","on_timeout":"reject","state":"pending","requested_at":"2026-01-02T02:04:05.000Z"}`), &a))
	card := approvalCard{A: a, Args: pretty(a.ToolCall.Arguments), CSRF: "tok", Turns: turnsAround(buildTranscript(evs), "trn_a")}
	card.FormArgs = card.Args
	require.Len(t, card.Turns, 2)
	assert.Equal(t, "trn_0", card.Turns[0].ID)
	pages, err := parsePages()
	require.NoError(t, err)
	html, err := (&Console{pages: pages}).pageFragment("approvals", "approval-cards", []approvalCard{card})
	require.NoError(t, err)
	assert.Contains(t, html, `data-approval="apr_1"`)
	assert.Contains(t, html, "github/create_issue")
	assert.Contains(t, html, `action="/approvals/apr_1/decision"`)
	assert.Equal(t, 2, strings.Count(html, `name="csrf" value="tok"`))
	assert.Contains(t, html, "open the &lt;b&gt;deploy&lt;/b&gt; issue")
	assert.NotContains(t, html, "<script>x", "arguments are text")
	assert.NotContains(t, html, "later", "only the turn and the one before")

	empty, err := (&Console{pages: pages}).pageFragment("approvals", "approval-cards", []approvalCard{})
	require.NoError(t, err)
	assert.Contains(t, empty, `id="no-approvals"`)
}

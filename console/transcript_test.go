package console

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/store"
)

func ev(seq int64, turn string, typ events.Type, payload any) store.Event {
	b, _ := json.Marshal(payload)
	return store.Event{Seq: seq, TurnID: turn, Type: typ, Payload: b}
}

// A summary boundary is drawn in the turn it happened in and labels the
// turns it covers; a turn is running until its answer, its failure or its
// interrupt is stored.
func TestTranscriptCompactionAndRunningTurns(t *testing.T) {
	evs := []store.Event{
		ev(1, "trn_a", events.ClientMessageSend, map[string]any{"content": "first"}),
		ev(2, "trn_a", events.ServerMessageSend, map[string]any{"content": "one"}),
		ev(3, "trn_b", events.ClientMessageSend, map[string]any{"content": "second"}),
		ev(4, "trn_b", events.SessionCompaction, events.CompactionPayload{CompactionID: "cmp_1", Layer: events.LayerSummary,
			Events: events.SeqRange{From: 1, Through: 2}, TokensBefore: 900, TokensAfter: 200, Budget: 700, Summary: "<i>sum</i>"}),
		ev(5, "trn_b", events.ServerMessageInterrupted, map[string]any{"content": []any{map[string]any{"type": "text", "text": "par"}}, "by": "operator"}),
		ev(6, "trn_c", events.ClientMessageSend, map[string]any{"content": "third"}),
	}
	items := buildTranscript(evs)
	require.Len(t, items, 3)
	a, b, c := items[0].Turn, items[1].Turn, items[2].Turn
	assert.Equal(t, "summarized", a.Compacted)
	assert.Empty(t, b.Compacted)
	require.NotNil(t, b.Entries[1].Compaction)
	assert.Equal(t, "Context compacted: earlier turns summarized", b.Entries[1].Compaction.Headline())
	assert.Equal(t, "operator", b.Entries[2].InterruptedBy)
	assert.True(t, a.Done)
	assert.True(t, b.Done && b.Interrupted)
	assert.False(t, c.Done)
	assert.Equal(t, []string{"trn_c"}, runningTurns(evs))

	var v sessionView
	v.Items, v.Session.ID, v.Session.State, v.CSRF = items, "ses_x", "open", "tok"
	pages, err := parsePages()
	require.NoError(t, err)
	con := &Console{pages: pages}
	html, err := con.fragment("transcript", v)
	require.NoError(t, err)
	assert.Contains(t, html, "&lt;i&gt;sum&lt;/i&gt;", "a summary is text")
	assert.Contains(t, html, `action="/sessions/ses_x/turns/trn_c/stop"`, "the running turn has Stop")
	assert.NotContains(t, html, "turns/trn_b/stop")
	assert.Contains(t, html, "interrupted by operator")
}

func TestDeltaJSON(t *testing.T) {
	got := deltaJSON([]live.Delta{
		{TurnID: "trn_a", Seq: 1, Type: "block_start", Block: json.RawMessage(`{"type":"text","text":""}`)},
		{TurnID: "trn_a", Seq: 2, Type: "text_delta", Text: "</script><b>hi"},
		{TurnID: "trn_a", Seq: 3, Type: "block_start", Block: json.RawMessage(`{not json`)},
		{Type: live.DeltaReset},
	})
	var out []map[string]any
	require.NoError(t, json.Unmarshal([]byte(got), &out))
	require.Len(t, out, 4)
	assert.Equal(t, map[string]any{"type": "text", "text": ""}, out[0]["block"])
	assert.Equal(t, "</script><b>hi", out[1]["text"])
	assert.NotContains(t, out[2], "block", "a block that is not JSON is dropped")
	assert.Equal(t, "reset", out[3]["type"])
	assert.NotContains(t, out[3], "turn_id")
}

// The form passes numbers on as numbers and anything else as text, for
// the admin API to judge; the default policy is sent as none.
func TestContextFormBody(t *testing.T) {
	f := contextForm{Enabled: true, KeepTurns: "6", Trigger: "0.5"}
	assert.Equal(t, map[string]any{"enabled": true, "clear_tool_results": false, "summarize": false, "summarizer_provider": "",
		"keep_turns": json.Number("6"), "trigger": json.Number("0.5")}, f.body())
	f.KeepTurns, f.Trigger = "six", ""
	b := f.body()
	assert.Equal(t, "six", b["keep_turns"])
	assert.NotContains(t, b, "trigger")
	assert.False(t, isJSONNumber("1e"))
	assert.False(t, isJSONNumber("1 2"))
	assert.True(t, isJSONNumber("-1.5e3"))

	def := newForm()
	body, ok := def.body()
	require.True(t, ok)
	assert.NotContains(t, body, "context")
	def.Ctx.KeepTurns = "5"
	body, _ = def.body()
	assert.Contains(t, body, "context")

	assert.Equal(t, "context.keep_turns", errorField("context.keep_turns: must be between 1 and 100 (invalid_context)"))
	assert.Empty(t, errorField("name: required"))
}

// TestThinkingShownCollapsed: an assistant message's thinking and
// redacted_thinking blocks are drawn as collapsed parts before its text,
// and a live thinking delta reaches the browser under "thinking".
func TestThinkingShownCollapsed(t *testing.T) {
	m := messageOf(json.RawMessage(`[{"type":"thinking","thinking":"let me see","signature":"sig"},{"type":"redacted_thinking","data":"x"},{"type":"text","text":"answer"}]`), map[string]*toolView{}, true)
	require.Len(t, m.Parts, 3)
	assert.Equal(t, part{Thinking: "let me see", HasThinking: true}, m.Parts[0])
	assert.Equal(t, part{HasThinking: true, Redacted: true}, m.Parts[1])
	assert.Equal(t, "answer", m.Parts[2].Text)
	assert.JSONEq(t, `[{"turn_id":"trn_a","iteration":0,"attempt":0,"seq":1,"type":"thinking_delta","index":0,"thinking":"hmm"}]`,
		deltaJSON([]live.Delta{{TurnID: "trn_a", Seq: 1, Type: "thinking_delta", Text: "hmm"}}))
}

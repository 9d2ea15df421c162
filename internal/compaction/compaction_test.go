package compaction

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func msg(seq int64, role, content string) Message {
	return Message{Seq: seq, Idem: "trn_x/m", Role: role, Content: json.RawMessage(content)}
}

func TestParsePolicy(t *testing.T) {
	p, err := ParsePolicy(nil)
	require.NoError(t, err)
	assert.Equal(t, DefaultPolicy(), p, "absent means the default, which is on")
	assert.True(t, p.Enabled)

	p, err = ParsePolicy(json.RawMessage(`{"enabled":false}`))
	require.NoError(t, err)
	assert.False(t, p.Enabled)
	assert.Equal(t, DefaultKeepTurns, p.KeepTurns, "absent fields keep their defaults")

	for raw, field := range map[string]string{
		`{"keep_turns":0}`:          "context.keep_turns",
		`{"keep_turns":101}`:        "context.keep_turns",
		`{"trigger":1.5}`:           "context.trigger",
		`{"trigger":0}`:             "context.trigger",
		`{"bogus":1}`:               "context.bogus",
		`{"enabled":"yes"}`:         "context.enabled",
		`{"keep_turns":null}`:       "context.keep_turns",
		`[]`:                        "context",
		`{"summarize":1}`:           "context.summarize",
		`{"summarizer_provider":3}`: "context.summarizer_provider",
	} {
		_, err := ParsePolicy(json.RawMessage(raw))
		var fe *FieldError
		require.ErrorAs(t, err, &fe, raw)
		assert.Equal(t, field, fe.Field, raw)
	}
}

func TestEstimatorCalibrates(t *testing.T) {
	var e Estimator
	assert.Greater(t, e.Tokens(4000), 4000/4, "uncalibrated, the estimate counts more tokens than a 4-byte tokenizer")
	bpt := 0.0
	for range 8 {
		bpt = Calibrate(bpt, 40_000, 10_000) // the provider counts 4 bytes a token
	}
	assert.InDelta(t, 4.0, bpt, 0.01)
	e.BytesPerToken = bpt
	est := e.Tokens(40_000)
	assert.GreaterOrEqual(t, est, 10_000, "never below the provider's count")
	assert.LessOrEqual(t, est, 11_100, "within the margin of it")
	assert.Equal(t, 2.5, Calibrate(2.5, 100, 0), "no usage reported: unchanged")
}

func TestContextWindowDefaults(t *testing.T) {
	assert.Equal(t, 200_000, ContextWindow("claude-sonnet-4-6"))
	assert.Equal(t, 128_000, ContextWindow("gpt-4o-mini"))
	assert.Equal(t, DefaultContextWindow, ContextWindow("llama-3"))
	assert.Equal(t, 256, Budget(1000, 4096), "a floor, never negative")
}

func TestKeepFromNeverSplitsPairs(t *testing.T) {
	msgs := []Message{
		msg(1, "user", `"one"`),
		msg(2, "assistant", `[{"type":"tool_use","id":"t1","name":"x","input":{}}]`),
		msg(3, "user", `[{"type":"tool_result","tool_use_id":"t1","content":"r1"}]`),
		msg(4, "assistant", `[{"type":"text","text":"ok"}]`),
		msg(5, "user", `[{"type":"text","text":"two"}]`),
		msg(6, "assistant", `[{"type":"tool_use","id":"t2","name":"x","input":{}}]`),
	}
	assert.Equal(t, 4, KeepFrom(msgs, 1), "the paused turn (tool_use last) is kept whole")
	assert.Equal(t, 0, KeepFrom(msgs, 2))
	assert.Equal(t, 0, KeepFrom(msgs, 5), "fewer turns than kept: everything")
	assert.True(t, TurnStart(msgs[4]))
	assert.False(t, TurnStart(msgs[2]), "a tool_result message continues its turn")
}

func TestRenderClearsAndSummarizes(t *testing.T) {
	msgs := []Message{
		msg(3, "user", `"three"`),
		msg(4, "assistant", `[{"type":"tool_use","id":"t1","name":"x","input":{}}]`),
		msg(5, "user", `[{"type":"tool_result","tool_use_id":"t1","content":"a very long result"}]`),
		msg(6, "user", `[{"type":"tool_result","tool_use_id":"t2","content":"kept"}]`),
	}
	assert.Equal(t, []string{"t1", "t2"}, ToolResultIDs(msgs))
	view := Render(msgs, State{ThroughSeq: 2, ClearedSeq: 5, Summary: "they said hi"})
	var out []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	require.NoError(t, json.Unmarshal(view, &out))
	require.Len(t, out, 4)
	assert.JSONEq(t, `[{"type":"text","text":"`+SummaryPrefix[:len(SummaryPrefix)-1]+`\nthey said hi"},{"type":"text","text":"three"}]`, string(out[0].Content))
	assert.Contains(t, string(out[2].Content), `"tool_use_id":"t1"`, "the pair stays")
	assert.Contains(t, string(out[2].Content), "[tool result cleared to save context: 20 bytes]")
	assert.NotContains(t, string(view), "a very long result")
	assert.Contains(t, string(out[3].Content), `"kept"`, "after ClearedSeq, verbatim")
	assert.Equal(t, []string{"t2"}, ToolResultIDs([]Message{{Seq: 5, Role: "user", Content: clearContent(msgs[2].Content)}, msgs[3]}), "a cleared result is not cleared again")
}

func TestTranscriptIsBounded(t *testing.T) {
	long := make([]byte, 5000)
	for i := range long {
		long[i] = 'a'
	}
	b, _ := json.Marshal(string(long))
	tr := Transcript("before", []Message{msg(1, "user", string(b)), msg(2, "assistant", `[{"type":"text","text":"fine"}]`)}, 100, 1000)
	assert.Contains(t, tr, "Summary so far:\nbefore")
	assert.Contains(t, tr, "[…4900 bytes omitted]")
	assert.Contains(t, tr, "assistant: fine")
	assert.Less(t, len(tr), 1300)
}

func TestKeepWithinShrinksTheVerbatimTail(t *testing.T) {
	text := func(n int) string {
		b, _ := json.Marshal(string(bytesOf('x', n)))
		return string(b)
	}
	var msgs []Message
	for i := range 6 {
		msgs = append(msgs,
			msg(int64(2*i+1), "user", text(3000)),
			msg(int64(2*i+2), "assistant", `[{"type":"text","text":"ok"}]`))
	}
	est := Estimator{BytesPerToken: 3}
	from, current := KeepFrom(msgs, 4), KeepFrom(msgs, 1)
	require.Equal(t, 4, from)
	assert.Equal(t, from, KeepWithin(msgs, from, current, 0, est, 100_000), "the policy's turns when they fit")
	two := KeepWithin(msgs, from, current, 0, est, 2500)
	assert.Equal(t, 8, two, "as many of the latest turns as fit the limit")
	assert.Equal(t, current, KeepWithin(msgs, from, current, 0, est, 10), "the current turn at least")

	p := DefaultPolicy()
	assert.Equal(t, 8000, p.TriggerTokens(10_000))
	assert.Equal(t, 5000, p.TargetTokens(10_000), "half the budget at the default trigger")
}

func bytesOf(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

package wire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func nested(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

// Each of these would be stored and forwarded to the provider, which
// rejects it: the turn fails on every provider and the session ends for
// every participant.
func TestParseSendMessageRejectsWhatTheProviderWould(t *testing.T) {
	manyBlocks := `[` + strings.Repeat(`{"type":"text","text":"a"},`, MaxContentBlocks) + `{"type":"text","text":"a"}]`
	cases := map[string]string{
		"non-block elements":        `{"message":{"content":[1,2]}}`,
		"null element":              `{"message":{"content":[null]}}`,
		"unknown block type":        `{"message":{"content":[{"type":"video","url":"x"}]}}`,
		"block without type":        `{"message":{"content":[{"text":"a"}]}}`,
		"role system":               `{"message":{"role":"system","content":"x"}}`,
		"role assistant":            `{"message":{"role":"assistant","content":"x"}}`,
		"role empty":                `{"message":{"role":"","content":"x"}}`,
		"role not a string":         `{"message":{"role":5,"content":"x"}}`,
		"deep nesting":              `{"message":{"content":[{"type":"text","text":"a","x":` + nested(9000) + `}]}}`,
		"too many blocks":           `{"message":{"content":` + manyBlocks + `}}`,
		"empty string":              `{"message":{"content":""}}`,
		"blank string":              `{"message":{"content":" \n"}}`,
		"empty array":               `{"message":{"content":[]}}`,
		"text without text":         `{"message":{"content":[{"type":"text"}]}}`,
		"text not a string":         `{"message":{"content":[{"type":"text","text":5}]}}`,
		"empty text":                `{"message":{"content":[{"type":"text","text":""}]}}`,
		"unknown field":             `{"message":{"content":[{"type":"text","text":"a","bogus":1}]}}`,
		"tool_use from the user":    `{"message":{"content":[{"type":"tool_use","id":"tu_1","name":"x","input":{}}]}}`,
		"tool_result without id":    `{"message":{"content":[{"type":"tool_result","content":"ok"}]}}`,
		"tool_result blank id":      `{"message":{"content":[{"type":"tool_result","tool_use_id":"","content":"ok"}]}}`,
		"tool_result bad content":   `{"message":{"content":[{"type":"tool_result","tool_use_id":"tu_1","content":5}]}}`,
		"tool_result nested result": `{"message":{"content":[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"tool_result","tool_use_id":"tu_2","content":"x"}]}]}}`,
		"tool_result bad is_error":  `{"message":{"content":[{"type":"tool_result","tool_use_id":"tu_1","content":"x","is_error":"yes"}]}}`,
		"oversized":                 `{"message":{"content":"` + strings.Repeat("a", MaxMessageBytes) + `"}}`,
	}
	for name, params := range cases {
		t.Run(name, func(t *testing.T) {
			stored, bad := ParseSendMessage(json.RawMessage(params))
			require.NotNil(t, bad, "accepted; would store %.200s", stored)
			assert.Equal(t, -32602, bad.Code)
			assert.True(t, strings.HasPrefix(bad.Message, "Invalid params: "), bad.Message)
			assert.Less(t, len(bad.Message), 300, "the message names the problem, not the input")
		})
	}
}

func TestParseSendMessageAcceptsTheContractShapes(t *testing.T) {
	cases := map[string]string{
		"string":            `{"message":{"role":"user","content":"What time is it?"}}`,
		"no role":           `{"message":{"content":"hi"}}`,
		"null role":         `{"message":{"role":null,"content":"hi"}}`,
		"text block":        `{"message":{"content":[{"type":"text","text":"a"}]}}`,
		"tool results":      `{"message":{"content":[{"type":"tool_result","tool_use_id":"tu_1","content":"ok"},{"type":"tool_result","tool_use_id":"tu_2","content":[{"type":"text","text":"x"}],"is_error":true}]}}`,
		"result no content": `{"message":{"content":[{"type":"tool_result","tool_use_id":"tu_1"}]}}`,
		"mixed":             `{"message":{"content":[{"type":"tool_result","tool_use_id":"tu_1","content":""},{"type":"text","text":"and more"}]}}`,
	}
	for name, params := range cases {
		t.Run(name, func(t *testing.T) {
			stored, bad := ParseSendMessage(json.RawMessage(params))
			require.Nil(t, bad)
			var in struct {
				Message struct {
					Content json.RawMessage `json:"content"`
				} `json:"message"`
			}
			require.NoError(t, json.Unmarshal([]byte(params), &in))
			var out struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			}
			require.NoError(t, json.Unmarshal(stored, &out))
			assert.Equal(t, "user", out.Role)
			assert.JSONEq(t, string(in.Message.Content), string(out.Content))
		})
	}
}

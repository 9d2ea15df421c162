package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func FuzzParseSendMessage(f *testing.F) {
	for _, s := range []string{
		`{"message":{"role":"user","content":"What time is it?"}}`,
		`{"message":{"content":"no role"}}`,
		`{"message":{"role":null,"content":"null role"}}`,
		`{"message":{"role":"","content":""}}`,
		`{"message":{"role":"assistant","content":[]}}`,
		`{"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":"ok"}]}}`,
		`{"message":{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{}}]}}`,
		`{"message":{"role":"user","content":[1,null,"x",[]]}}`,
		`{"message":{"role":"user","content":null}}`,
		`{"message":{"role":"user","content":5}}`,
		`{"message":{"role":"user","content":{"type":"text"}}}`,
		`{"message":{"role":5,"content":"x"}}`,
		`{"message":{"role":"user"}}`,
		`{"message":"just a string"}`,
		`{"message":[]}`,
		`{"message":null}`,
		`{"message":{}}`,
		`{}`,
		`{"message":{"role":"user","content":"x","extra":true},"other":1}`,
		`{"message":{"role":"us\u0000er","content":"\ud800"}}`,
		"{\"message\":{\"role\":\"\xff\",\"content\":\"\xfe\"}}",
		`{"message":{"content":"a","content":["b"]}}`,
		`{"message":{"content":[{"type":"text","text":" "}]}}`,
		`{"message":{"content":[{"type":"text","text":"a","cache_control":{}}]}}`,
		`{"message":{"content":[{"type":"tool_use","id":"tu_1","name":"x","input":{}}]}}`,
		`{"message":{"content":[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"x"}],"is_error":true}]}}`,
		`{"message":{"content":[{"type":"tool_result","tool_use_id":"tu_1","content":null,"is_error":null}]}}`,
		`{"message":{"content":[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"tool_result","tool_use_id":"x"}]}]}}`,
		`{"message":{"content":[{"type":"tool_result","tool_use_id":"","content":"x"}]}}`,
		`{"message":{"content":[{"type":"text","text":"a","x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]}}`,
		`{"message":{"content":[{"type":"text","text":"\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\"}]}}`,
		`{"message":{"content":[{"type":"text","text":"a","text":"b"}]}}`,
		`{"message":{"content":[{"type":"TEXT","text":"a"}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		// The envelope hands over only objects; anything else is not a case.
		if !IsObject(params) {
			return
		}
		stored, bad := ParseSendMessage(params)
		if bad != nil {
			assert.Equal(t, -32602, bad.Code)
			assert.Nil(t, stored)
			return
		}

		var out struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		require.NoError(t, json.Unmarshal(stored, &out), "stored %s", stored)
		assert.Equal(t, "user", out.Role)
		assert.LessOrEqual(t, Depth(stored), MaxNestingDepth)
		checkStoredContent(t, out.Content)

		var in struct {
			Message struct {
				Content json.RawMessage `json:"content"`
			} `json:"message"`
		}
		require.NoError(t, json.Unmarshal(params, &in))
		if IsJSONString(in.Message.Content) {
			assert.Equal(t, jsonValue(t, in.Message.Content), jsonValue(t, out.Content), "string content passes through unchanged")
		}

		// What is stored validates again as the same message.
		again, bad := ParseSendMessage(json.RawMessage(`{"message":` + string(stored) + `}`))
		require.Nil(t, bad)
		assert.JSONEq(t, string(stored), string(again))
	})
}

// checkStoredContent asserts the shape every stored message has: a
// non-blank string, or 1..MaxContentBlocks text and tool_result blocks with
// their required fields and nothing else.
func checkStoredContent(t *testing.T, content json.RawMessage) {
	t.Helper()
	var s string
	if json.Unmarshal(content, &s) == nil {
		assert.NotEmpty(t, strings.TrimSpace(s))
		return
	}
	var blocks []map[string]any
	require.NoError(t, json.Unmarshal(content, &blocks), "content %s", content)
	require.NotEmpty(t, blocks)
	count := 0
	text := func(b map[string]any) {
		assert.Len(t, b, 2, "text block %v", b)
		assert.Equal(t, "text", b["type"])
		txt, ok := b["text"].(string)
		assert.True(t, ok && strings.TrimSpace(txt) != "", "text %v", b)
		count++
	}
	for _, b := range blocks {
		switch b["type"] {
		case "text":
			text(b)
		case "tool_result":
			count++
			id, ok := b["tool_use_id"].(string)
			assert.True(t, ok && strings.TrimSpace(id) != "")
			for k, v := range b {
				switch k {
				case "type", "tool_use_id":
				case "is_error":
					assert.IsType(t, true, v)
				case "content":
					if inner, isArr := v.([]any); isArr {
						for _, ib := range inner {
							m, _ := ib.(map[string]any)
							text(m)
						}
					} else {
						assert.IsType(t, "", v)
					}
				default:
					t.Errorf("unexpected field %q in %v", k, b)
				}
			}
		default:
			t.Errorf("stored block of type %v", b["type"])
		}
	}
	assert.LessOrEqual(t, count, MaxContentBlocks)
}

// jsonValue decodes raw for a semantic comparison (Marshal may re-escape
// <, > and & in raw content), keeping numbers as written.
func jsonValue(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v), "decode %s", raw)
	return v
}

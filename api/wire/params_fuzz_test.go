package wire

import (
	"bytes"
	"encoding/json"
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

		var in struct {
			Message struct {
				Role    *string         `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"message"`
		}
		require.NoError(t, json.Unmarshal(params, &in))
		var out map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(stored, &out), "stored %s", stored)
		assert.Len(t, out, 2, "stored %s", stored)

		var role string
		require.NoError(t, json.Unmarshal(out["role"], &role), "role must be a string")
		if in.Message.Role == nil {
			assert.Equal(t, "user", role)
		} else {
			// Compared through JSON: both sides replace invalid UTF-8 alike.
			want, _ := json.Marshal(*in.Message.Role)
			assert.JSONEq(t, string(want), string(out["role"]))
		}

		content := out["content"]
		assert.True(t, IsJSONString(content) || IsJSONArray(content), "content %s", content)
		assert.Equal(t, jsonValue(t, in.Message.Content), jsonValue(t, content), "content passes through unchanged")

		// What is stored validates again as the same message.
		again, bad := ParseSendMessage(json.RawMessage(`{"message":` + string(stored) + `}`))
		require.Nil(t, bad)
		assert.JSONEq(t, string(stored), string(again))
	})
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

package wire

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var envelopeSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"session.registerDriver","params":{}}`,
	`{"jsonrpc":"2.0","id":"a","method":"session.sendMessage","params":{"message":{"role":"user","content":"hi"}}}`,
	`{"jsonrpc":"2.0","method":"session.subscribe"}`,
	`{"jsonrpc":"2.0","id":null,"method":"session.nope"}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":null}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":"s"}`,
	`{"jsonrpc":"2.0","method":"m","params":[1]}`,
	`{"jsonrpc":"1.0","id":7,"method":"session.subscribe"}`,
	`{"jsonrpc":2.0,"id":7,"method":"m"}`,
	`{"jsonrpc":"2.0","id":"a"}`,
	`{"jsonrpc":"2.0","id":1,"method":""}`,
	`{"jsonrpc":"2.0","id":1,"method":5}`,
	`{"jsonrpc":"2.0","id":{"x":1},"method":"m"}`,
	`{"jsonrpc":"2.0","id":[1],"method":"m"}`,
	`{"jsonrpc":"2.0","id":true,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1e400,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":{"n":1e400}}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","id":2}`,
	`{"jsonrpc":"2.0","id":-0.5e3,"method":"m\u0000\ud800"}`,
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}",
	`[{"jsonrpc":"2.0","id":1,"method":"session.registerDriver"}]`,
	`[]`,
	`[1e400]`,
	` 	[ ] `,
	`{"jsonrpc":`,
	`{} {}`,
	`42`,
	`"str"`,
	`null`,
	`true`,
	``,
	"\ufeff{}",
	"\f{}",
	"\u00a0{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}",
	" \r\n\t{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}\n",
	`{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[[[[[[[[[[{}]]]]]]]]]]}}`,
}

// envelopeMessages are the messages each envelope error code may carry.
var envelopeMessages = map[int][]string{
	-32700: {msgParseError},
	-32600: {msgBatch, msgInvalid, msgInvalidID, msgBadVersion, msgMissingMethod},
	-32602: {msgParamsObject},
}

func FuzzParseEnvelope(f *testing.F) {
	for _, s := range envelopeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		env, bad := ParseEnvelope(body)

		var decoded any
		decodeErr := json.Unmarshal(body, &decoded)
		obj, isObj := decoded.(map[string]any)
		_, isArray := decoded.([]any)

		if !json.Valid(body) {
			require.NotNil(t, bad, "invalid JSON accepted")
			assert.Equal(t, -32700, bad.Code)
			assert.Nil(t, bad.ID)
			assert.False(t, bad.Silent)
			return
		}
		if decodeErr == nil && isArray {
			require.NotNil(t, bad, "batch accepted")
			assert.Equal(t, -32600, bad.Code)
			assert.Equal(t, msgBatch, bad.Message)
			assert.False(t, bad.Silent)
			return
		}

		if bad != nil {
			require.Contains(t, envelopeMessages, bad.Code)
			assert.Contains(t, envelopeMessages[bad.Code], bad.Message)
			if bad.Silent {
				_, hasID := obj["id"]
				assert.True(t, isObj && !hasID, "only a notification goes unanswered")
			}
			if bad.ID != nil {
				assert.True(t, ValidID(bad.ID), "echoed id %s", bad.ID)
			}
			// The error response must encode, or the client gets nothing.
			_, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": bad.ID, "error": bad.Error})
			require.NoError(t, err)
			return
		}

		require.NoError(t, decodeErr)
		require.True(t, isObj, "accepted a non-object")
		assert.NotEmpty(t, env.Method)
		assert.Equal(t, obj["method"], env.Method)
		assert.Equal(t, "2.0", obj["jsonrpc"])
		var params map[string]any
		require.NoError(t, json.Unmarshal(env.Params, &params), "params %s", env.Params)
		require.NotNil(t, params, "params must be an object")
		if rawID, hasID := obj["id"]; hasID {
			require.NotNil(t, env.ID)
			assert.True(t, ValidID(env.ID))
			var got any
			require.NoError(t, json.Unmarshal(env.ID, &got))
			assert.Equal(t, rawID, got)
		} else {
			assert.Nil(t, env.ID, "a notification has no id")
		}
		_, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": env.ID, "result": nil})
		require.NoError(t, err)
	})
}

func TestParseEnvelopeCases(t *testing.T) {
	cases := []struct {
		body   string
		code   int
		msg    string
		id     string // "" for nil
		silent bool
	}{
		{body: `{"jsonrpc":`, code: -32700, msg: msgParseError},
		{body: ``, code: -32700, msg: msgParseError},
		{body: "\f{}", code: -32700, msg: msgParseError},
		{body: `{"jsonrpc":"2.0","id":1,"method":"m","params":{"n":1e400}}`, code: -32700, msg: msgParseError},
		{body: `[1e400]`, code: -32700, msg: msgParseError},
		{body: `[{"jsonrpc":"2.0","id":1,"method":"m"}]`, code: -32600, msg: msgBatch},
		{body: `42`, code: -32600, msg: msgInvalid},
		{body: `null`, code: -32600, msg: msgInvalid},
		{body: `{"jsonrpc":"2.0","id":{},"method":"m"}`, code: -32600, msg: msgInvalidID},
		{body: `{"jsonrpc":"1.0","id":7,"method":"m"}`, code: -32600, msg: msgBadVersion, id: `7`},
		{body: `{"jsonrpc":"1.0","method":"m"}`, code: -32600, msg: msgBadVersion, silent: true},
		{body: `{"jsonrpc":"2.0","id":"a"}`, code: -32600, msg: msgMissingMethod, id: `"a"`},
		{body: `{"jsonrpc":"2.0","id":null,"method":"m","params":[1]}`, code: -32602, msg: msgParamsObject, id: `null`},
		{body: `{"jsonrpc":"2.0","method":"m","params":5}`, code: -32602, msg: msgParamsObject, silent: true},
	}
	for _, c := range cases {
		t.Run(c.body, func(t *testing.T) {
			_, bad := ParseEnvelope([]byte(c.body))
			require.NotNil(t, bad)
			assert.Equal(t, c.code, bad.Code)
			assert.Equal(t, c.msg, bad.Message)
			assert.Equal(t, c.silent, bad.Silent)
			if c.id == "" {
				assert.Nil(t, bad.ID)
			} else {
				assert.Equal(t, c.id, string(bad.ID))
			}
		})
	}

	env, bad := ParseEnvelope([]byte(` {"jsonrpc":"2.0","id":"x","method":"session.subscribe","params":null} `))
	require.Nil(t, bad)
	assert.Equal(t, Envelope{ID: json.RawMessage(`"x"`), Method: "session.subscribe", Params: json.RawMessage(`{}`)}, env)
	env, bad = ParseEnvelope([]byte(`{"jsonrpc":"2.0","method":"m","params":{"a":1}}`))
	require.Nil(t, bad)
	assert.Nil(t, env.ID)
	assert.JSONEq(t, `{"a":1}`, string(env.Params))
}

package provider

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cacheRaw splices without decoding; what it makes must read as what
// cacheDecoded makes of the same history, whatever the stored JSON looks
// like.
func TestCacheRawMatchesCacheDecoded(t *testing.T) {
	histories := []string{
		`[{"role":"user","content":"hi"}]`,
		`[ { "role" : "user" , "content" : "a \"quoted\" } ] brace" } ]`,
		`[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"text","text":"x"},{"type":"tool_use","id":"t1","name":"n","input":{"a":[1,{"b":"}"}]},"dispatch":"client","caller":"c1"}]},{"role":"user","content":[ {"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r"}]} ]}]`,
		`[{"role":"user","content":[]},{"role":"assistant","content":[{}]},{"role":"user","content":[{}]}]`,
		`[{"content":"role after content","role":"user"}]`,
		`[]`,
	}
	for _, h := range histories {
		raw, ok := cacheable(true, json.RawMessage(h))
		require.True(t, ok, h)
		got := cacheRaw(raw)
		require.True(t, json.Valid(got), "%s\n→ %s", h, got)
		msgs, err := parseMessages(json.RawMessage(h))
		require.NoError(t, err)
		cacheDecoded(msgs)
		want, err := marshalJSON(msgs)
		require.NoError(t, err)
		assert.JSONEq(t, string(want), string(got), h)
	}
}

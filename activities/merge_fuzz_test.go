package activities

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mergeSeeds are (paused tool_use blocks, stashed server results, incoming
// content) triples.
var mergeSeeds = [][3]string{
	{`[{"type":"tool_use","id":"tu_1","name":"get_time","input":{}}]`, `[]`, `[{"type":"tool_result","tool_use_id":"tu_1","content":"12:00"}]`},
	{`[{"type":"tool_use","id":"a"},{"type":"tool_use","id":"b"},{"type":"tool_use","id":"c"}]`,
		`[{"type":"tool_result","tool_use_id":"b","content":"server"}]`,
		`[{"type":"tool_result","tool_use_id":"c","content":"3"},{"type":"text","text":"note"},{"type":"tool_result","tool_use_id":"a","content":"1"},{"type":"tool_result","tool_use_id":"b","content":"client copy"}]`},
	{`[{"type":"tool_use","id":"a"}]`, `[{"type":"tool_result","tool_use_id":"a"}]`, `"replacement text"`},
	{`[{"type":"tool_use","id":"a"}]`, `[]`, `""`},
	{`[{"type":"tool_use","id":"a"}]`, `[]`, `null`},
	{`[{"type":"tool_use","id":"a"}]`, `[]`, `[]`},
	{`[{"type":"tool_use","id":"a"}]`, `[]`, `[1,2]`},
	{`[{"type":"tool_use","id":"a"}]`, `[]`, `[null,{"type":"tool_result"}]`},
	{`[{"type":"tool_use","id":"a"}]`, `[]`, `{"type":"tool_result","tool_use_id":"a"}`},
	{`[{"type":"tool_use","id":"a"},{"type":"tool_use","id":"a"}]`, `[]`, `[{"type":"tool_result","tool_use_id":"a"}]`},
	{`[{"type":"tool_use","id":""},{"type":"tool_use","id":7},{"type":"tool_use"}]`, `[]`, `[]`},
	{`[{"type":"tool_use","id":"a"},{"type":"tool_use"}]`, `[]`, `[{"type":"tool_result","tool_use_id":"a"}]`},
	{`[{"type":"tool_use","id":"a"}]`, `[{"type":"tool_result","tool_use_id":"zzz"}]`, `[{"type":"tool_result","tool_use_id":"a"}]`},
	{`[{"type":"tool_use","id":"a"}]`, `[{"type":"tool_result"}]`, `"x"`},
	{`[{"type":"tool_use","id":"a"}]`, `[{"type":"tool_result","tool_use_id":"a"},{"type":"tool_result","tool_use_id":"a"}]`, `[]`},
	{`[{"type":"tool_use","id":"a"}]`, `[]`, `[{"type":"tool_result","tool_use_id":"a"},{"type":"tool_result","tool_use_id":"a"}]`},
	{`[{"type":"tool_use","id":"a"}]`, `[]`, `[{"type":"tool_result","tool_use_id":"a"},{"type":"tool_result","tool_use_id":"b"}]`},
	{`[{"type":"tool_use","id":"a"}]`, `[]`, `[{"type":"tool_result","tool_use_id":5}]`},
	{`[]`, `[]`, `"hello"`},
	{`[{"type":"tool_use","id":"a"}]`, `[]`, `[{"type":"text","text":"abandon"}]`},
	{`[{"type":"tool_use","id":"a"}]`, `[]`, `[{"type":"text","text":"t"},{"type":"tool_result","tool_use_id":"a"}]`},
}

func decodeSeedBlocks(raw []byte) ([]block, bool) {
	var b []block
	if json.Unmarshal(raw, &b) != nil {
		return nil, false
	}
	return b, true
}

// toolUseIDs are the non-empty string ids, in order, and whether any id is
// missing or repeated.
func toolUseIDs(toolUses []block) (ids []string, missing, dup bool) {
	seen := map[string]bool{}
	for _, tu := range toolUses {
		id, _ := tu["id"].(string)
		if id == "" {
			missing = true
			continue
		}
		dup = dup || seen[id]
		seen[id] = true
		ids = append(ids, id)
	}
	return ids, missing, dup
}

// serverByID indexes well-formed server results; ok is false when one lacks
// a string id, repeats one, or answers an id not in ids.
func serverByID(server []block, ids []string) (map[string]block, bool) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	out := map[string]block{}
	for _, b := range server {
		id, _ := b["tool_use_id"].(string)
		if _, dup := out[id]; id == "" || dup || !want[id] {
			return nil, false
		}
		out[id] = b
	}
	return out, true
}

// checkAnswers asserts merged answers ids exactly once each, in order, then
// carries rest; answer(i, id) is the block expected at position i.
func checkAnswers(t *testing.T, merged []block, ids []string, answer func(id string) block, rest []block) {
	t.Helper()
	require.Len(t, merged, len(ids)+len(rest))
	for i, id := range ids {
		assert.Equal(t, id, strField(merged[i], "tool_use_id"), "answer %d", i)
		assert.Equal(t, answer(id), merged[i], "answer for %q", id)
	}
	for i, b := range merged[len(ids):] {
		assert.NotEqual(t, "tool_result", blockType(b), "extra block %d is a tool_result", i)
	}
	if len(rest) == 0 {
		rest = []block{}
	}
	tail := merged[len(ids):]
	if len(tail) == 0 {
		tail = []block{}
	}
	assert.Equal(t, rest, tail)
}

func FuzzMergeToolResults(f *testing.F) {
	for _, s := range mergeSeeds {
		f.Add([]byte(s[0]), []byte(s[1]), []byte(s[2]))
	}
	f.Fuzz(func(t *testing.T, toolUsesRaw, serverRaw, client []byte) {
		toolUses, ok1 := decodeSeedBlocks(toolUsesRaw)
		server, ok2 := decodeSeedBlocks(serverRaw)
		if !ok1 || !ok2 {
			return
		}
		ids, _, dup := toolUseIDs(toolUses)
		srv, srvOK := serverByID(server, ids)

		merged, err := mergeToolResults(toolUses, server, client)
		if err != nil {
			assert.Nil(t, merged)
		} else {
			require.NotEmpty(t, ids, "merged with no tool_use ids")
			require.False(t, dup, "merged duplicate tool_use ids")
			require.True(t, srvOK, "merged with malformed server results")
			clientBlocks, _ := blocksOf(client)
			byID := map[string]block{}
			var extras []block
			for _, b := range clientBlocks {
				if blockType(b) != "tool_result" {
					extras = append(extras, b)
				} else if id := strField(b, "tool_use_id"); srv[id] == nil {
					byID[id] = b
				}
			}
			checkAnswers(t, merged, ids, func(id string) block {
				if b, ok := srv[id]; ok {
					return b // the server's own result wins
				}
				return byID[id]
			}, extras)
		}

		// Completeness: answering exactly the ids the server did not always
		// merges, whatever else the fuzzer put in the client content.
		if len(ids) == 0 || dup || !srvOK {
			return
		}
		var answers []block
		for _, id := range ids {
			if _, ok := srv[id]; !ok {
				answers = append(answers, block{"type": "tool_result", "tool_use_id": id, "content": "ok"})
			}
		}
		raw, err := json.Marshal(answers)
		require.NoError(t, err)
		merged, err = mergeToolResults(toolUses, server, raw)
		require.NoError(t, err)
		require.Len(t, merged, len(ids))
		for i, id := range ids {
			assert.Equal(t, id, strField(merged[i], "tool_use_id"))
		}
	})
}

func FuzzCancelAbandoned(f *testing.F) {
	for _, s := range mergeSeeds {
		f.Add([]byte(s[0]), []byte(s[1]), []byte(s[2]))
	}
	f.Fuzz(func(t *testing.T, toolUsesRaw, serverRaw, incoming []byte) {
		toolUses, ok1 := decodeSeedBlocks(toolUsesRaw)
		server, ok2 := decodeSeedBlocks(serverRaw)
		if !ok1 || !ok2 {
			return
		}
		ids, missing, dup := toolUseIDs(toolUses)
		srv, srvOK := serverByID(server, ids)

		var text string
		textErr := json.Unmarshal(incoming, &text)
		arr, isArr := blocksOf(incoming)
		hasToolResult := false
		for _, b := range arr {
			hasToolResult = hasToolResult || blockType(b) == "tool_result"
		}

		merged, err := cancelAbandoned(toolUses, server, incoming)
		if err != nil {
			assert.Nil(t, merged)
			// Well-formed pauses fail only on the incoming content.
			if len(ids) > 0 && !missing && !dup && srvOK && textErr == nil {
				t.Fatalf("string content rejected: %v", err)
			}
			return
		}
		require.NotEmpty(t, ids)
		require.False(t, missing || dup, "merged malformed tool_use ids")
		require.True(t, srvOK, "merged malformed server results")
		var rest []block
		switch {
		case textErr == nil:
			if text != "" {
				rest = []block{{"type": "text", "text": text}}
			}
		case isArr:
			require.False(t, hasToolResult, "kept a tool_result from the replacement message")
			rest = arr
		default:
			t.Fatalf("accepted content that is neither string nor blocks: %q", incoming)
		}
		checkAnswers(t, merged, ids, func(id string) block {
			if b, ok := srv[id]; ok {
				return b
			}
			return block{"type": "tool_result", "tool_use_id": id, "content": abandonedText, "is_error": true}
		}, rest)
	})
}

func FuzzIsVoluntaryAbandonment(f *testing.F) {
	for _, s := range mergeSeeds {
		f.Add([]byte(s[2]))
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		got := isVoluntaryAbandonment(content)
		var v any
		if json.Unmarshal(content, &v) != nil {
			assert.False(t, got, "undecodable content")
			return
		}
		want := false
		switch c := v.(type) {
		case string:
			want = c != ""
		case []any:
			want = len(c) > 0
			for _, e := range c {
				switch b := e.(type) {
				case nil:
				case map[string]any:
					if b["type"] == "tool_result" {
						want = false
					}
				default:
					want = false // not a block array
				}
			}
		}
		assert.Equal(t, want, got, "content %q", content)
	})
}

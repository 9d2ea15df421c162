package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/store"
)

// TestRepairConversation: a failed turn leaves the conversation, and so
// does every turn at the end that did not finish with a tool-free answer.
func TestRepairConversation(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	sess, _ := newSession(t, st)
	put := func(key, role, content string) {
		require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
			tx.AppendMessage(sess.ID, key, role, json.RawMessage(content))
			return nil
		}))
	}
	repair := func(turn string) []string {
		var removed []string
		require.NoError(t, st.Tx(ctx, func(tx *store.Tx) error {
			var err error
			removed, err = tx.RepairConversation(ctx, sess.ID, turn)
			return err
		}))
		return removed
	}
	roles := func() []string {
		h, err := st.History(ctx, sess.ID)
		require.NoError(t, err)
		var out []string
		for _, m := range h {
			out = append(out, m.Role)
		}
		return out
	}
	toolUse := `[{"type":"tool_use","id":"t1","name":"x","input":{}}]`

	put("turn_a/user", "user", `"hi"`)
	put("turn_a/i0/asst", "assistant", `[{"type":"text","text":"hello"}]`)
	assert.Empty(t, repair(""), "a clean conversation is left alone")

	// A turn that died after its user message.
	put("turn_b/user", "user", `"lost"`)
	assert.Equal(t, []string{"turn_b"}, repair(""))
	assert.Equal(t, []string{"user", "assistant"}, roles())

	// A turn that died between a tool_use and its results.
	put("turn_c/user", "user", `"use a tool"`)
	put("turn_c/i0/asst", "assistant", toolUse)
	assert.Equal(t, []string{"turn_c"}, repair(""))

	// A resume that failed takes the paused turn it resumed with it.
	put("turn_d/user", "user", `"pause"`)
	put("turn_d/i0/asst", "assistant", toolUse)
	put("turn_e/user", "user", `[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]`)
	put("turn_e/i0/asst", "assistant", `[{"type":"text","text":"done"}]`)
	assert.Equal(t, []string{"turn_e", "turn_d"}, repair("turn_e"))
	assert.Equal(t, []string{"user", "assistant"}, roles())
}

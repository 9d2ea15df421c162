package benchstack

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A string content is one text block; an array keeps its blocks, and only
// the text ones make the message's text.
func TestMessageText(t *testing.T) {
	assert.Equal(t, "hi", MessageText(json.RawMessage(`{"role":"user","content":"hi"}`)))
	msg := json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_use","id":"t1","name":"x"},{"type":"text","text":"b"}]}`)
	assert.Equal(t, "a\nb", MessageText(msg))
	assert.Len(t, Blocks(ContentOf(msg)), 3)
	assert.Empty(t, MessageText(json.RawMessage(`{"role":"assistant"}`)))
}

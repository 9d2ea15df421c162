package benchstack

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/bae-go/bae-go/internal/provider"
)

// Only an answered provider call and a compaction's summarizer call count,
// each with the usage it reports.
func TestEventUsage(t *testing.T) {
	for _, c := range []struct {
		name, typ, payload string
		want               provider.Usage
		ok                 bool
	}{
		{"answered", "provider.response", `{"ok":true,"provider":"anthropic","body":{"usage":{"input_tokens":3,"output_tokens":4}}}`, provider.Usage{Input: 3, Output: 4}, true},
		{"failed", "provider.response", `{"ok":false}`, provider.Usage{}, false},
		{"summarized", "session.compaction", `{"summarizer":{"input_tokens":5,"output_tokens":6}}`, provider.Usage{Input: 5, Output: 6}, true},
		{"cleared only", "session.compaction", `{"layer":"clear_tool_results"}`, provider.Usage{}, false},
		{"other event", "server.message.send", `{"ok":true}`, provider.Usage{}, false},
	} {
		u, ok := EventUsage(c.typ, json.RawMessage(c.payload))
		assert.Equal(t, c.ok, ok, c.name)
		assert.Equal(t, c.want, u, c.name)
	}
}

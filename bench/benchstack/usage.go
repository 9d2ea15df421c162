package benchstack

import (
	"encoding/json"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/provider"
)

// EventUsage is the usage one logged event accounts for: a successful
// provider.response's body usage, or a session.compaction's summarizer
// usage. ok is false when the event stands for no answered call, so a
// check can count the calls the usage_calls ledger must hold.
func EventUsage(typ string, payload json.RawMessage) (u provider.Usage, ok bool) {
	var p struct {
		OK         bool            `json:"ok"`
		Provider   string          `json:"provider"`
		Body       json.RawMessage `json:"body"`
		Summarizer *struct {
			Input  int64 `json:"input_tokens"`
			Output int64 `json:"output_tokens"`
		} `json:"summarizer"`
	}
	switch events.Type(typ) {
	case events.ProviderResponse:
		if json.Unmarshal(payload, &p) == nil && p.OK {
			return provider.UsageOf(p.Provider, p.Body), true
		}
	case events.SessionCompaction:
		if json.Unmarshal(payload, &p) == nil && p.Summarizer != nil {
			return provider.Usage{Input: p.Summarizer.Input, Output: p.Summarizer.Output}, true
		}
	}
	return provider.Usage{}, false
}

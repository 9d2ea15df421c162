// Package compaction bounds what a provider receives. The event log and the
// stored conversation stay whole; a provider request carries a view compiled
// from them: older tool results cleared to a marker (layer 1), the oldest
// turns replaced by one summary (layer 2), the last turns verbatim. This
// package holds the pure parts: the per-profile policy, the token budget and
// estimate, and the view itself. Storing, summarizing and events live in
// store/ and activities/.
package compaction

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Policy is a profile's "context" setting. The zero value is not the
// default: use DefaultPolicy or ParsePolicy.
type Policy struct {
	// Enabled turns compaction on (the default). Off, requests carry the
	// whole conversation and a refusal as too long fails the turn.
	Enabled bool `json:"enabled"`
	// KeepTurns is how many of the latest turns at most stay verbatim,
	// tool results included (1–100), when a summary is written: fewer
	// when they alone would take more than half the compaction target.
	KeepTurns int `json:"keep_turns"`
	// ClearToolResults enables layer 1: older tool results' content is
	// replaced by a short marker (the tool_use/tool_result pair stays).
	ClearToolResults bool `json:"clear_tool_results"`
	// Summarize enables layer 2: the oldest turns become one summary.
	Summarize bool `json:"summarize"`
	// SummarizerProvider names the [[providers.entries]] entry that writes
	// summaries; "" uses the session's own provider chain.
	SummarizerProvider string `json:"summarizer_provider"`
	// Trigger is the share of the budget at which a request is compacted
	// (0.1–1).
	Trigger float64 `json:"trigger"`
}

// Defaults of the policy every profile has unless it says otherwise.
const (
	DefaultKeepTurns = 4
	DefaultTrigger   = 0.8
	MaxKeepTurns     = 100
)

// TargetOfTrigger is how far a compaction goes: down to this share of the
// trigger (half the budget at the default trigger). Every compaction
// rewrites the start of the request, which a provider's prompt cache then
// writes again at full price and more, so compaction happens rarely and in
// one big step: from the trigger down to the target, leaving the next many
// turns (3/8 of the trigger: 30% of the budget by default) to append to a
// cached prefix before the trigger is passed again.
const TargetOfTrigger = 0.625

// TriggerTokens is the estimate above which a request to a provider of
// this budget is compacted.
func (p Policy) TriggerTokens(budget int) int { return int(p.Trigger * float64(budget)) }

// TargetTokens is the estimate a compaction takes a request down to.
func (p Policy) TargetTokens(budget int) int {
	return int(p.Trigger * TargetOfTrigger * float64(budget))
}

// DefaultPolicy is on, with both layers.
func DefaultPolicy() Policy {
	return Policy{Enabled: true, KeepTurns: DefaultKeepTurns, ClearToolResults: true, Summarize: true, Trigger: DefaultTrigger}
}

// FieldError is an invalid policy value; Field is its JSON path under
// "context" (e.g. "context.keep_turns").
type FieldError struct {
	Field  string
	Reason string
	// Malformed: not an object, an unknown field or a wrong type (as
	// opposed to a value out of range).
	Malformed bool
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// ParsePolicy reads a stored or submitted policy: absent fields take their
// defaults, unknown fields and out-of-range values are errors naming the
// field. Empty input (or JSON null) is the default policy.
func ParsePolicy(raw json.RawMessage) (Policy, error) {
	p := DefaultPolicy()
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return p, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return p, &FieldError{Field: "context", Reason: "must be an object", Malformed: true}
	}
	for k, v := range fields {
		var err error
		switch k {
		case "enabled":
			err = json.Unmarshal(v, &p.Enabled)
		case "keep_turns":
			err = json.Unmarshal(v, &p.KeepTurns)
		case "clear_tool_results":
			err = json.Unmarshal(v, &p.ClearToolResults)
		case "summarize":
			err = json.Unmarshal(v, &p.Summarize)
		case "summarizer_provider":
			err = json.Unmarshal(v, &p.SummarizerProvider)
		case "trigger":
			err = json.Unmarshal(v, &p.Trigger)
		default:
			return p, &FieldError{Field: "context." + k, Reason: "unknown field", Malformed: true}
		}
		if err != nil || string(v) == "null" {
			return p, &FieldError{Field: "context." + k, Reason: "has the wrong type", Malformed: true}
		}
	}
	return p, p.Validate()
}

// Validate checks the ranges.
func (p Policy) Validate() error {
	if p.KeepTurns < 1 || p.KeepTurns > MaxKeepTurns {
		return &FieldError{Field: "context.keep_turns", Reason: fmt.Sprintf("must be between 1 and %d", MaxKeepTurns)}
	}
	if p.Trigger < 0.1 || p.Trigger > 1 {
		return &FieldError{Field: "context.trigger", Reason: "must be between 0.1 and 1"}
	}
	return nil
}

// JSON is the policy's stored and wire form.
func (p Policy) JSON() json.RawMessage {
	b, _ := json.Marshal(p)
	return b
}

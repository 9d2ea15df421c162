package sdk

import "encoding/json"

// DeltasHeader asks a bae-go server for live deltas (an extension; BAE
// servers ignore it).
const DeltasHeader = "Bae-Deltas"

const deltaMethod = "session.delta"

// Delta types.
const (
	DeltaBlockStart = "block_start"      // Block holds the block's type (and a tool_use's id and name)
	DeltaText       = "text_delta"       // Text is appended to block Index
	DeltaInputJSON  = "input_json_delta" // PartialJSON is a piece of tool_use block Index's input
	DeltaSuperseded = "superseded"       // the iteration's deltas so far are void
	DeltaReset      = "reset"            // deltas were missed: rely on the turn's result
)

// Delta is one piece of a running turn's answer (a session.delta
// notification).
type Delta struct {
	TurnID      string          `json:"turn_id"`
	Iteration   int             `json:"iteration"`
	Attempt     int             `json:"attempt"`
	Seq         int64           `json:"seq"`
	Type        string          `json:"type"`
	Index       int             `json:"index"`
	Text        string          `json:"text,omitempty"`
	PartialJSON string          `json:"partial_json,omitempty"`
	Block       json.RawMessage `json:"block,omitempty"`
}

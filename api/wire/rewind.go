package wire

import (
	"encoding/json"
	"strings"
)

// RewindParams are session.rewind's params (also the admin route's body):
// exactly one of turn_id (rewind to before that turn) and before_event_id
// (rewind to before that event, or the start of its turn).
type RewindParams struct {
	TurnID        string
	BeforeEventID string
}

// ParseRewind validates session.rewind's params.
func ParseRewind(params json.RawMessage) (RewindParams, *Error) {
	var p struct {
		TurnID        *string `json:"turn_id"`
		BeforeEventID *string `json:"before_event_id"`
	}
	if len(params) == 0 || string(params) == "null" {
		return RewindParams{}, invalid("params must name turn_id or before_event_id")
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return RewindParams{}, invalid("params must be an object with turn_id or before_event_id (strings)")
	}
	if (p.TurnID == nil) == (p.BeforeEventID == nil) {
		return RewindParams{}, invalid("exactly one of turn_id and before_event_id is required")
	}
	if p.TurnID != nil {
		if !idLike(*p.TurnID, "trn_") {
			return RewindParams{}, invalid("turn_id must be a turn id (trn_...)")
		}
		return RewindParams{TurnID: *p.TurnID}, nil
	}
	if !idLike(*p.BeforeEventID, "evt_") {
		return RewindParams{}, invalid("before_event_id must be an event id (evt_...)")
	}
	return RewindParams{BeforeEventID: *p.BeforeEventID}, nil
}

// idLike reports whether s looks like an id with prefix: printable ASCII,
// bounded, so nothing odd reaches a query or a log line.
func idLike(s, prefix string) bool {
	return strings.HasPrefix(s, prefix) && len(s) > len(prefix) && len(s) <= 64 &&
		!strings.ContainsFunc(s, func(r rune) bool { return r < 0x21 || r > 0x7e })
}

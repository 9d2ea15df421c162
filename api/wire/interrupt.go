package wire

import (
	"encoding/json"
	"strings"
)

// WhenBusyHeader chooses what session.sendMessage does when a turn is
// running or queued (a bae-go extension): "enqueue" (the default, and
// BAE's only behaviour), "reject" or "interrupt".
const WhenBusyHeader = "Bae-When-Busy"

// WhenBusy is a session.sendMessage busy policy.
type WhenBusy string

// The busy policies.
const (
	BusyEnqueue   WhenBusy = "enqueue"
	BusyReject    WhenBusy = "reject"
	BusyInterrupt WhenBusy = "interrupt"
)

// ParseWhenBusy validates the WhenBusyHeader values: absent is enqueue.
func ParseWhenBusy(values []string) (WhenBusy, *Error) {
	switch len(values) {
	case 0:
		return BusyEnqueue, nil
	case 1:
	default:
		return "", invalid("more than one %s header", WhenBusyHeader)
	}
	switch p := WhenBusy(strings.TrimSpace(values[0])); p {
	case BusyEnqueue, BusyReject, BusyInterrupt:
		return p, nil
	}
	return "", invalid(`%s must be "enqueue", "reject" or "interrupt"`, WhenBusyHeader)
}

// InterruptParams are session.interrupt's params.
type InterruptParams struct {
	// TurnID, when set, limits the interrupt to that turn.
	TurnID string
}

// ParseInterrupt validates session.interrupt's params (also the admin
// route's body): {} or {"turnId": "trn_..."}.
func ParseInterrupt(params json.RawMessage) (InterruptParams, *Error) {
	var p struct {
		TurnID *json.RawMessage `json:"turnId"`
	}
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return InterruptParams{}, invalid("params must be an object")
		}
	}
	if p.TurnID == nil || string(*p.TurnID) == "null" {
		return InterruptParams{}, nil
	}
	var id string
	if err := json.Unmarshal(*p.TurnID, &id); err != nil || !strings.HasPrefix(id, "trn_") || len(id) > 64 || strings.ContainsFunc(id, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return InterruptParams{}, invalid("turnId must be a turn id (trn_...)")
	}
	return InterruptParams{TurnID: id}, nil
}

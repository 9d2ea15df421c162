package wire

import (
	"strconv"
	"strings"
)

// DeltasHeader opts a session.sendMessage or session.subscribe stream into
// live deltas (a bae-go extension): "on", or "after=<turn_id>:<seq>" to
// resume a turn's deltas after the last sequence the client saw; either
// followed by ", thinking" to get the model's thinking as it is written
// too (a separate opt-in: without it thinking blocks are left out).
const DeltasHeader = "Bae-Deltas"

// DeltasMethod is the notification that carries one delta.
const DeltasMethod = "session.delta"

// DeltaOpt is what a stream asked for in DeltasHeader.
type DeltaOpt struct {
	On bool
	// TurnID and After name a turn's last delta seen, when resuming.
	TurnID string
	After  int64
	// Thinking: thinking blocks' deltas too.
	Thinking bool
}

// ParseDeltas validates the DeltasHeader values: absent is off.
func ParseDeltas(values []string) (DeltaOpt, *Error) {
	switch len(values) {
	case 0:
		return DeltaOpt{}, nil
	case 1:
	default:
		return DeltaOpt{}, invalid("more than one %s header", DeltasHeader)
	}
	v := strings.TrimSpace(values[0])
	thinking := false
	if head, flag, ok := strings.Cut(v, ","); ok {
		if strings.TrimSpace(flag) != "thinking" {
			return DeltaOpt{}, invalid(`%s must be "on" or "after=<turn_id>:<seq>", optionally followed by ", thinking"`, DeltasHeader)
		}
		v, thinking = strings.TrimSpace(head), true
	}
	if v == "on" {
		return DeltaOpt{On: true, Thinking: thinking}, nil
	}
	rest, ok := strings.CutPrefix(v, "after=")
	turn, seq, ok2 := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(seq, 10, 64)
	if !ok || !ok2 || !strings.HasPrefix(turn, "trn_") || len(turn) > 64 || err != nil || n < 0 {
		return DeltaOpt{}, invalid(`%s must be "on" or "after=<turn_id>:<seq>"`, DeltasHeader)
	}
	return DeltaOpt{On: true, TurnID: turn, After: n, Thinking: thinking}, nil
}

package sdk

import (
	"context"
	"net/http"
)

// WhenBusyHeader chooses what session.sendMessage does while a turn is
// running or queued (a bae-go extension; other servers ignore it).
const WhenBusyHeader = "Bae-When-Busy"

// WhenBusy is a sendMessage busy policy.
type WhenBusy string

// The busy policies. The zero value sends no header: the server enqueues,
// as BAE does.
const (
	// BusyEnqueue waits for the turns ahead (the default).
	BusyEnqueue WhenBusy = "enqueue"
	// BusyReject fails at once with a *RPCError whose message starts
	// "session_busy" while a turn is running or queued.
	BusyReject WhenBusy = "reject"
	// BusyInterrupt interrupts the running turn, then sends.
	BusyInterrupt WhenBusy = "interrupt"
)

// WithWhenBusy sets the busy policy of the session's Send calls.
func WithWhenBusy(p WhenBusy) Option { return func(o *options) { o.whenBusy = p } }

const methodInterrupt = "session.interrupt"

// InterruptResult is session.interrupt's result.
type InterruptResult struct {
	// Interrupted is set when the turn was interrupted; it had ended by
	// the time the call returned.
	Interrupted bool `json:"interrupted"`
	// TurnID is the turn the interrupt reached ("" when none was running
	// or paused).
	TurnID string `json:"turnId"`
	// Outcome is the turn's outcome when it ended on its own before the
	// interrupt reached it.
	Outcome string `json:"outcome,omitempty"`
}

// Interrupt stops the session's running turn, or else its paused one (a
// bae-go extension; drivers only). With a turnID only that turn is
// interrupted, and one that is neither running nor paused fails with a
// *RPCError whose message starts "turn_not_running". The turn keeps what
// it had written, marked interrupted (EventServerMessageInterrupted); the
// Send or SendOnce running it returns that partial answer with
// TurnResult.Interrupted set.
func (s *Session) Interrupt(ctx context.Context, turnID string) (InterruptResult, error) {
	params := map[string]any{}
	if turnID != "" {
		params["turnId"] = turnID
	}
	var res InterruptResult
	err := s.call(ctx, methodInterrupt, params, &res)
	return res, err
}

// busyHeader adds the busy policy to a sendMessage request's header.
func busyHeader(h http.Header, p WhenBusy) {
	if p != "" {
		h.Set(WhenBusyHeader, string(p))
	}
}

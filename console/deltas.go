package console

import (
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/store"
)

// A running turn's answer is typed live: the session stream forwards the
// turn's deltas (the side channel every replica shares, never the log) as
// "delta" events, each a JSON array of pieces in the shape of the client
// API's session.delta notification. The browser assembles them as text
// (never markup: they are the model's untrusted output), drops what a
// "superseded" marker voids, and discards the live text when the turn's
// stored answer arrives in the transcript.

// deltaRecheck is how often, at most, deltas re-check the login.
const deltaRecheck = time.Second

// consoleDelta is one piece as the browser reads it.
type consoleDelta struct {
	TurnID    string          `json:"turn_id,omitempty"`
	Iteration int             `json:"iteration"`
	Attempt   int             `json:"attempt"`
	Seq       int64           `json:"seq"`
	Type      string          `json:"type"`
	Index     int             `json:"index"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	Block     json.RawMessage `json:"block,omitempty"`
}

// deltaJSON encodes a batch for one "delta" event.
func deltaJSON(xs []live.Delta) string {
	out := make([]consoleDelta, 0, len(xs))
	for _, x := range xs {
		d := consoleDelta{TurnID: x.TurnID, Iteration: x.Iteration, Attempt: x.Attempt, Seq: x.Seq, Type: x.Type, Index: x.Index, Text: x.Text}
		if json.Valid(x.Block) {
			d.Block = x.Block
		}
		if x.Type == provider.DeltaThinking {
			// As the client API's session.delta names it.
			d.Text, d.Thinking = "", x.Text
		}
		out = append(out, d)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "[]"
	}
	return string(b)
}

// sendDeltas writes what the subscription holds; a stream that fell
// behind gets a reset marker (without a turn: every turn), and the
// browser waits for the stored answers.
func (c *Console) sendDeltas(w io.Writer, rc *http.ResponseController, sub *live.DeltaSub) error {
	xs, lost := sub.Take()
	if lost {
		xs = append([]live.Delta{{Type: live.DeltaReset}}, xs...)
	}
	if len(xs) == 0 {
		return nil
	}
	writeSSE(w, "delta", "", deltaJSON(xs))
	return rc.Flush()
}

// endsTurn reports an event after which a turn has its stored outcome: its
// answer (final, or paused on client tools), what it kept when it was
// interrupted, or its failure.
func endsTurn(t events.Type) bool {
	return t == events.ServerMessageSend || t == events.ServerMessageInterrupted || t == events.SessionError
}

// runningTurns are the turns of evs without a stored outcome, in order.
func runningTurns(evs []store.Event) []string {
	var order []string
	done := map[string]bool{}
	for _, e := range evs {
		if e.TurnID == "" {
			continue
		}
		if _, seen := done[e.TurnID]; !seen {
			done[e.TurnID] = false
			order = append(order, e.TurnID)
		}
		if endsTurn(e.Type) {
			done[e.TurnID] = true
		}
	}
	var out []string
	for _, t := range order {
		if !done[t] {
			out = append(out, t)
		}
	}
	return out
}

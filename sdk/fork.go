package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/bae-go/bae-go/events"
)

const (
	methodFork   = "session.fork"
	methodRewind = "session.rewind"
)

// ForkPoint is where a fork starts in its source.
type ForkPoint struct {
	// SessionID is the source session.
	SessionID string `json:"session_id"`
	// EventSeq is the last inherited event's sequence number.
	EventSeq int64 `json:"event_seq"`
	// MovedToTurnStart: the event asked for was inside a turn, and the
	// fork starts before that turn.
	MovedToTurnStart bool `json:"moved_to_turn_start"`
}

type forkParams struct {
	openRequest
	AtEventID string `json:"at_event_id,omitempty"`
}

type forkResponse struct {
	openResponse
	ForkedFrom ForkPoint `json:"forked_from"`
}

// Fork asks for a new session whose conversation is this one's up to
// event atEventID ("" for the latest; a bae-go extension, drivers only)
// and returns it registered as a driver, declaring the tools of opts (the
// fork does not inherit this Session's declarations), with where it
// starts. The fork shares the source's history: it costs a few rows, and
// its first provider request is the one the source's next turn would
// send. An unknown event fails with IsInvalidParams; a profile's caps of
// open sessions with a *RPCError whose message starts "quota_exceeded".
func (s *Session) Fork(ctx context.Context, atEventID string, opts ...Option) (*Session, ForkPoint, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, ForkPoint{}, err
	}
	p := forkParams{openRequest: openRequest{ClientVersion: s.t.cfg.ClientVersion, Tools: declarations(o.tools),
		SandboxTools: o.sandboxTools, SubagentTools: o.subagentTools}, AtEventID: atEventID}
	var res forkResponse
	if err := s.call(ctx, methodFork, p, &res); err != nil {
		return nil, ForkPoint{}, err
	}
	if res.SessionID == "" || res.SessionKey == "" {
		return nil, ForkPoint{}, fmt.Errorf("bae: %s: result lacks session_id or session_key", methodFork)
	}
	f := newSession(s.t.cfg, res.SessionID, res.SessionKey, res.Profile, o)
	if err := f.RegisterDriver(ctx); err != nil {
		return nil, ForkPoint{}, err
	}
	return f, res.ForkedFrom, nil
}

// RewindPoint says where a rewind goes back to: before turn TurnID, or
// before event BeforeEventID (before its whole turn when it is inside
// one). Exactly one is set.
type RewindPoint struct {
	TurnID        string
	BeforeEventID string
}

// RewoundToolCall is a tool call a rewound turn made; what it did is not
// undone.
type RewoundToolCall = events.RewoundToolCall

// RewindPayload is the payload of EventSessionRewind.
type RewindPayload = events.RewindPayload

// RewindResult is session.rewind's result: the session.rewind event.
type RewindResult struct {
	EventID string `json:"event_id"`
	RewindPayload
}

// Rewind takes the turns after p out of the conversation the model sees
// (a bae-go extension, drivers only); the log keeps them. A running or
// paused turn is interrupted first; queued messages stay queued. Side
// effects of the rewound turns' tools (sandbox, MCP, subagents) are not
// undone: RewindResult.ToolCalls lists them. Refusals: IsNothingToRewind,
// IsRewindBeforeFork, IsInvalidParams (no such turn or event).
func (s *Session) Rewind(ctx context.Context, p RewindPoint) (RewindResult, error) {
	if (p.TurnID == "") == (p.BeforeEventID == "") {
		return RewindResult{}, fmt.Errorf("bae: Rewind needs exactly one of TurnID and BeforeEventID")
	}
	params := map[string]any{}
	if p.TurnID != "" {
		params["turn_id"] = p.TurnID
	} else {
		params["before_event_id"] = p.BeforeEventID
	}
	var res RewindResult
	err := s.call(ctx, methodRewind, params, &res)
	return res, err
}

// IsNothingToRewind reports a rewind to a point after which no turn is
// left in the conversation.
func IsNothingToRewind(err error) bool { return isAppError(err, "nothing_to_rewind") }

// IsRewindBeforeFork reports a fork's rewind into what it inherited (fork
// the source at that point instead).
func IsRewindBeforeFork(err error) bool { return isAppError(err, "rewind_before_fork") }

// IsInvalidParams reports a -32602.
func IsInvalidParams(err error) bool { return IsRPCCode(err, CodeInvalidParams) }

func isAppError(err error, slug string) bool {
	var re *RPCError
	return errors.As(err, &re) && re.Code == CodeApplicationError && strings.HasPrefix(re.Message, slug+":")
}

package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrNoTerminal is wrapped by the error of a call whose stream ended (or
// broke) before its terminal response.
var ErrNoTerminal = errors.New("stream ended without a terminal response")

// ProblemError is an RFC 7807 problem document returned by a REST endpoint
// (or by /rpc before its stream opens, e.g. a 401).
type ProblemError struct {
	// Type is the stable slug to match on, e.g. "unauthorized".
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func (e *ProblemError) Error() string {
	msg := e.Detail
	if msg == "" {
		msg = e.Title
	}
	return fmt.Sprintf("bae: %d %s: %s", e.Status, e.Type, msg)
}

// Problem types documented by the client API.
const (
	ProblemUnauthorized               = "unauthorized"
	ProblemNotFound                   = "not_found"
	ProblemToolNotAllowed             = "tool_not_allowed"
	ProblemProfileMismatch            = "profile_mismatch"
	ProblemSessionClosed              = "session_closed"
	ProblemProfileUnavailable         = "profile_unavailable"
	ProblemPrimaryProviderUnavailable = "primary_provider_unavailable"
	ProblemInvalidSubagentTools       = "invalid_subagent_tools"
	ProblemInternal                   = "internal"
)

// RPCError is a JSON-RPC error object delivered inside an /rpc stream.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message)
}

// JSON-RPC error codes used by the /rpc endpoint.
const (
	CodeParseError             = -32700
	CodeInvalidRequest         = -32600
	CodeMethodNotFound         = -32601
	CodeInvalidParams          = -32602
	CodeInternalError          = -32603
	CodeApplicationError       = -32000 // session not open, lagged, …
	CodeDriverNotRegistered    = -32001
	CodeSandboxImageNotAllowed = -32011
	CodeSandboxStartFailed     = -32012
	CodeSandboxNotRunning      = -32013
	CodeSubagentNotFound       = -32014
	CodeToolNotAllowed         = -32015
)

// ProvidersFailedError reports a turn in which the primary provider and
// every fallback failed. The server still answered with a terminal result
// (a generic assistant turn, carried here) and moved the session to the
// error state.
type ProvidersFailedError struct {
	Message *Message
	Events  []Event
}

func (e *ProvidersFailedError) Error() string {
	return "bae: all providers failed; the session is now in the error state"
}

// HookError wraps an error returned by a hook, which aborted Send.
type HookError struct {
	Hook string // "BeforeSend", "AfterReceive", …
	Err  error
}

func (e *HookError) Error() string { return fmt.Sprintf("bae: hook %s: %v", e.Hook, e.Err) }
func (e *HookError) Unwrap() error { return e.Err }

// IsRPCCode reports whether err carries a JSON-RPC error with code.
func IsRPCCode(err error, code int) bool {
	var re *RPCError
	return errors.As(err, &re) && re.Code == code
}

// IsProblem reports whether err carries an RFC 7807 problem of type typ.
func IsProblem(err error, typ string) bool {
	var pe *ProblemError
	return errors.As(err, &pe) && pe.Type == typ
}

// IsDriverNotRegistered reports a -32001: session.registerDriver was never
// called for this client key (Connect and Join always call it).
func IsDriverNotRegistered(err error) bool { return IsRPCCode(err, CodeDriverNotRegistered) }

// IsUnauthorized reports a bad, missing or revoked key.
func IsUnauthorized(err error) bool { return IsProblem(err, ProblemUnauthorized) }

// IsNotFound reports an unknown session.
func IsNotFound(err error) bool { return IsProblem(err, ProblemNotFound) }

// IsProfileMismatch reports a Join with a key of another profile.
func IsProfileMismatch(err error) bool { return IsProblem(err, ProblemProfileMismatch) }

// IsToolNotAllowed reports a declared tool missing from the profile's
// allowed_tools, at open/join (403) or at updateClientTools (-32015).
func IsToolNotAllowed(err error) bool {
	return IsProblem(err, ProblemToolNotAllowed) || IsRPCCode(err, CodeToolNotAllowed)
}

// IsSessionClosed reports a session that is no longer open: a 409 from a
// REST endpoint, or the -32000 "not open" error from /rpc.
func IsSessionClosed(err error) bool {
	if IsProblem(err, ProblemSessionClosed) {
		return true
	}
	var re *RPCError
	return errors.As(err, &re) && re.Code == CodeApplicationError && strings.Contains(re.Message, "not open")
}

// IsSandboxImageNotAllowed reports an image outside the profile's
// available_sandboxes.
func IsSandboxImageNotAllowed(err error) bool { return IsRPCCode(err, CodeSandboxImageNotAllowed) }

// IsSandboxNotRunning reports that the session has no remote sandbox.
func IsSandboxNotRunning(err error) bool { return IsRPCCode(err, CodeSandboxNotRunning) }

// IsSubagentNotFound reports an unknown (or local, or evicted) subagent id.
func IsSubagentNotFound(err error) bool { return IsRPCCode(err, CodeSubagentNotFound) }

// isLagged matches the server's "lagged" error notification.
func isLagged(e *RPCError) bool {
	return e.Code == CodeApplicationError && strings.Contains(e.Message, "lagged")
}

package approval

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bae-go/bae-go/events"
)

// Refusal says why a decision was refused. Only api/ turns it into the
// client's JSON-RPC error or the admin API's problem.
type Refusal string

// Why a decision is refused.
const (
	RefuseNotFound         Refusal = "approval_not_found"
	RefuseNotPending       Refusal = "approval_not_pending"
	RefuseNotAllowed       Refusal = "approval_not_allowed"
	RefuseArgumentsInvalid Refusal = "approval_arguments_invalid"
)

// RefusedError is a refused decision.
type RefusedError struct {
	Refusal Refusal
	Detail  string
}

func (e *RefusedError) Error() string { return string(e.Refusal) + ": " + e.Detail }

// Refuse builds a RefusedError.
func Refuse(r Refusal, format string, args ...any) *RefusedError {
	return &RefusedError{Refusal: r, Detail: fmt.Sprintf(format, args...)}
}

// MayDecide checks a driver's decision against who the request allows.
// Operators may always decide; that is checked by the caller, which knows
// an operator from a driver by the port it came in on.
func MayDecide(deciders events.Deciders, turnDriver, clientID string, registered bool) *RefusedError {
	switch {
	case !registered:
		return Refuse(RefuseNotAllowed, "only a registered driver of the session may decide; call session.registerDriver first")
	case deciders == events.DecidersOperators:
		return Refuse(RefuseNotAllowed, "only operators may decide this approval (admin API or console)")
	case deciders == events.DecidersTurnDriver && clientID != turnDriver:
		return Refuse(RefuseNotAllowed, "only the driver whose message started the turn may decide this approval")
	}
	return nil
}

// ValidateArguments checks edited arguments against the tool's input
// schema (an empty schema allows any object).
func ValidateArguments(schema, args json.RawMessage) *RefusedError {
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return Refuse(RefuseArgumentsInvalid, "arguments must be a JSON object")
	}
	if _, ok := v.(map[string]any); !ok {
		return Refuse(RefuseArgumentsInvalid, "arguments must be a JSON object")
	}
	if t := bytes.TrimSpace(schema); len(t) == 0 || string(t) == "null" {
		return nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return Refuse(RefuseArgumentsInvalid, "the tool's input schema cannot be read: %v", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("input_schema.json", doc); err != nil {
		return Refuse(RefuseArgumentsInvalid, "the tool's input schema cannot be read: %v", err)
	}
	sch, err := c.Compile("input_schema.json")
	if err != nil {
		return Refuse(RefuseArgumentsInvalid, "the tool's input schema cannot be compiled: %v", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return Refuse(RefuseArgumentsInvalid, "arguments must be a JSON object")
	}
	if err := sch.Validate(inst); err != nil {
		return Refuse(RefuseArgumentsInvalid, "the arguments do not fit the tool's input schema: %v", err)
	}
	return nil
}

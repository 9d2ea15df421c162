// Package wire holds the pure parsing of JSON-RPC request envelopes and
// params and of list paging parameters, kept apart from the HTTP handlers so
// it can be fuzzed cheaply.
package wire

import (
	"encoding/json"
	"fmt"
)

// Error is a JSON-RPC error object.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%d: %s", e.Code, e.Message) }

// Errorf builds an *Error.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Envelope is a JSON-RPC request that passed the envelope checks.
type Envelope struct {
	ID     json.RawMessage // nil for a notification
	Method string          // never empty
	Params json.RawMessage // always a JSON object ({} when absent or null)
}

// EnvelopeError is a request the envelope checks reject.
type EnvelopeError struct {
	Error
	// ID is echoed in the error response; nil is written as null.
	ID json.RawMessage
	// Silent: the request was a notification, so nothing is written.
	Silent bool
}

// Envelope error messages, as the reference server words them.
const (
	msgParseError    = "Parse error"
	msgBatch         = "Invalid Request: batch requests are not supported"
	msgInvalid       = "Invalid Request"
	msgInvalidID     = "Invalid Request: id must be a string, number or null"
	msgBadVersion    = `Invalid Request: missing or wrong "jsonrpc" version`
	msgMissingMethod = `Invalid Request: missing "method"`
	msgParamsObject  = "Invalid params: params must be an object"
)

// ParseEnvelope checks a /rpc body: JSON, a single object (no batches),
// jsonrpc "2.0", a valid id, a non-empty method and object params. It is
// pure so it can be fuzzed.
func ParseEnvelope(body []byte) (Envelope, *EnvelopeError) {
	answer := func(id json.RawMessage, code int, msg string) *EnvelopeError {
		return &EnvelopeError{Error: Error{Code: code, Message: msg}, ID: id}
	}
	// Only JSON whitespace is skipped, as in the reference: a body with a
	// leading form feed or NBSP is not JSON. Decoding into any also rejects
	// valid JSON holding a number beyond float64 range, which the reference
	// answers as a parse error too.
	var raw any
	if err := json.Unmarshal(body, &raw); err != nil {
		return Envelope{}, answer(nil, -32700, msgParseError)
	}
	if _, isArray := raw.([]any); isArray {
		return Envelope{}, answer(nil, -32600, msgBatch)
	}
	// A bare null is not an object either (nor a notification): answered.
	var obj map[string]json.RawMessage
	if _, isObj := raw.(map[string]any); !isObj || json.Unmarshal(body, &obj) != nil {
		return Envelope{}, answer(nil, -32600, msgInvalid)
	}
	id, hasID := obj["id"]
	if hasID && !ValidID(id) {
		return Envelope{}, answer(nil, -32600, msgInvalidID)
	}
	if !hasID {
		id = nil
	}
	reject := func(code int, msg string) *EnvelopeError {
		e := answer(id, code, msg)
		e.Silent = !hasID
		return e
	}
	var version string
	if err := json.Unmarshal(obj["jsonrpc"], &version); err != nil || version != "2.0" {
		return Envelope{}, reject(-32600, msgBadVersion)
	}
	var method string
	if err := json.Unmarshal(obj["method"], &method); err != nil || method == "" {
		return Envelope{}, reject(-32600, msgMissingMethod)
	}
	params := obj["params"]
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage("{}")
	}
	if !IsObject(params) {
		return Envelope{}, reject(-32602, msgParamsObject)
	}
	return Envelope{ID: id, Method: method, Params: params}, nil
}

// ValidID reports whether id is a string, number or null.
func ValidID(id json.RawMessage) bool {
	var v any
	if json.Unmarshal(id, &v) != nil {
		return false
	}
	switch v.(type) {
	case nil, string, float64:
		return true
	}
	return false
}

// IsObject reports whether raw is a JSON object.
func IsObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

package api

import "encoding/json"

// envelope is a JSON-RPC request that passed the envelope checks.
type envelope struct {
	id     json.RawMessage // nil for a notification
	method string          // never empty
	params json.RawMessage // always a JSON object ({} when absent or null)
}

// envelopeErr is a request the envelope checks reject.
type envelopeErr struct {
	RPCError
	// id is echoed in the error response; nil is written as null.
	id json.RawMessage
	// silent: the request was a notification, so nothing is written.
	silent bool
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

// parseEnvelope checks a /rpc body: JSON, a single object (no batches),
// jsonrpc "2.0", a valid id, a non-empty method and object params. It is
// pure so it can be fuzzed.
func parseEnvelope(body []byte) (envelope, *envelopeErr) {
	answer := func(id json.RawMessage, code int, msg string) *envelopeErr {
		return &envelopeErr{RPCError: RPCError{Code: code, Message: msg}, id: id}
	}
	// Only JSON whitespace is skipped, as in the reference: a body with a
	// leading form feed or NBSP is not JSON. Decoding into any also rejects
	// valid JSON holding a number beyond float64 range, which the reference
	// answers as a parse error too.
	var raw any
	if err := json.Unmarshal(body, &raw); err != nil {
		return envelope{}, answer(nil, -32700, msgParseError)
	}
	if _, isArray := raw.([]any); isArray {
		return envelope{}, answer(nil, -32600, msgBatch)
	}
	// A bare null is not an object either (nor a notification): answered.
	var obj map[string]json.RawMessage
	if _, isObj := raw.(map[string]any); !isObj || json.Unmarshal(body, &obj) != nil {
		return envelope{}, answer(nil, -32600, msgInvalid)
	}
	id, hasID := obj["id"]
	if hasID && !validID(id) {
		return envelope{}, answer(nil, -32600, msgInvalidID)
	}
	if !hasID {
		id = nil
	}
	reject := func(code int, msg string) *envelopeErr {
		e := answer(id, code, msg)
		e.silent = !hasID
		return e
	}
	var version string
	if err := json.Unmarshal(obj["jsonrpc"], &version); err != nil || version != "2.0" {
		return envelope{}, reject(-32600, msgBadVersion)
	}
	var method string
	if err := json.Unmarshal(obj["method"], &method); err != nil || method == "" {
		return envelope{}, reject(-32600, msgMissingMethod)
	}
	params := obj["params"]
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage("{}")
	}
	if !isObject(params) {
		return envelope{}, reject(-32602, msgParamsObject)
	}
	return envelope{id: id, method: method, params: params}, nil
}

func validID(id json.RawMessage) bool {
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

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

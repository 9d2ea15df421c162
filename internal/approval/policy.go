// Package approval holds a profile's approval policy: which server-side
// tool calls wait for a person's decision, who may decide, and what the
// deadline decides. It is pure: storing requests and decisions lives in
// store/, the wait in workflows/, the wire in api/.
package approval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/bae-go/bae-go/events"
)

// Bounds and defaults of a rule's deadline.
const (
	DefaultTimeout = 24 * time.Hour
	MinTimeout     = time.Second
	MaxTimeout     = 720 * time.Hour
	// MaxRules bounds a policy's size (each call walks the rules).
	MaxRules = 100
	// MaxArgsMatch bounds one rule's argument patterns.
	MaxArgsMatch = 20
)

// Kind is the kind of server-side call a rule gates.
type Kind string

// Rule kinds, one per server-side tool dispatch (client tools are gated by
// the harness that runs them).
const (
	KindMCP         Kind = "mcp"
	KindSandboxExec Kind = "sandbox_exec"
	KindSubagent    Kind = "subagent"
)

// KindOf is the rule kind of a dispatch ("" for a client tool).
func KindOf(d events.Dispatch) Kind {
	switch d {
	case events.DispatchMCP:
		return KindMCP
	case events.DispatchSandbox:
		return KindSandboxExec
	case events.DispatchSubagent:
		return KindSubagent
	}
	return ""
}

// Rule gates the calls it matches.
type Rule struct {
	Kind Kind `json:"kind"`
	// Server (mcp only) and Tool are path.Match globs; "" matches any.
	Server string `json:"server,omitempty"`
	Tool   string `json:"tool,omitempty"`
	// ArgsMatch: top-level argument name -> glob on its string value; all
	// must match (a missing or non-string argument does not).
	ArgsMatch map[string]string `json:"args_match,omitempty"`
	Deciders  events.Deciders   `json:"deciders"`
	Timeout   Duration          `json:"timeout"`
	OnTimeout events.OnTimeout  `json:"on_timeout"`
}

// Policy is a profile's "approvals". The zero value gates nothing (BAE's
// behaviour).
type Policy struct {
	Rules []Rule `json:"rules"`
}

// Empty reports a policy that gates nothing.
func (p Policy) Empty() bool { return len(p.Rules) == 0 }

// Duration is a time.Duration written as a Go duration string ("1h").
type Duration time.Duration

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// FieldError is an invalid policy; Field is its JSON path under
// "approvals" (e.g. "approvals.rules[1].timeout").
type FieldError struct {
	Field  string
	Reason string
	// Malformed: wrong JSON shape, type or an unknown field (400), as
	// opposed to a value the policy does not allow (422).
	Malformed bool
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Parse reads a submitted or stored policy. Empty input or JSON null is the
// empty policy. Defaults are filled in: deciders any_driver, timeout 24h,
// on_timeout reject.
func Parse(raw json.RawMessage) (Policy, error) {
	var p Policy
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return p, nil
	}
	var top map[string]json.RawMessage
	if t[0] != '{' || json.Unmarshal(t, &top) != nil {
		return p, &FieldError{Field: "approvals", Reason: "must be an object", Malformed: true}
	}
	for k := range top {
		if k != "rules" {
			return p, &FieldError{Field: "approvals." + k, Reason: "unknown field", Malformed: true}
		}
	}
	rawRules, ok := top["rules"]
	if !ok || string(rawRules) == "null" {
		return p, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(rawRules, &items); err != nil {
		return p, &FieldError{Field: "approvals.rules", Reason: "must be an array of objects", Malformed: true}
	}
	if len(items) > MaxRules {
		return p, &FieldError{Field: "approvals.rules", Reason: fmt.Sprintf("may hold at most %d rules", MaxRules)}
	}
	for i, it := range items {
		r, err := parseRule(fmt.Sprintf("approvals.rules[%d]", i), it)
		if err != nil {
			return Policy{}, err
		}
		p.Rules = append(p.Rules, r)
	}
	return p, nil
}

func parseRule(at string, raw json.RawMessage) (Rule, error) {
	var fields map[string]json.RawMessage
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || json.Unmarshal(raw, &fields) != nil {
		return Rule{}, &FieldError{Field: at, Reason: "must be an object", Malformed: true}
	}
	r := Rule{Deciders: events.DecidersAnyDriver, Timeout: Duration(DefaultTimeout), OnTimeout: events.OnTimeoutReject}
	str := func(k string, v json.RawMessage) (string, error) {
		var s string
		if err := json.Unmarshal(v, &s); err != nil || string(v) == "null" {
			return "", &FieldError{Field: at + "." + k, Reason: "must be a string", Malformed: true}
		}
		return s, nil
	}
	kindSeen := false
	for k, v := range fields {
		var s string
		var err error
		if k != "args_match" {
			if s, err = str(k, v); err != nil {
				return Rule{}, err
			}
		}
		switch k {
		case "kind":
			r.Kind, kindSeen = Kind(s), true
		case "server":
			r.Server = s
		case "tool":
			r.Tool = s
		case "deciders":
			r.Deciders = events.Deciders(s)
		case "on_timeout":
			r.OnTimeout = events.OnTimeout(s)
		case "timeout":
			d, perr := time.ParseDuration(s)
			if perr != nil {
				return Rule{}, &FieldError{Field: at + ".timeout", Reason: fmt.Sprintf("%q is not a duration (e.g. \"30m\", \"24h\")", s)}
			}
			r.Timeout = Duration(d)
		case "args_match":
			if string(v) == "null" {
				continue
			}
			if jerr := json.Unmarshal(v, &r.ArgsMatch); jerr != nil {
				return Rule{}, &FieldError{Field: at + ".args_match", Reason: "must be an object of strings", Malformed: true}
			}
		default:
			return Rule{}, &FieldError{Field: at + "." + k, Reason: "unknown field", Malformed: true}
		}
	}
	if !kindSeen {
		return Rule{}, &FieldError{Field: at + ".kind", Reason: "is required (mcp, sandbox_exec or subagent)"}
	}
	return r, r.validate(at)
}

func (r Rule) validate(at string) error {
	bad := func(field, reason string) error { return &FieldError{Field: at + "." + field, Reason: reason} }
	switch r.Kind {
	case KindMCP, KindSandboxExec, KindSubagent:
	default:
		return bad("kind", fmt.Sprintf("%q is not one of mcp, sandbox_exec, subagent", r.Kind))
	}
	if r.Server != "" && r.Kind != KindMCP {
		return bad("server", "applies to kind mcp only")
	}
	for field, pat := range map[string]string{"server": r.Server, "tool": r.Tool} {
		if _, err := path.Match(pat, ""); err != nil {
			return bad(field, fmt.Sprintf("%q is not a valid pattern", pat))
		}
	}
	if len(r.ArgsMatch) > MaxArgsMatch {
		return bad("args_match", fmt.Sprintf("may hold at most %d entries", MaxArgsMatch))
	}
	for name, pat := range r.ArgsMatch {
		if strings.TrimSpace(name) == "" {
			return bad("args_match", "argument names must not be blank")
		}
		if _, err := path.Match(pat, ""); err != nil {
			return bad("args_match."+name, fmt.Sprintf("%q is not a valid pattern", pat))
		}
	}
	switch r.Deciders {
	case events.DecidersAnyDriver, events.DecidersTurnDriver, events.DecidersOperators:
	default:
		return bad("deciders", fmt.Sprintf("%q is not one of any_driver, turn_driver, operators", r.Deciders))
	}
	if d := time.Duration(r.Timeout); d < MinTimeout || d > MaxTimeout {
		return bad("timeout", fmt.Sprintf("%s is outside %s..%s", d, MinTimeout, MaxTimeout))
	}
	switch r.OnTimeout {
	case events.OnTimeoutReject, events.OnTimeoutApprove:
	default:
		return bad("on_timeout", fmt.Sprintf("%q is not one of reject, approve", r.OnTimeout))
	}
	return nil
}

// JSON is the policy as stored and shown (defaults filled in); nil for the
// empty policy, stored as NULL.
func (p Policy) JSON() json.RawMessage {
	if p.Empty() {
		return nil
	}
	b, _ := json.Marshal(p)
	return b
}

// Call is what a rule is matched against.
type Call struct {
	Kind   Kind
	Server string
	Tool   string
	// Arguments is the call's input as the model gave it.
	Arguments json.RawMessage
}

// Match returns the first rule that gates the call, or nil.
func (p Policy) Match(c Call) *Rule {
	var args map[string]any
	for i := range p.Rules {
		r := &p.Rules[i]
		if r.Kind != c.Kind || !glob(r.Server, c.Server) || !glob(r.Tool, c.Tool) {
			continue
		}
		if len(r.ArgsMatch) > 0 && args == nil {
			args = map[string]any{}
			_ = json.Unmarshal(c.Arguments, &args)
		}
		if argsMatch(r.ArgsMatch, args) {
			return r
		}
	}
	return nil
}

func glob(pattern, s string) bool {
	if pattern == "" {
		return true
	}
	ok, _ := path.Match(pattern, s)
	return ok
}

func argsMatch(m map[string]string, args map[string]any) bool {
	for name, pat := range m {
		v, ok := args[name].(string)
		if !ok || !glob(pat, v) {
			return false
		}
	}
	return true
}

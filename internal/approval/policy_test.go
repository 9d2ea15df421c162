package approval_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/approval"
)

func parse(t *testing.T, raw string) approval.Policy {
	t.Helper()
	p, err := approval.Parse(json.RawMessage(raw))
	require.NoError(t, err)
	return p
}

// TestMatchFirstRuleByKindNameServerAndArguments: each server-side kind is
// matched by its own rules, globs on server and tool, every args_match
// entry on a string argument; the first matching rule wins.
func TestMatchFirstRuleByKindNameServerAndArguments(t *testing.T) {
	p := parse(t, `{"rules":[
		{"kind":"mcp","server":"github","tool":"create_*","args_match":{"repo":"acme/prod*"},"deciders":"operators"},
		{"kind":"mcp","tool":"create_*","timeout":"1h"},
		{"kind":"sandbox_exec","args_match":{"command":"rm *"},"on_timeout":"reject"},
		{"kind":"subagent","tool":"deploy","deciders":"turn_driver","timeout":"30m","on_timeout":"approve"}
	]}`)
	call := func(k approval.Kind, server, tool, args string) *approval.Rule {
		return p.Match(approval.Call{Kind: k, Server: server, Tool: tool, Arguments: json.RawMessage(args)})
	}
	r := call(approval.KindMCP, "github", "create_issue", `{"repo":"acme/prod-api"}`)
	require.NotNil(t, r)
	assert.Equal(t, events.DecidersOperators, r.Deciders)
	r = call(approval.KindMCP, "github", "create_issue", `{"repo":"acme/staging"}`)
	require.NotNil(t, r, "the second rule")
	assert.Equal(t, events.DecidersAnyDriver, r.Deciders)
	assert.Equal(t, approval.Duration(time.Hour), r.Timeout)
	assert.Nil(t, call(approval.KindMCP, "github", "list_issues", `{}`))

	assert.NotNil(t, call(approval.KindSandboxExec, "", "bash", `{"command":"rm -rf build"}`))
	assert.Nil(t, call(approval.KindSandboxExec, "", "bash", `{"command":"rm -rf /"}`), "path.Match: * does not cross a /")
	assert.Nil(t, call(approval.KindSandboxExec, "", "bash", `{"command":"ls"}`))
	assert.Nil(t, call(approval.KindSandboxExec, "", "bash", `{"command":["rm","x"]}`), "a non-string argument does not match")
	r = call(approval.KindSubagent, "", "deploy", `{}`)
	require.NotNil(t, r)
	assert.Equal(t, events.OnTimeoutApprove, r.OnTimeout)
	assert.Nil(t, call(approval.KindSubagent, "", "research", `{}`))
	assert.Nil(t, call("", "", "deploy", `{}`), "client tools are never held")

	assert.Equal(t, approval.KindSandboxExec, approval.KindOf(events.DispatchSandbox))
	assert.Equal(t, approval.KindSubagent, approval.KindOf(events.DispatchSubagent))
	assert.Equal(t, approval.KindMCP, approval.KindOf(events.DispatchMCP))
	assert.Equal(t, approval.Kind(""), approval.KindOf(events.DispatchClient))
}

// TestStoredPolicyParsesBack: what a policy stores (defaults filled in,
// durations as strings) reads back the same.
func TestStoredPolicyParsesBack(t *testing.T) {
	p := parse(t, `{"rules":[{"kind":"mcp","timeout":"90m"}]}`)
	again := parse(t, string(p.JSON()))
	assert.Equal(t, p, again)
	assert.JSONEq(t, `{"rules":[{"kind":"mcp","deciders":"any_driver","timeout":"1h30m0s","on_timeout":"reject"}]}`, string(p.JSON()))
	assert.True(t, parse(t, `null`).Empty())
	assert.Nil(t, parse(t, `{"rules":[]}`).JSON())
}

// TestValidateArguments: edited arguments must be an object fitting the
// tool's input schema; an absent schema takes any object.
func TestValidateArguments(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"repo":{"type":"string"}},"required":["repo"]}`)
	assert.Nil(t, approval.ValidateArguments(schema, json.RawMessage(`{"repo":"a"}`)))
	for _, bad := range []string{`{"repo":5}`, `{}`, `[]`, `"x"`} {
		r := approval.ValidateArguments(schema, json.RawMessage(bad))
		require.NotNil(t, r, bad)
		assert.Equal(t, approval.RefuseArgumentsInvalid, r.Refusal)
	}
	assert.Nil(t, approval.ValidateArguments(nil, json.RawMessage(`{"anything":1}`)))
	assert.NotNil(t, approval.ValidateArguments(nil, json.RawMessage(`[1]`)))
}

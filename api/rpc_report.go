package api

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/bae-go/bae-go/api/wire"
	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/tooldecl"
)

func (c *clientAPI) appendOne(call *rpcCall, payload events.Payload) bool {
	_, err := c.Store.AppendEvents(call.r.Context(), call.sess.ID, store.NewEvent{ClientKeyID: call.clientID, Payload: payload})
	var notOpen *store.NotOpenError
	switch {
	case errors.As(err, &notOpen):
		// Closed since this request was authenticated: only what winds a
		// closed session down is still stored.
		call.fail(NewRPCError(-32000, "session is %s, not open", notOpen.State))
		return false
	case err != nil:
		call.log.Error("append event", "type", payload.EventType(), "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
		return false
	}
	return true
}

// stringPtr turns an optionalString value into a nullable field.
func stringPtr(v any) *string {
	if s, ok := v.(string); ok {
		return &s
	}
	return nil
}

func optionalString(params map[string]any, name string) (any, bool) {
	v, present := params[name]
	if !present || v == nil {
		return nil, true
	}
	s, ok := v.(string)
	return s, ok
}

// reportLocalSandbox logs a harness's own local-sandbox lifecycle report.
func (c *clientAPI) reportLocalSandbox(call *rpcCall) {
	if _, ok := c.requireDriver(call); !ok {
		return
	}
	var params map[string]any
	_ = json.Unmarshal(call.params, &params)
	types := map[string]events.Type{"running": events.SessionSandboxRunning, "stopped": events.SessionSandboxStopped, "error": events.SessionSandboxError}
	state, _ := params["state"].(string)
	typ, ok := types[state]
	if !ok {
		call.fail(NewRPCError(-32602, `Invalid params: "state" must be "running", "stopped", or "error"`))
		return
	}
	// Host (unsandboxed) execution reports a null image.
	unsandboxed := false
	if v, present := params["unsandboxed"]; present {
		b, ok := v.(bool)
		if !ok {
			call.fail(NewRPCError(-32602, `Invalid params: "unsandboxed" must be a boolean`))
			return
		}
		unsandboxed = b
	}
	var image any
	switch v := params["image"].(type) {
	case string:
		if unsandboxed {
			call.fail(NewRPCError(-32602, `Invalid params: "image" must be null when "unsandboxed" is true`))
			return
		}
		image = v
	case nil:
		if !unsandboxed {
			call.fail(NewRPCError(-32602, `Invalid params: missing "image"`))
			return
		}
	default:
		call.fail(NewRPCError(-32602, `Invalid params: "image" must be a string or null`))
		return
	}
	containerID, ok1 := optionalString(params, "container_id")
	detail, ok2 := optionalString(params, "detail")
	if !ok1 || !ok2 {
		call.fail(NewRPCError(-32602, `Invalid params: "container_id" and "detail" must be strings or null`))
		return
	}
	if c.appendOne(call, events.LocalSandbox{Kind: typ, Image: stringPtr(image), Unsandboxed: unsandboxed, ContainerID: stringPtr(containerID), Detail: stringPtr(detail)}) {
		call.result(map[string]any{"reported": true})
	}
}

// reportLocalSubagent logs a harness's own local-subagent lifecycle report.
func (c *clientAPI) reportLocalSubagent(call *rpcCall) {
	if _, ok := c.requireDriver(call); !ok {
		return
	}
	var params map[string]any
	_ = json.Unmarshal(call.params, &params)
	types := map[string]events.Type{"start": events.SubagentStart, "running": events.SubagentRunning, "completed": events.SubagentCompleted, "failed": events.SubagentFailed, "cancelled": events.SubagentCancelled}
	state, _ := params["state"].(string)
	typ, ok := types[state]
	if !ok {
		call.fail(NewRPCError(-32602, `Invalid params: "state" must be "start", "running", "completed", "failed", or "cancelled"`))
		return
	}
	req := func(n string) (string, bool) {
		s, ok := params[n].(string)
		return s, ok && strings.TrimSpace(s) != ""
	}
	sid, ok1 := req("subagent_id")
	harness, ok2 := req("harness")
	model, ok3 := req("model")
	if !ok1 || !ok2 || !ok3 {
		call.fail(NewRPCError(-32602, `Invalid params: "subagent_id", "harness", and "model" must be non-empty strings`))
		return
	}
	for _, n := range []string{"detail", "reason"} {
		if _, ok := optionalString(params, n); !ok {
			call.fail(NewRPCError(-32602, "Invalid params: %q must be a string or null", n))
			return
		}
	}
	exit := params["exit_code"]
	if exit != nil {
		f, ok := exit.(float64)
		if !ok || f != float64(int64(f)) {
			call.fail(NewRPCError(-32602, `Invalid params: "exit_code" must be an integer`))
			return
		}
		exit = int64(f)
	}
	detail, _ := optionalString(params, "detail")
	reason, _ := optionalString(params, "reason")
	payload := events.Subagent{Kind: typ, Placement: events.PlacementLocal, SubagentID: sid, Harness: harness, Model: model,
		Detail: stringPtr(detail), Reason: stringPtr(reason)}
	if n, ok := exit.(int64); ok {
		payload.ExitCode = &n
	}
	if c.appendOne(call, payload) {
		call.result(map[string]any{"reported": true})
	}
}

// updateClientTools replaces the caller's client tool declarations.
func (c *clientAPI) updateClientTools(call *rpcCall) {
	decl, ok := c.requireDriver(call)
	if !ok {
		return
	}
	if !c.requireOpen(call) {
		return
	}
	var params struct {
		Tools *json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(call.params, &params); err != nil || params.Tools == nil {
		call.fail(NewRPCError(-32602, `Invalid params: missing "tools"`))
		return
	}
	var tools []clientToolDef
	if err := json.Unmarshal(*params.Tools, &tools); err != nil || tools == nil && string(*params.Tools) != "[]" {
		call.fail(NewRPCError(-32602, "Invalid params: tools must be an array of tool definitions"))
		return
	}
	// Names must stay unique against the caller's other declarations too:
	// all of them are advertised together.
	var sandbox, subagent []wire.ToolDecl
	_ = json.Unmarshal(decl.SandboxTools, &sandbox)
	_ = json.Unmarshal(decl.SubagentTools, &subagent)
	if err := wire.CheckToolDecls(tools, sandbox, subagent); err != nil {
		call.fail(NewRPCError(-32602, "Invalid params: %s", err))
		return
	}
	profile, err := c.Store.GetProfile(call.r.Context(), call.sess.ProfileID)
	if err != nil {
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	allowed := allowedTools(profile)
	for _, t := range tools {
		if t.Name == tooldecl.StatusTool || !allowed[t.Name] {
			call.fail(NewRPCError(-32015, "tool_not_allowed: tool %q is not in the profile's allowlist", t.Name))
			return
		}
	}
	if tools == nil {
		tools = []clientToolDef{}
	}
	raw, _ := json.Marshal(tools)
	if err := c.Store.SetClientTools(call.r.Context(), call.sess.ID, call.clientID, raw); err != nil {
		call.log.Error("update client tools", "err", err)
		call.fail(NewRPCError(-32603, "Internal error"))
		return
	}
	call.result(map[string]any{"updated": true})
}

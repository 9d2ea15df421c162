package baectl

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/pflag"
)

// approvalCommands list, show and decide the server-side tool calls that
// wait for a person's yes (approvals).
func approvalCommands() []command {
	return []command{
		{path: "list approvals", setup: listApprovalsCmd,
			summary: "List approvals across sessions, pending ones by default (--state pending|decided, --session ID)."},
		{path: "get approval", args: []string{"id"}, setup: getApprovalCmd,
			summary: "Show one approval: the tool call and its arguments, who may decide, the deadline, the decision, and the conversation before it."},
		{path: "approve approval", args: []string{"id"}, setup: approveApprovalCmd,
			summary: "Approve a pending tool call, as it is or with --arguments JSON (checked against the tool's input schema)."},
		{path: "reject approval", args: []string{"id"}, setup: rejectApprovalCmd,
			summary: "Reject a pending tool call; --message is what the model receives as the tool's error result."},
	}
}

// Wire shapes of the approvals routes, decoded for human output only.
type (
	approvalCall struct {
		ID        string          `json:"id"`
		Kind      string          `json:"kind"`
		Name      string          `json:"name"`
		Server    string          `json:"server,omitempty"`
		Arguments json.RawMessage `json:"arguments"`
	}
	approvalDecider struct {
		Kind     string `json:"kind"`
		ClientID string `json:"client_id,omitempty"`
		Operator string `json:"operator,omitempty"`
	}
	approvalDecision struct {
		Arguments json.RawMessage `json:"arguments,omitempty"`
		Message   string          `json:"message,omitempty"`
		DecidedBy approvalDecider `json:"decided_by"`
		DecidedAt string          `json:"decided_at"`
	}
	approval struct {
		ID          string            `json:"id"`
		SessionID   string            `json:"session_id"`
		TurnID      string            `json:"turn_id"`
		ToolCall    approvalCall      `json:"tool_call"`
		Deciders    string            `json:"deciders"`
		Deadline    string            `json:"deadline"`
		OnTimeout   string            `json:"on_timeout"`
		State       string            `json:"state"`
		Decision    *approvalDecision `json:"decision,omitempty"`
		RequestedAt string            `json:"requested_at"`
		Context     []event           `json:"context,omitempty"`
	}
)

func approvalPath(id string) string { return "/admin/v1/approvals/" + url.PathEscape(id) }

// toolLabel names a call the way an operator reads it: server/tool for MCP.
func (c approvalCall) toolLabel() string {
	if c.Server != "" {
		return c.Server + "/" + c.Name
	}
	return c.Name
}

// String is who decided, e.g. "driver key_…", "operator alice", "deadline".
func (d approvalDecider) String() string {
	switch {
	case d.ClientID != "":
		return d.Kind + " " + d.ClientID
	case d.Operator != "":
		return d.Kind + " " + d.Operator
	}
	return d.Kind
}

func listApprovalsCmd(fs *pflag.FlagSet) runFunc {
	var lf listFlags
	lf.register(fs)
	state := fs.String("state", "pending", "`STATE`: pending, or decided (approved, rejected, expired, cancelled)")
	sessionID := fs.String("session", "", "only approvals of this session `ID`")
	return func(ctx context.Context, e *invocation, _ []string) error {
		switch *state {
		case "pending", "decided":
		default:
			return usagef("--state must be pending or decided (got %q)", *state)
		}
		q := url.Values{"state": {*state}}
		if *sessionID != "" {
			q.Set("session_id", *sessionID)
		}
		return runList(ctx, e, fs, &lf, "/admin/v1/approvals", q, func(items []json.RawMessage) error {
			as, err := decodeItems[approval](items)
			if err != nil {
				return err
			}
			if len(as) == 0 {
				fmt.Fprintf(e.stdout, "no %s approvals\n", *state)
				return nil
			}
			rows := make([][]string, 0, len(as))
			for _, a := range as {
				rows = append(rows, []string{a.ID, a.SessionID, a.State, a.ToolCall.Kind, a.ToolCall.toolLabel(),
					truncate(compactJSON(a.ToolCall.Arguments), 60), a.Deciders, a.Deadline})
			}
			return table(e.stdout, []string{"ID", "SESSION_ID", "STATE", "KIND", "TOOL", "ARGUMENTS", "DECIDERS", "DEADLINE"}, rows)
		})
	}
}

func getApprovalCmd(fs *pflag.FlagSet) runFunc { return getOneCmd(fs, approvalPath, printApproval) }

func printApproval(e *invocation, a approval) error {
	kv := [][2]string{
		{"id", a.ID}, {"session_id", a.SessionID}, {"turn_id", a.TurnID}, {"state", a.State},
		{"tool", a.ToolCall.toolLabel() + " (" + a.ToolCall.Kind + ")"}, {"tool_call_id", a.ToolCall.ID},
		{"arguments", compactJSON(a.ToolCall.Arguments)},
		{"deciders", a.Deciders}, {"deadline", a.Deadline + " (then " + a.OnTimeout + ")"}, {"requested_at", a.RequestedAt},
	}
	if d := a.Decision; d != nil {
		kv = append(kv, [2]string{"decided_by", d.DecidedBy.String()}, [2]string{"decided_at", d.DecidedAt})
		if len(d.Arguments) > 0 && string(d.Arguments) != "null" {
			kv = append(kv, [2]string{"approved_arguments", compactJSON(d.Arguments)})
		}
		if d.Message != "" {
			kv = append(kv, [2]string{"message", d.Message})
		}
	}
	if err := fields(e.stdout, "", kv); err != nil {
		return err
	}
	if len(a.Context) == 0 {
		return nil
	}
	fmt.Fprintln(e.stdout, "context:")
	rows := make([][]string, 0, len(a.Context))
	for _, ev := range a.Context {
		rows = append(rows, []string{ev.CreatedAt, string(ev.EventType), eventPayloadCell(ev, false)})
	}
	return indentedTable(e.stdout, "  ", []string{"CREATED_AT", "EVENT_TYPE", "PAYLOAD"}, rows)
}

// decide posts one decision and prints the approval as it now stands.
func decide(ctx context.Context, e *invocation, id string, body map[string]any, asJSON bool) error {
	c, err := e.admin()
	if err != nil {
		return err
	}
	var a approval
	raw, err := c.send(ctx, http.MethodPost, approvalPath(id)+"/decision", body, &a)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(e.stdout, raw)
	}
	fmt.Fprintf(e.stdout, "%s %s\n", a.State, a.ID)
	return printApproval(e, a)
}

func approveApprovalCmd(fs *pflag.FlagSet) runFunc {
	args := fs.String("arguments", "", "approve with these edited arguments, a `JSON` object (default: as the model gave them)")
	operator := fs.String("operator", "", "your `NAME`, recorded as who decided")
	asJSON := fs.Bool("json", false, "print the raw JSON response")
	return func(ctx context.Context, e *invocation, pos []string) error {
		body := map[string]any{"decision": "approve"}
		if fs.Changed("arguments") {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal([]byte(*args), &obj); err != nil || obj == nil {
				return usagef("--arguments: not a JSON object: %s", *args)
			}
			body["arguments"] = json.RawMessage(*args)
		}
		if *operator != "" {
			body["operator"] = *operator
		}
		return decide(ctx, e, pos[0], body, *asJSON)
	}
}

func rejectApprovalCmd(fs *pflag.FlagSet) runFunc {
	message := fs.String("message", "", "what the model receives as the tool's error result (required)")
	operator := fs.String("operator", "", "your `NAME`, recorded as who decided")
	asJSON := fs.Bool("json", false, "print the raw JSON response")
	return func(ctx context.Context, e *invocation, pos []string) error {
		if strings.TrimSpace(*message) == "" {
			return usagef("reject approval: --message is required: it is what the model reads instead of the tool's result")
		}
		body := map[string]any{"decision": "reject", "message": *message}
		if *operator != "" {
			body["operator"] = *operator
		}
		return decide(ctx, e, pos[0], body, *asJSON)
	}
}

package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// The session page draws the event log twice: as a chat transcript (turns
// with their messages, tool calls folded together with their results, and
// failures) and as a flat timeline of every event.

// transcriptItem is a turn or a line about the session between turns.
type transcriptItem struct {
	Turn   *turnView
	System *systemLine
}

type systemLine struct {
	Seq     int64
	Type    string
	Text    string
	Failure bool
}

type turnView struct {
	ID          string
	ClientKeyID string
	Started     time.Time
	FirstSeq    int64
	Entries     []entry
	Failed      bool
	// Done is set once the turn produced its final answer or failed.
	Done bool
	// Interrupted: a driver or an operator stopped the turn.
	Interrupted bool
	// Compacted says what a later compaction did to this turn in the view
	// providers receive ("summarized", "tool results cleared"); the log,
	// and so this transcript, keep it whole.
	Compacted string
	// RewoundBy is set once a rewind took the turn out of the
	// conversation (who asked); the log keeps it, drawn struck through.
	RewoundBy string
	// Inherited: the turn is a fork's source's (no rewind from here).
	Inherited bool
	// LastEventID is the turn's last event, where "fork from here" forks.
	LastEventID string
}

// entry is one bubble of a turn. Exactly one of its parts is set.
type entry struct {
	Seq        int64
	User       *message
	Assistant  *message
	Tool       *toolView
	Failure    *failureView
	Warning    *failureView
	Compaction *compactionView
	// InterruptedBy is set on the assistant message an interrupted turn
	// kept: the interrupting driver's key id, or "operator".
	InterruptedBy string
}

// message is a chat message; Parts keep text and tool calls in block order.
type message struct {
	Parts []part
	// Note describes a message with no text (only tool results).
	Note string
}

type part struct {
	Text string
	// Thinking is a thinking block's text ("" and Redacted for a
	// redacted_thinking block), shown collapsed.
	Thinking    string
	HasThinking bool
	Redacted    bool
	Tool        *toolView
	// Other is a non-text, non-tool block, shown as JSON.
	Other string
}

type toolView struct {
	ID, Name, Dispatch, Server string
	Input                      string
	Result                     string
	HasResult, IsError         bool
	// Approval is set when the profile's policy held the call for a
	// decision (approval.request, then approval.decision).
	Approval *approvalView
}

// approvalView is a held call's request and, once made, its decision.
type approvalView struct {
	ID, Deciders, Deadline, OnTimeout string
	// State is "pending" until the decision: approved, rejected, expired
	// or cancelled.
	State string
	// By is who decided ("operator console", "driver key_…", "deadline");
	// Args the approved arguments when they were edited; Message the
	// rejection the model read.
	By, Args, Message string
}

// Verdict is the decision for a sentence: "Approved", "Rejected", …
func (a *approvalView) Verdict() string {
	if a.State == "" {
		return ""
	}
	return strings.ToUpper(a.State[:1]) + a.State[1:]
}

// deciderText names who decided an approval.
func deciderText(d events.DecidedBy) string {
	switch {
	case d.Operator != "":
		return string(d.Kind) + " " + d.Operator
	case d.ClientID != "":
		return string(d.Kind) + " " + d.ClientID
	}
	return string(d.Kind)
}

type failureView struct {
	Reason, Detail string
}

// buildTranscript turns events (in log order) into transcript items.
func buildTranscript(evs []store.Event) []transcriptItem {
	calls := map[string]*toolView{}
	approvals := map[string]*approvalView{}
	inMessage := map[string]bool{} // tool_use ids drawn inside an assistant message
	for _, e := range evs {
		switch e.Type {
		case events.ApprovalRequest:
			var p events.ApprovalRequestPayload
			_ = json.Unmarshal(e.Payload, &p)
			tv := calls[p.ToolCallID]
			if tv == nil {
				tv = &toolView{ID: p.ToolCallID, Name: p.ToolName, Dispatch: string(p.ToolKind), Input: pretty(p.Arguments)}
				calls[p.ToolCallID] = tv
			}
			tv.Approval = &approvalView{ID: p.ApprovalID, Deciders: string(p.Deciders), Deadline: p.Deadline, OnTimeout: string(p.OnTimeout), State: "pending"}
			approvals[p.ApprovalID] = tv.Approval
		case events.ApprovalDecision:
			var p events.ApprovalDecisionPayload
			_ = json.Unmarshal(e.Payload, &p)
			if a := approvals[p.ApprovalID]; a != nil {
				a.State, a.By, a.Message = string(p.Decision), deciderText(p.DecidedBy), p.Message
				if len(p.Arguments) > 0 && string(p.Arguments) != "null" {
					a.Args = pretty(p.Arguments)
				}
			}
		case events.ToolCall:
			var p struct {
				ID         string          `json:"id"`
				Name       string          `json:"name"`
				Input      json.RawMessage `json:"input"`
				Dispatch   string          `json:"dispatch"`
				ServerName *string         `json:"server_name"`
			}
			_ = json.Unmarshal(e.Payload, &p)
			tv := calls[p.ID]
			if tv == nil {
				tv = &toolView{ID: p.ID}
				calls[p.ID] = tv
			}
			tv.Name, tv.Dispatch, tv.Input = p.Name, p.Dispatch, pretty(p.Input)
			if p.ServerName != nil {
				tv.Server = *p.ServerName
			}
		case events.ToolResult:
			var p struct {
				ToolUseID string          `json:"tool_use_id"`
				IsError   bool            `json:"is_error"`
				Content   json.RawMessage `json:"content"`
			}
			_ = json.Unmarshal(e.Payload, &p)
			tv := calls[p.ToolUseID]
			if tv == nil {
				tv = &toolView{ID: p.ToolUseID, Name: "(unknown tool)"}
				calls[p.ToolUseID] = tv
			}
			tv.HasResult, tv.IsError, tv.Result = true, p.IsError, contentText(p.Content)
		case events.ServerMessageSend, events.ServerMessageInterrupted:
			for _, b := range blocks(payloadContent(e.Payload)) {
				if b.Type == "tool_use" {
					inMessage[b.ID] = true
				}
			}
		}
	}

	var items []transcriptItem
	turns := map[string]*turnView{}
	for _, e := range evs {
		if e.TurnID == "" {
			items = append(items, transcriptItem{System: systemOf(e)})
			continue
		}
		t := turns[e.TurnID]
		if t == nil {
			t = &turnView{ID: e.TurnID, ClientKeyID: e.ClientKeyID, Started: e.CreatedAt, FirstSeq: e.Seq}
			turns[e.TurnID] = t
			items = append(items, transcriptItem{Turn: t})
		}
		if endsTurn(e.Type) {
			t.Done = true
		}
		t.LastEventID, t.Inherited = e.ID, e.Inherited
		switch e.Type {
		case events.ClientMessageSend:
			t.Entries = append(t.Entries, entry{Seq: e.Seq, User: messageOf(payloadContent(e.Payload), calls, false)})
		case events.ServerMessageSend:
			t.Entries = append(t.Entries, entry{Seq: e.Seq, Assistant: messageOf(payloadContent(e.Payload), calls, true)})
		case events.ToolCall:
			var p struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(e.Payload, &p)
			if !inMessage[p.ID] {
				t.Entries = append(t.Entries, entry{Seq: e.Seq, Tool: calls[p.ID]})
			}
		case events.ProviderResponse:
			var p struct {
				OK       bool   `json:"ok"`
				Provider string `json:"provider"`
				Status   any    `json:"status"`
				Error    string `json:"error"`
			}
			_ = json.Unmarshal(e.Payload, &p)
			if !p.OK {
				t.Entries = append(t.Entries, entry{Seq: e.Seq, Warning: &failureView{
					Reason: "provider " + p.Provider + " failed", Detail: strings.TrimSpace(fmt.Sprintf("%v %s", orDash(p.Status), p.Error)),
				}})
			}
		case events.SessionError:
			t.Entries = append(t.Entries, entry{Seq: e.Seq, Failure: failureOf(e.Payload)})
			t.Failed = true
		case events.ServerMessageInterrupted:
			var p struct {
				Content json.RawMessage `json:"content"`
				By      string          `json:"by"`
			}
			_ = json.Unmarshal(e.Payload, &p)
			if p.By == "" {
				p.By = "—"
			}
			t.Entries = append(t.Entries, entry{Seq: e.Seq, Assistant: messageOf(p.Content, calls, true), InterruptedBy: p.By})
			t.Interrupted = true
		case events.SessionCompaction:
			t.Entries = append(t.Entries, entry{Seq: e.Seq, Compaction: compactionOf(e, calls)})
		case events.ToolResult, events.ProviderRequest, events.ApprovalRequest, events.ApprovalDecision:
			// folded into their call / shown in the timeline only
		default:
			sl := systemOf(e)
			t.Entries = append(t.Entries, entry{Seq: e.Seq, Warning: &failureView{Reason: sl.Type, Detail: sl.Text}})
		}
	}
	markCompacted(items)
	markRewound(evs, turns)
	return items
}

// markRewound marks the turns session.rewind events took out of the
// conversation.
func markRewound(evs []store.Event, turns map[string]*turnView) {
	for _, e := range evs {
		if e.Type != events.SessionRewind {
			continue
		}
		var p events.RewindPayload
		_ = json.Unmarshal(e.Payload, &p)
		for _, id := range p.TurnIDs {
			if t := turns[id]; t != nil {
				t.RewoundBy = orDash(p.By).(string)
			}
		}
	}
}

func orDash(v any) any {
	if v == nil {
		return "—"
	}
	return v
}

func failureOf(payload json.RawMessage) *failureView {
	var p map[string]any
	_ = json.Unmarshal(payload, &p)
	f := &failureView{}
	if r, ok := p["reason"].(string); ok {
		f.Reason = r
	}
	if d, ok := p["detail"].(string); ok {
		f.Detail = d
	}
	if f.Reason == "" {
		f.Reason = string(events.SessionError)
	}
	if f.Detail == "" {
		delete(p, "reason")
		if len(p) > 0 {
			rest, _ := json.Marshal(p)
			f.Detail = string(rest)
		}
	}
	return f
}

func systemOf(e store.Event) *systemLine {
	var p map[string]any
	_ = json.Unmarshal(e.Payload, &p)
	s := &systemLine{Seq: e.Seq, Type: string(e.Type)}
	by := ""
	if e.ClientKeyID != "" {
		by = " by " + e.ClientKeyID
	}
	switch e.Type {
	case events.SessionOpen:
		s.Text = "Session opened" + by
		if v, ok := p["client_version"].(string); ok && v != "" {
			s.Text += " (client " + v + ")"
		}
	case events.SessionJoin:
		s.Text = "Client joined" + by
	case events.SessionRewind:
		var rp events.RewindPayload
		_ = json.Unmarshal(e.Payload, &rp)
		s.Text = fmt.Sprintf("Rewound %d turn(s) by %s: out of the conversation, kept in the log", len(rp.TurnIDs), rp.By)
		if n := len(rp.ToolCalls); n > 0 {
			names := make([]string, 0, n)
			for _, c := range rp.ToolCalls {
				names = append(names, c.Name)
			}
			s.Text += fmt.Sprintf("; %d tool call(s) not undone (%s)", n, strings.Join(names, ", "))
		}
	case events.SessionDriverRegister:
		s.Text = "Driver registered" + by
	case events.SessionClose:
		s.Text = "Session closed" + by
		if r, ok := p["reason"].(string); ok {
			s.Text += ": " + r
		}
	case events.SessionError:
		f := failureOf(e.Payload)
		s.Text, s.Failure = f.Reason, true
		if f.Detail != "" {
			s.Text += ": " + f.Detail
		}
	default:
		s.Text = truncate(compact(e.Payload), 300)
	}
	return s
}

type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	raw       json.RawMessage
}

func payloadContent(payload json.RawMessage) json.RawMessage {
	var p struct {
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(payload, &p)
	return p.Content
}

// blocks reads message content: a string is one text block.
func blocks(content json.RawMessage) []block {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return []block{{Type: "text", Text: s}}
	}
	var raws []json.RawMessage
	if json.Unmarshal(content, &raws) != nil {
		return nil
	}
	out := make([]block, 0, len(raws))
	for _, r := range raws {
		var b block
		if json.Unmarshal(r, &b) != nil {
			continue
		}
		b.raw = r
		out = append(out, b)
	}
	return out
}

func messageOf(content json.RawMessage, calls map[string]*toolView, assistant bool) *message {
	m := &message{}
	results := 0
	for _, b := range blocks(content) {
		switch b.Type {
		case "text":
			if strings.TrimSpace(b.Text) != "" {
				m.Parts = append(m.Parts, part{Text: b.Text})
			}
		case "tool_use":
			tv := calls[b.ID]
			if tv == nil {
				tv = &toolView{ID: b.ID, Name: b.Name, Input: pretty(b.Input)}
			}
			m.Parts = append(m.Parts, part{Tool: tv})
		case "thinking", "redacted_thinking":
			m.Parts = append(m.Parts, part{Thinking: b.Thinking, HasThinking: true, Redacted: b.Type == "redacted_thinking"})
		case "tool_result":
			results++ // drawn inside the tool call it answers
		default:
			m.Parts = append(m.Parts, part{Other: truncate(compact(b.raw), 2000)})
		}
	}
	if len(m.Parts) == 0 {
		switch {
		case results > 0:
			m.Note = fmt.Sprintf("returned %d tool result(s)", results)
		case assistant:
			m.Note = "(empty answer)"
		default:
			m.Note = "(empty message)"
		}
	}
	return m
}

// contentText renders a tool result's content: a string, or the text of its
// text blocks, or compact JSON.
func contentText(c json.RawMessage) string {
	if len(c) == 0 || string(c) == "null" {
		return ""
	}
	var texts []string
	bs := blocks(c)
	for _, b := range bs {
		if b.Type != "text" {
			return truncate(compact(c), maxShown)
		}
		texts = append(texts, b.Text)
	}
	if bs == nil {
		return truncate(compact(c), maxShown)
	}
	return truncate(strings.Join(texts, "\n"), maxShown)
}

// maxShown bounds any one payload drawn into a page.
const maxShown = 32 << 10

func pretty(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		return truncate(string(raw), maxShown)
	}
	return truncate(buf.String(), maxShown)
}

func compact(raw json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && (s[cut]&0xC0) == 0x80 { // keep UTF-8 whole
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d more bytes)", len(s)-cut)
}

// timelineRow is one event in the timeline.
type timelineRow struct {
	Seq         int64
	ID          string
	Time        time.Time
	Type        string
	Category    string
	ClientKeyID string
	TurnID      string
	Summary     string
	Payload     string
	Failure     bool
	Warning     bool
}

func timelineOf(e store.Event) timelineRow {
	row := timelineRow{
		Seq: e.Seq, ID: e.ID, Time: e.CreatedAt, Type: string(e.Type), Category: category(e.Type),
		ClientKeyID: e.ClientKeyID, TurnID: e.TurnID, Payload: pretty(e.Payload),
	}
	var p map[string]any
	_ = json.Unmarshal(e.Payload, &p)
	str := func(k string) string { s, _ := p[k].(string); return s }
	switch e.Type {
	case events.ClientMessageSend, events.ServerMessageSend, events.ServerMessageInterrupted:
		m := messageOf(payloadContent(e.Payload), map[string]*toolView{}, e.Type != events.ClientMessageSend)
		var parts []string
		for _, pt := range m.Parts {
			switch {
			case pt.Text != "":
				parts = append(parts, pt.Text)
			case pt.Tool != nil:
				parts = append(parts, "→ "+pt.Tool.Name)
			}
		}
		if len(parts) == 0 {
			parts = append(parts, m.Note)
		}
		row.Summary = strings.Join(parts, " · ")
	case events.ProviderRequest:
		row.Summary = fmt.Sprintf("%s %s (attempt %v)", str("provider"), str("model"), p["attempt"])
	case events.ProviderResponse:
		ok, _ := p["ok"].(bool)
		row.Summary = fmt.Sprintf("%s status %v", str("provider"), orDash(p["status"]))
		if !ok {
			row.Warning = true
			row.Summary += " failed: " + str("error")
		}
	case events.ToolCall:
		row.Summary = fmt.Sprintf("%s (%s)", str("name"), str("dispatch"))
	case events.ToolResult:
		isErr, _ := p["is_error"].(bool)
		row.Summary = fmt.Sprintf("for %s (%s)", str("tool_use_id"), str("dispatch"))
		if isErr {
			row.Warning = true
			row.Summary += " — error"
		}
	case events.ApprovalRequest:
		var a events.ApprovalRequestPayload
		_ = json.Unmarshal(e.Payload, &a)
		row.Summary = fmt.Sprintf("%s (%s) held for %s until %s, then %s", a.ToolName, a.ToolKind, a.Deciders, a.Deadline, a.OnTimeout)
	case events.ApprovalDecision:
		var a events.ApprovalDecisionPayload
		_ = json.Unmarshal(e.Payload, &a)
		row.Summary = fmt.Sprintf("%s by %s", a.Decision, deciderText(a.DecidedBy))
		if len(a.Arguments) > 0 && string(a.Arguments) != "null" {
			row.Summary += " with edited arguments"
		}
		if a.Decision != events.DecisionApproved {
			row.Warning = true
		}
	case events.SessionCompaction:
		c := compactionOf(e, map[string]*toolView{})
		row.Summary = fmt.Sprintf("%s (events #%d–#%d, %d → %d tokens)", c.Headline(), c.From, c.Through, c.TokensBefore, c.TokensAfter)
	case events.SessionError:
		row.Failure = true
		f := failureOf(e.Payload)
		row.Summary = f.Reason
		if f.Detail != "" {
			row.Summary += ": " + f.Detail
		}
	default:
		row.Summary = systemOf(e).Text
	}
	row.Summary = truncate(row.Summary, 240)
	return row
}

// category groups event types for colour in the timeline.
func category(t events.Type) string {
	switch t {
	case events.SessionError:
		return "error"
	case events.ClientMessageSend:
		return "client"
	case events.ServerMessageSend, events.ServerMessageInterrupted:
		return "assistant"
	case events.ProviderRequest, events.ProviderResponse:
		return "provider"
	case events.ToolCall, events.ToolResult, events.ApprovalRequest, events.ApprovalDecision:
		return "tool"
	case events.MCPRequest, events.MCPResponse:
		return "mcp"
	case events.SessionJoin, events.SessionDriverRegister:
		return "join"
	default:
		return "lifecycle"
	}
}

package fakeprovider

import "time"

// Reply scripts one provider answer. The zero Reply is the default echo:
// "echo: <last user text>". Build replies with the constructors below and
// refine them with the chainable With*/After/UntilReleased methods.
type Reply struct {
	// Text becomes a text block (Anthropic) or message content (OpenAI).
	Text string
	// ToolUses follow the text, in order.
	ToolUses []ToolUseSpec
	// StopReason overrides the canonical stop reason ("end_turn", or
	// "tool_use" when ToolUses is non-empty). OpenAI replies map it to
	// finish_reason ("stop"/"tool_calls"; other values pass through).
	StopReason string

	// Status >= 400 makes this an error reply carrying ErrorMessage in the
	// endpoint's error shape ({"error":{"message":…}}).
	Status       int
	ErrorMessage string

	// RawBody, when non-nil, is written verbatim with Status (default 200),
	// for malformed-response tests.
	RawBody []byte

	// Delay holds the response back (the request context still aborts it).
	Delay time.Duration
	// Hang blocks until Server.Release, Server.Close, or the request
	// context ends; then (unless aborted) the rest of the reply is sent.
	Hang bool
}

// ToolUseSpec is one tool call in a Reply.
type ToolUseSpec struct {
	// ID may be empty: the fake then generates "toolu_fake_<seq>_<n>"
	// (request number, 1-based position among the tool uses).
	ID   string
	Name string
	// Input is marshalled as the tool input; nil means {}.
	Input any
}

// Echo is the default reply, spelled out.
func Echo() Reply { return Reply{} }

// Text is a final text turn.
func Text(s string) Reply { return Reply{Text: s} }

// ToolUse is a turn with a single tool call.
func ToolUse(id, name string, input any) Reply {
	return Reply{ToolUses: []ToolUseSpec{{ID: id, Name: name, Input: input}}}
}

// Error is an HTTP error reply whose body carries message.
func Error(status int, message string) Reply {
	return Reply{Status: status, ErrorMessage: message}
}

// Raw writes body verbatim with status.
func Raw(status int, body string) Reply {
	return Reply{Status: status, RawBody: []byte(body)}
}

// Delay is the default echo, sent after d.
func Delay(d time.Duration) Reply { return Reply{Delay: d} }

// Hang is the default echo, sent only once released.
func Hang() Reply { return Reply{Hang: true} }

// WithText sets the reply's text.
func (r Reply) WithText(s string) Reply {
	r.Text = s
	return r
}

// WithToolUse appends a tool call.
func (r Reply) WithToolUse(id, name string, input any) Reply {
	r.ToolUses = append(append([]ToolUseSpec(nil), r.ToolUses...), ToolUseSpec{ID: id, Name: name, Input: input})
	return r
}

// WithStopReason overrides the stop reason.
func (r Reply) WithStopReason(s string) Reply {
	r.StopReason = s
	return r
}

// After delays the reply by d.
func (r Reply) After(d time.Duration) Reply {
	r.Delay = d
	return r
}

// UntilReleased makes the reply hang first.
func (r Reply) UntilReleased() Reply {
	r.Hang = true
	return r
}

func (r Reply) isEcho() bool {
	return r.Text == "" && len(r.ToolUses) == 0 && r.Status == 0 && r.RawBody == nil
}

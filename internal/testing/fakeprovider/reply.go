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
	// Thinking blocks come first, when the request turns thinking on
	// (see ThinkingSpec).
	Thinking []ThinkingSpec
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

	// The fields below apply when the request asks for a stream
	// ("stream": true); the stream assembles into the body a
	// non-streaming request gets.

	// Tokens is how many pieces the text is sent in (0: one per word);
	// each tool input is sent in up to 3 pieces.
	Tokens int
	// TokenGap is the pause before each piece after the first.
	TokenGap time.Duration
	// CutAfter > 0 ends the stream after that many pieces: with an error
	// event carrying CutError when it is set, else by dropping the
	// connection.
	CutAfter int
	CutError string
	// HangAfter > 0 holds the stream after that many pieces until
	// Server.Release (or the request ends), then sends the rest.
	HangAfter int
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

// Streamed sets how a streamed answer is paced: the text in tokens pieces,
// gap apart.
func (r Reply) Streamed(tokens int, gap time.Duration) Reply {
	r.Tokens, r.TokenGap = tokens, gap
	return r
}

// CutStream ends a streamed answer after n pieces: with an in-stream error
// event carrying message, or (message "") by dropping the connection.
func (r Reply) CutStream(n int, message string) Reply {
	r.CutAfter, r.CutError = n, message
	return r
}

// HangStream holds a streamed answer after n pieces until Release.
func (r Reply) HangStream(n int) Reply {
	r.HangAfter = n
	return r
}

func (r Reply) isEcho() bool {
	return r.Text == "" && len(r.ToolUses) == 0 && r.Status == 0 && r.RawBody == nil
}

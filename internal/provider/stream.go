package provider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
)

// Delta kinds: what one piece of a streamed answer holds.
const (
	// DeltaBlockStart opens content block Index; Block is the block
	// without its content ({"type":"text"}, {"type":"tool_use","id","name"}).
	DeltaBlockStart = "block_start"
	// DeltaText is text appended to text block Index.
	DeltaText = "text_delta"
	// DeltaInputJSON is a piece of tool_use block Index's input, as JSON
	// text: the pieces joined are the input.
	DeltaInputJSON = "input_json_delta"
	// DeltaThinking is thinking text appended to thinking block Index:
	// sent only to streams that opted in to thinking as well.
	DeltaThinking = "thinking_delta"
)

// Delta is one piece of a streamed answer, in canonical terms: the index
// is the content block's position in the canonical content.
type Delta struct {
	Index int
	Kind  string
	// Text is the text or partial JSON of a DeltaText or DeltaInputJSON.
	Text string
	// Block is set for DeltaBlockStart.
	Block json.RawMessage
}

// streamingBody asks for the streaming form of a request body: the same
// JSON object with stream set (and, for Chat Completions, the usage chunk
// that a non-streaming response carries).
func streamingBody(kind string, payload []byte) []byte {
	payload = bytes.TrimRight(payload, " \n")
	if len(payload) < 2 || payload[len(payload)-1] != '}' {
		return payload
	}
	extra := `,"stream":true}`
	if kind == KindOpenAI {
		extra = `,"stream":true,"stream_options":{"include_usage":true}}`
	}
	out := make([]byte, 0, len(payload)+len(extra))
	out = append(out, payload[:len(payload)-1]...)
	return append(out, extra...)
}

// isEventStream reports a server-sent events response. A server that
// ignored stream:true answers with JSON, which is read as usual.
func isEventStream(resp *http.Response) bool {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// assembler turns a wire format's stream events into deltas and, at the
// end, the body a non-streaming call would have returned.
type assembler interface {
	// event handles one server-sent event; done reports the stream's
	// final event.
	event(name string, data []byte, sink func(Delta)) (done bool, err error)
	// body is the assembled non-streaming response body.
	body() ([]byte, error)
}

// streamFailure is an error event inside a 200 stream: the provider gave
// up mid-answer.
type streamFailure struct{ body json.RawMessage }

func (e *streamFailure) Error() string {
	if m := errorMessage(e.body); m != "" {
		return m
	}
	return "provider stream reported an error"
}

// readStream reads a streamed answer to its end. A stream cut short or an
// error event inside it is a retryable failure without status: the
// provider did not finish the answer, and nothing of it is kept.
func (c *Client) readStream(ctx context.Context, ep Endpoint, resp *http.Response, sink func(Delta), start time.Time, stop context.CancelFunc) (*Response, error) {
	var (
		asm assembler
		wf  wire
	)
	if ep.Kind == KindOpenAI {
		asm, wf = &openAIAssembler{blockOf: map[int]int{}, calls: map[int]*oaStreamCall{}}, openAIWire{}
	} else {
		asm, wf = &anthropicAssembler{}, anthropicWire{}
	}
	status := resp.StatusCode
	r := bufio.NewReaderSize(io.LimitReader(resp.Body, maxResponseBytes+1), 32<<10)
	var (
		name  string
		data  []byte
		total int
		done  bool
	)
	for !done {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long data line: keep reading it.
			rest, rerr := readLong(r, line)
			line, err = rest, rerr
		}
		total += len(line)
		if total > maxResponseBytes {
			return nil, &CallError{Status: &status, Detail: fmt.Sprintf("provider response exceeds %d bytes", maxResponseBytes)}
		}
		if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
			if errors.Is(err, io.EOF) {
				if len(data) > 0 {
					// The last event lacked its blank line.
					if done, err = dispatch(asm, name, data, sink); err != nil {
						return nil, streamError(status, err)
					}
					if done {
						break
					}
				}
				return nil, &CallError{Detail: "provider stream ended before the answer was complete", Retryable: true, Err: io.ErrUnexpectedEOF}
			}
			return nil, transportError(ctx, err)
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if len(data) > 0 || name != "" {
				if done, err = dispatch(asm, name, data, sink); err != nil {
					return nil, streamError(status, err)
				}
			}
			name, data = "", data[:0]
		case line[0] == ':':
			// A comment (keep-alive).
		default:
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) {
			case "event":
				name = string(value)
			case "data":
				if len(data) > 0 {
					data = append(data, '\n')
				}
				data = append(data, value...)
			}
		}
	}
	readEnd(r, stop)
	raw, err := asm.body()
	if err != nil {
		return nil, &CallError{Status: &status, Detail: err.Error(), Err: err}
	}
	c.logger().DebugContext(ctx, "provider call", "kind", ep.Kind, "model", ep.Model, "status", status, "stream", true, "bytes", total, "elapsed", time.Since(start))
	canon, err := wf.canonical(raw, c.logger())
	if err != nil {
		return nil, &CallError{Status: &status, Detail: err.Error(), Body: json.RawMessage(raw), Err: err}
	}
	return &Response{Raw: json.RawMessage(raw), Canonical: canon, Status: status}, nil
}

// streamEndWait bounds how long a complete answer waits for its stream's
// end, and streamEndBytes how much of it is read.
const (
	streamEndWait  = 250 * time.Millisecond
	streamEndBytes = 64 << 10
)

// readEnd reads what follows a complete answer's last event, normally
// nothing but the end of the response: an HTTP/1.1 body closed before its
// end closes its connection too, so the next call would open (and, with
// TLS, handshake) a new one. A provider that does not end the stream
// within streamEndWait has its request stopped, as the close would.
func readEnd(r *bufio.Reader, stop context.CancelFunc) {
	t := time.AfterFunc(streamEndWait, stop)
	defer t.Stop()
	_, _ = io.Copy(io.Discard, io.LimitReader(r, streamEndBytes))
}

func readLong(r *bufio.Reader, first []byte) ([]byte, error) {
	line := append([]byte(nil), first...)
	for {
		more, err := r.ReadSlice('\n')
		line = append(line, more...)
		if len(line) > maxResponseBytes {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

func dispatch(asm assembler, name string, data []byte, sink func(Delta)) (bool, error) {
	return asm.event(name, bytes.Clone(data), sink)
}

// streamError is a failure found in a stream's events: an error event is
// retryable (the provider stopped mid-answer, as on a dropped connection);
// a malformed event is the provider's answer and is not.
func streamError(status int, err error) *CallError {
	var sf *streamFailure
	if errors.As(err, &sf) {
		return &CallError{Detail: "provider stream failed: " + sf.Error(), Body: sf.body, Retryable: true, Err: err}
	}
	return &CallError{Status: &status, Detail: err.Error(), Err: err}
}

// anthropicAssembler assembles Messages API stream events.
type anthropicAssembler struct {
	msg     map[string]json.RawMessage
	blocks  []*streamBlock
	stopped bool
}

// streamBlock is one content block being assembled: its start object's
// fields, and the text or partial input JSON received so far.
type streamBlock struct {
	fields     map[string]json.RawMessage
	text       strings.Builder
	input      strings.Builder
	isText     bool
	isTool     bool
	thought    strings.Builder
	hasThought bool
}

func (a *anthropicAssembler) event(name string, data []byte, sink func(Delta)) (bool, error) {
	var ev struct {
		Type         string                     `json:"type"`
		Index        int                        `json:"index"`
		Message      map[string]json.RawMessage `json:"message"`
		ContentBlock map[string]json.RawMessage `json:"content_block"`
		Delta        json.RawMessage            `json:"delta"`
		Usage        map[string]json.RawMessage `json:"usage"`
	}
	if err := json.Unmarshal(data, &ev); err != nil {
		return false, fmt.Errorf("provider stream event is not JSON: %w", err)
	}
	if ev.Type == "" {
		ev.Type = name
	}
	switch ev.Type {
	case "message_start":
		if ev.Message == nil {
			return false, errors.New("provider stream: message_start without a message")
		}
		a.msg = ev.Message
	case "content_block_start":
		if a.msg == nil || ev.Index != len(a.blocks) || ev.ContentBlock == nil {
			return false, fmt.Errorf("provider stream: unexpected content_block_start %d", ev.Index)
		}
		b := &streamBlock{fields: ev.ContentBlock}
		var typ string
		_ = json.Unmarshal(ev.ContentBlock["type"], &typ)
		start := map[string]json.RawMessage{"type": ev.ContentBlock["type"]}
		switch typ {
		case "text":
			b.isText = true
			var t string
			_ = json.Unmarshal(ev.ContentBlock["text"], &t)
			b.text.WriteString(t)
		case "tool_use":
			b.isTool = true
			start["id"], start["name"] = ev.ContentBlock["id"], ev.ContentBlock["name"]
		case "thinking":
			b.hasThought = true
			var t string
			_ = json.Unmarshal(ev.ContentBlock["thinking"], &t)
			b.thought.WriteString(t)
		}
		a.blocks = append(a.blocks, b)
		enc, _ := marshalJSON(start)
		sink(Delta{Index: ev.Index, Kind: DeltaBlockStart, Block: enc})
	case "content_block_delta":
		if ev.Index < 0 || ev.Index >= len(a.blocks) {
			return false, fmt.Errorf("provider stream: delta for unknown block %d", ev.Index)
		}
		b := a.blocks[ev.Index]
		var d struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			PartialJSON string `json:"partial_json"`
			Thinking    string `json:"thinking"`
			Signature   string `json:"signature"`
		}
		if err := json.Unmarshal(ev.Delta, &d); err != nil {
			return false, fmt.Errorf("provider stream: bad delta: %w", err)
		}
		switch d.Type {
		case "text_delta":
			b.text.WriteString(d.Text)
			sink(Delta{Index: ev.Index, Kind: DeltaText, Text: d.Text})
		case "input_json_delta":
			b.input.WriteString(d.PartialJSON)
			sink(Delta{Index: ev.Index, Kind: DeltaInputJSON, Text: d.PartialJSON})
		case "thinking_delta":
			b.thought.WriteString(d.Thinking)
			sink(Delta{Index: ev.Index, Kind: DeltaThinking, Text: d.Thinking})
		case "signature_delta":
			enc, _ := marshalJSON(d.Signature)
			b.fields["signature"] = enc
		}
	case "content_block_stop":
	case "message_delta":
		if a.msg == nil {
			return false, errors.New("provider stream: message_delta before message_start")
		}
		var d map[string]json.RawMessage
		if err := json.Unmarshal(ev.Delta, &d); err != nil {
			return false, fmt.Errorf("provider stream: bad message_delta: %w", err)
		}
		for k, v := range d {
			a.msg[k] = v
		}
		if len(ev.Usage) > 0 {
			usage := map[string]json.RawMessage{}
			_ = json.Unmarshal(a.msg["usage"], &usage)
			for k, v := range ev.Usage {
				usage[k] = v
			}
			enc, err := marshalJSON(usage)
			if err != nil {
				return false, err
			}
			a.msg["usage"] = enc
		}
	case "message_stop":
		a.stopped = true
		return true, nil
	case "error":
		return false, &streamFailure{body: json.RawMessage(data)}
	}
	return false, nil
}

func (a *anthropicAssembler) body() ([]byte, error) {
	if a.msg == nil || !a.stopped {
		return nil, errors.New("provider stream ended without a complete message")
	}
	content := make([]map[string]json.RawMessage, 0, len(a.blocks))
	for i, b := range a.blocks {
		switch {
		case b.isText:
			enc, err := marshalJSON(b.text.String())
			if err != nil {
				return nil, err
			}
			b.fields["text"] = enc
		case b.isTool:
			if in := strings.TrimSpace(b.input.String()); in != "" {
				var buf bytes.Buffer
				if err := json.Compact(&buf, []byte(in)); err != nil {
					return nil, fmt.Errorf("provider stream: tool_use block %d has invalid input JSON: %w", i, err)
				}
				b.fields["input"] = buf.Bytes()
			} else if len(b.fields["input"]) == 0 {
				b.fields["input"] = json.RawMessage(`{}`)
			}
		case b.hasThought:
			enc, err := marshalJSON(b.thought.String())
			if err != nil {
				return nil, err
			}
			b.fields["thinking"] = enc
		}
		content = append(content, b.fields)
	}
	enc, err := marshalJSON(content)
	if err != nil {
		return nil, err
	}
	a.msg["content"] = enc
	return marshalJSON(a.msg)
}

// openAIAssembler assembles Chat Completions chunks (choice 0).
type openAIAssembler struct {
	top      map[string]json.RawMessage
	text     strings.Builder
	hasText  bool
	textIdx  int
	calls    map[int]*oaStreamCall
	order    []int       // tool call indexes in first-seen order
	blockOf  map[int]int // tool call index -> canonical block index
	blocks   int
	finish   json.RawMessage
	logprobs json.RawMessage
	usage    json.RawMessage
	role     json.RawMessage
	done     bool
}

type oaStreamCall struct {
	id, typ, name string
	args          strings.Builder
}

func (a *openAIAssembler) event(_ string, data []byte, sink func(Delta)) (bool, error) {
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		a.done = true
		return true, nil
	}
	var chunk map[string]json.RawMessage
	if err := json.Unmarshal(data, &chunk); err != nil {
		return false, fmt.Errorf("provider stream chunk is not JSON: %w", err)
	}
	if e, ok := chunk["error"]; ok && len(e) > 0 && string(e) != "null" {
		return false, &streamFailure{body: json.RawMessage(data)}
	}
	if a.top == nil {
		a.top = map[string]json.RawMessage{}
		for k, v := range chunk {
			switch k {
			case "object", "choices", "usage":
			default:
				a.top[k] = v
			}
		}
	}
	if u, ok := chunk["usage"]; ok && string(u) != "null" {
		a.usage = u
	}
	var choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      json.RawMessage `json:"role"`
			Content   *string         `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason json.RawMessage `json:"finish_reason"`
		Logprobs     json.RawMessage `json:"logprobs"`
	}
	if raw, ok := chunk["choices"]; ok {
		if err := json.Unmarshal(raw, &choices); err != nil {
			return false, fmt.Errorf("provider stream: bad choices: %w", err)
		}
	}
	for _, ch := range choices {
		if ch.Index != 0 {
			continue
		}
		if len(ch.Delta.Role) > 0 && string(ch.Delta.Role) != "null" {
			a.role = ch.Delta.Role
		}
		if ch.Logprobs != nil {
			a.logprobs = ch.Logprobs
		}
		if c := ch.Delta.Content; c != nil && *c != "" {
			if !a.hasText {
				a.hasText, a.textIdx = true, a.blocks
				a.blocks++
				sink(Delta{Index: a.textIdx, Kind: DeltaBlockStart, Block: json.RawMessage(`{"type":"text"}`)})
			}
			a.text.WriteString(*c)
			sink(Delta{Index: a.textIdx, Kind: DeltaText, Text: *c})
		}
		for _, tc := range ch.Delta.ToolCalls {
			call, ok := a.calls[tc.Index]
			if !ok {
				call = &oaStreamCall{}
				a.calls[tc.Index] = call
				a.order = append(a.order, tc.Index)
			}
			if tc.ID != "" {
				call.id = tc.ID
			}
			if tc.Type != "" {
				call.typ = tc.Type
			}
			call.name += tc.Function.Name
			idx, started := a.blockOf[tc.Index]
			if !started && call.id != "" && call.name != "" {
				idx = a.blocks
				a.blocks++
				a.blockOf[tc.Index] = idx
				start, _ := marshalJSON(map[string]string{"type": "tool_use", "id": call.id, "name": call.name})
				sink(Delta{Index: idx, Kind: DeltaBlockStart, Block: start})
				started = true
				if prior := call.args.String(); prior != "" {
					sink(Delta{Index: idx, Kind: DeltaInputJSON, Text: prior})
				}
			}
			call.args.WriteString(tc.Function.Arguments)
			if started && tc.Function.Arguments != "" {
				sink(Delta{Index: idx, Kind: DeltaInputJSON, Text: tc.Function.Arguments})
			}
		}
		if len(ch.FinishReason) > 0 && string(ch.FinishReason) != "null" {
			a.finish = ch.FinishReason
		}
	}
	return false, nil
}

func (a *openAIAssembler) body() ([]byte, error) {
	if a.top == nil || !a.done && a.finish == nil {
		return nil, errors.New("provider stream ended without a complete completion")
	}
	message := map[string]json.RawMessage{"role": json.RawMessage(`"assistant"`), "content": json.RawMessage("null")}
	if a.role != nil {
		message["role"] = a.role
	}
	if a.hasText {
		enc, err := marshalJSON(a.text.String())
		if err != nil {
			return nil, err
		}
		message["content"] = enc
	}
	if len(a.order) > 0 {
		calls := make([]map[string]any, 0, len(a.order))
		for _, i := range a.order {
			c := a.calls[i]
			typ := c.typ
			if typ == "" {
				typ = "function"
			}
			calls = append(calls, map[string]any{"id": c.id, "type": typ, "function": map[string]any{"name": c.name, "arguments": c.args.String()}})
		}
		enc, err := marshalJSON(calls)
		if err != nil {
			return nil, err
		}
		message["tool_calls"] = enc
	}
	choice := map[string]json.RawMessage{"index": json.RawMessage("0"), "finish_reason": json.RawMessage("null")}
	if a.finish != nil {
		choice["finish_reason"] = a.finish
	}
	if a.logprobs != nil {
		choice["logprobs"] = a.logprobs
	}
	enc, err := marshalJSON(message)
	if err != nil {
		return nil, err
	}
	choice["message"] = enc
	out := a.top
	out["object"] = json.RawMessage(`"chat.completion"`)
	if out["choices"], err = marshalJSON([]any{choice}); err != nil {
		return nil, err
	}
	if a.usage != nil {
		out["usage"] = a.usage
	}
	return marshalJSON(out)
}

package fakeprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// stream answers a request that asked for a stream: the reply's body,
// sent as the endpoint's server-sent events, piece by piece.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, rec Recorded, reply Reply, release <-chan struct{}) {
	if reply.isEcho() {
		reply.Text = "echo: " + rec.LastUserText()
	}
	var (
		body map[string]any
		err  error
	)
	if rec.Format == OpenAI {
		body, err = openAIBody(rec, reply)
	} else {
		body, err = s.anthropicBody(rec, reply)
	}
	if err != nil {
		writeError(w, rec.Format, http.StatusInternalServerError, "fakeprovider: "+err.Error())
		return
	}
	st := &sseWriter{w: w, ctx: ctx, s: s, reply: reply, release: release, openai: rec.Format == OpenAI}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if rec.Format == OpenAI {
		st.openAI(body, reply)
	} else {
		st.anthropic(body, reply)
	}
	end := StreamEnd{Seq: rec.Seq, Pieces: st.pieces, Whole: !st.stopped, ClientGone: st.gone || ctx.Err() != nil, At: time.Now()}
	select {
	case s.ended <- end:
	default:
	}
	if st.cut && reply.CutError == "" {
		// Drop the connection without ending the response.
		panic(http.ErrAbortHandler)
	}
}

// sseWriter writes events and counts the pieces of the answer, applying
// the reply's pacing, cut and hang.
type sseWriter struct {
	w       http.ResponseWriter
	ctx     context.Context
	s       *Server
	reply   Reply
	release <-chan struct{}
	openai  bool
	pieces  int
	stopped bool // the client went away, or the stream was cut
	cut     bool
	gone    bool // a write failed: the client went away
}

func (st *sseWriter) send(event string, v any) {
	if st.stopped {
		return
	}
	var buf bytes.Buffer
	if event != "" {
		buf.WriteString("event: " + event + "\n")
	}
	buf.WriteString("data: ")
	if raw, ok := v.(string); ok {
		buf.WriteString(raw)
	} else {
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v)
		buf.Truncate(buf.Len() - 1)
	}
	buf.WriteString("\n\n")
	if _, err := st.w.Write(buf.Bytes()); err != nil {
		st.stopped, st.gone = true, true
		return
	}
	if f, ok := st.w.(http.Flusher); ok {
		f.Flush()
	}
}

// piece is called before each piece: it paces, and reports false when the
// stream must not go on (cut, or the client is gone).
func (st *sseWriter) piece() bool {
	if st.stopped {
		return false
	}
	if st.reply.CutAfter > 0 && st.pieces == st.reply.CutAfter {
		st.stopped, st.cut = true, true
		if st.reply.CutError != "" {
			st.stopped = false
			if st.openai {
				st.send("", map[string]any{"error": map[string]any{"message": st.reply.CutError, "type": "server_error", "param": nil, "code": nil}})
			} else {
				st.send("error", map[string]any{"type": "error", "error": map[string]any{"type": "overloaded_error", "message": st.reply.CutError}})
			}
			st.stopped = true
		}
		return false
	}
	if st.reply.HangAfter > 0 && st.pieces == st.reply.HangAfter {
		select {
		case <-st.release:
		case <-st.ctx.Done():
			st.stopped = true
			return false
		case <-st.s.closing:
			st.stopped = true
			return false
		}
	}
	if st.pieces > 0 && st.reply.TokenGap > 0 {
		t := time.NewTimer(st.reply.TokenGap)
		select {
		case <-t.C:
		case <-st.ctx.Done():
			t.Stop()
			st.stopped = true
			return false
		}
	}
	st.pieces++
	return true
}

// splitText cuts s into n pieces of about equal length on rune boundaries
// (n <= 0: one piece per word, the space kept with the word before it).
func splitText(s string, n int) []string {
	if s == "" {
		return nil
	}
	if n <= 0 {
		return strings.SplitAfter(s, " ")
	}
	runes := utf8.RuneCountInString(s)
	n = min(n, runes)
	out := make([]string, 0, n)
	per, extra := runes/n, runes%n
	for i := range n {
		size := per
		if i < extra {
			size++
		}
		end := 0
		for range size {
			_, w := utf8.DecodeRuneInString(s[end:])
			end += w
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

func (st *sseWriter) anthropic(body map[string]any, reply Reply) {
	content, _ := body["content"].([]any)
	usage, _ := body["usage"].(map[string]any)
	start := map[string]any{}
	for k, v := range body {
		start[k] = v
	}
	start["content"] = []any{}
	start["stop_reason"] = nil
	// message_start carries the input side of usage, cache counts included.
	startUsage := map[string]any{"output_tokens": 1}
	for _, k := range []string{"input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"} {
		if v, ok := usage[k]; ok {
			startUsage[k] = v
		}
	}
	start["usage"] = startUsage
	st.send("message_start", map[string]any{"type": "message_start", "message": start})
	for i, c := range content {
		block := c.(map[string]any)
		switch block["type"] {
		case "text":
			st.send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, p := range splitText(block["text"].(string), reply.Tokens) {
				if !st.piece() {
					return
				}
				st.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": p}})
			}
		case "thinking":
			st.send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}})
			for _, p := range splitText(block["thinking"].(string), reply.Tokens) {
				if !st.piece() {
					return
				}
				st.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "thinking_delta", "thinking": p}})
			}
			if !st.piece() {
				return
			}
			st.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "signature_delta", "signature": block["signature"]}})
		case "redacted_thinking":
			st.send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": block})
		case "tool_use":
			st.send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": block["id"], "name": block["name"], "input": map[string]any{}}})
			for _, p := range splitText(string(block["input"].(json.RawMessage)), 3) {
				if !st.piece() {
					return
				}
				st.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
			}
		}
		st.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	st.send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": body["stop_reason"], "stop_sequence": nil}, "usage": map[string]any{"output_tokens": usage["output_tokens"]}})
	st.send("message_stop", map[string]any{"type": "message_stop"})
}

func (st *sseWriter) openAI(body map[string]any, reply Reply) {
	choice := body["choices"].([]any)[0].(map[string]any)
	message := choice["message"].(map[string]any)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{
			"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"],
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		}
	}
	st.send("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	if text, ok := message["content"].(string); ok {
		for _, p := range splitText(text, reply.Tokens) {
			if !st.piece() {
				return
			}
			st.send("", chunk(map[string]any{"content": p}, nil))
		}
	}
	calls, _ := message["tool_calls"].([]any)
	for i, c := range calls {
		call := c.(map[string]any)
		fn := call["function"].(map[string]any)
		st.send("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": call["id"], "type": "function", "function": map[string]any{"name": fn["name"], "arguments": ""}}}}, nil))
		for _, p := range splitText(fn["arguments"].(string), 3) {
			if !st.piece() {
				return
			}
			st.send("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": p}}}}, nil))
		}
	}
	st.send("", chunk(map[string]any{}, choice["finish_reason"]))
	st.send("", map[string]any{"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"], "choices": []any{}, "usage": body["usage"]})
	st.send("", "[DONE]")
}

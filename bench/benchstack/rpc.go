package benchstack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// PostRPC sends one JSON-RPC call to a session's rpc endpoint with its
// session key and returns the NDJSON answer, which the caller closes. An
// answer other than 200 is an error carrying the start of its body.
func PostRPC(ctx context.Context, hc *http.Client, base, sid, key string, id int, method string, params any, header http.Header) (*http.Response, error) {
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", method, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/sessions/"+sid+"/rpc", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("%s: status %d: %s", method, resp.StatusCode, raw)
	}
	return resp, nil
}

// UserMessage is session.sendMessage's params for one user text.
func UserMessage(text string) map[string]any {
	return map[string]any{"message": map[string]any{"role": "user", "content": text}}
}

// PostRPCResult sends one JSON-RPC call that answers with a single
// response and returns its result; an error response is an error.
func PostRPCResult(ctx context.Context, hc *http.Client, base, sid, key, method string, params any) (json.RawMessage, error) {
	resp, err := PostRPC(ctx, hc, base, sid, key, 1, method, params, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m struct {
			ID     *json.RawMessage `json:"id"`
			Result json.RawMessage  `json:"result"`
			Error  json.RawMessage  `json:"error"`
		}
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("%s: read response: %w", method, err)
		}
		if m.ID == nil {
			continue // a notification
		}
		if len(m.Error) > 0 && string(m.Error) != "null" {
			return nil, fmt.Errorf("%s: %s", method, m.Error)
		}
		return m.Result, nil
	}
}

// ReadEcho reads a session.sendMessage NDJSON answer to its terminal
// response, decoding only that line, and checks it is the fake provider's
// echo of text. It returns the bytes read.
func ReadEcho(r io.Reader, text string) (int64, error) {
	a, n, err := ReadAnswer(r)
	if err != nil {
		return n, err
	}
	if a.Text != "echo: "+text || len(a.ToolUses) > 0 {
		return n, fmt.Errorf("wrong reply: %.200s", a.line)
	}
	return n, nil
}

// Answer is a turn's answer: its first text block and the ids of its
// tool_use blocks (thinking blocks are passed over).
type Answer struct {
	Text     string
	ToolUses []string
	line     []byte
}

// ReadAnswer reads a session.sendMessage NDJSON answer to its terminal
// response, decoding only that line. It returns the bytes read.
func ReadAnswer(r io.Reader) (Answer, int64, error) {
	var n int64
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		n += int64(len(line))
		if bytes.HasPrefix(line, []byte(`{"jsonrpc":"2.0","method"`)) {
			continue
		}
		if len(bytes.TrimSpace(line)) > 0 {
			var term struct {
				Result *struct {
					Message struct {
						Content []struct {
							Type string `json:"type"`
							Text string `json:"text"`
							ID   string `json:"id"`
						} `json:"content"`
					} `json:"message"`
				} `json:"result"`
				Error json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(line, &term); err != nil {
				return Answer{}, n, fmt.Errorf("decode terminal: %w", err)
			}
			if term.Result == nil {
				return Answer{}, n, fmt.Errorf("turn failed: %s", term.Error)
			}
			a := Answer{line: line}
			for _, b := range term.Result.Message.Content {
				switch b.Type {
				case "text":
					if a.Text == "" {
						a.Text = b.Text
					}
				case "tool_use":
					a.ToolUses = append(a.ToolUses, b.ID)
				}
			}
			return a, n, nil
		}
		if err != nil {
			return Answer{}, n, fmt.Errorf("stream ended without a terminal response: %w", err)
		}
	}
}

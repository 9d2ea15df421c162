package fakeprovider

import (
	"net/http"
	"time"

	"github.com/bae-go/bae-go/internal/provider"
)

// Format is the wire format of the endpoint a request hit.
type Format string

// The two wire formats the fake serves.
const (
	Anthropic Format = "anthropic" // POST …/v1/messages
	OpenAI    Format = "openai"    // POST …/v1/chat/completions
)

// Recorded is one request the fake received.
type Recorded struct {
	// Seq numbers requests from 1 in arrival order.
	Seq    int
	Format Format
	// Lane is the path prefix before /v1/… ("" for the base URL).
	Lane     string
	Method   string
	Path     string
	Header   http.Header
	RawBody  []byte
	Body     map[string]any // nil when RawBody is not a JSON object
	Received time.Time
	// Cache is what the prompt cache billed (Server.Caching), else nil.
	Cache *CacheBilling
}

// Model is the request's "model" field.
func (r Recorded) Model() string {
	s, _ := r.Body["model"].(string)
	return s
}

// Stream reports a request asking for a streamed answer.
func (r Recorded) Stream() bool {
	b, _ := r.Body["stream"].(bool)
	return b
}

// Messages is the request's "messages" array (objects only).
func (r Recorded) Messages() []map[string]any {
	arr, _ := r.Body["messages"].([]any)
	out := make([]map[string]any, 0, len(arr))
	for _, m := range arr {
		if msg, ok := m.(map[string]any); ok {
			out = append(out, msg)
		}
	}
	return out
}

// ToolNames lists the advertised tool names in either wire format.
func (r Recorded) ToolNames() []string {
	arr, _ := r.Body["tools"].([]any)
	var names []string
	for _, t := range arr {
		tool, _ := t.(map[string]any)
		if fn, ok := tool["function"].(map[string]any); ok {
			tool = fn
		}
		if name, ok := tool["name"].(string); ok {
			names = append(names, name)
		}
	}
	return names
}

// LastUserText is the text of the most recent user message that has any
// (tool-result-only turns are skipped).
func (r Recorded) LastUserText() string {
	msgs := r.Messages()
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i]["role"] != "user" {
			continue
		}
		if text := provider.Text(msgs[i]["content"]); text != "" {
			return text
		}
	}
	return ""
}

// HasToolResult reports whether the messages after the last assistant turn
// return tool results: a tool_result block (Anthropic) or a role "tool"
// message (OpenAI).
func (r Recorded) HasToolResult() bool {
	msgs := r.Messages()
	for i := len(msgs) - 1; i >= 0 && msgs[i]["role"] != "assistant"; i-- {
		if msgs[i]["role"] == "tool" {
			return true
		}
		blocks, _ := msgs[i]["content"].([]any)
		for _, b := range blocks {
			if block, ok := b.(map[string]any); ok && block["type"] == "tool_result" {
				return true
			}
		}
	}
	return false
}

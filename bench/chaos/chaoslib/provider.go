package chaoslib

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// Markers in a user message choose the fake provider's answer.
const (
	markTool = "[tool]" // a client tool_use the driver answers
	markSlow = "[slow]" // a slowly streamed answer, for interrupts to land in
)

var (
	markMCPHTTP  = regexp.MustCompile(`\[mcp-http:([A-Za-z0-9-]+)\]`)
	markMCPStdio = regexp.MustCompile(`\[mcp-stdio:([A-Za-z0-9-]+)\]`)
	markSandbox  = regexp.MustCompile(`\[sh:([A-Za-z0-9-]+)\]`)
)

// Tool names the campaign declares or registers.
const (
	clientTool   = "chaos_probe"
	sandboxTool  = "chaos_sh"
	mcpHTTPName  = "chaoshttp"
	mcpStdioName = "chaosstdio"
	mcpHTTPTool  = "chaos_count_http"
	mcpStdioTool = "chaos_count_stdio"
)

// fakeWindow is the fake provider's context window in tokens: small, so
// long sessions compact (the server's entry says windowTokens).
const (
	fakeWindow   = 6000
	windowTokens = 4000
)

// providerFaults makes the fake provider misbehave for the next n
// requests of a kind: an error reply, a stream that stalls mid-answer, or
// a connection dropped mid-stream.
type providerFaults struct {
	mu        sync.Mutex
	kind      string
	remaining int
	stallFor  time.Duration
	release   func()
	injected  map[string]int
}

func (p *providerFaults) arm(kind string, n int) {
	p.mu.Lock()
	p.kind, p.remaining = kind, n
	p.mu.Unlock()
}

// take returns the fault the next request gets, "" for none.
func (p *providerFaults) take() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.remaining <= 0 {
		return ""
	}
	p.remaining--
	if p.injected == nil {
		p.injected = map[string]int{}
	}
	p.injected[p.kind]++
	return p.kind
}

// respond is the fake provider: summaries for the summarizer, a tool_use
// for a marked message, else the echo streamed in pieces; and the fault
// armed, if any.
func respond(pf *providerFaults, sandboxCmd func(tag string) string) func(fakeprovider.Recorded) fakeprovider.Reply {
	return func(rec fakeprovider.Recorded) fakeprovider.Reply {
		if strings.HasPrefix(rec.LastUserText(), compaction.SummaryInstruction[:40]) {
			return fakeprovider.Text(fmt.Sprintf("Summary: the user sent tagged chaos messages (%d bytes replaced).", len(rec.RawBody)))
		}
		reply := fakeprovider.Echo().Streamed(6, 15*time.Millisecond)
		// The markers are read from the last message only: a continuation
		// (tool results) is answered with text, but a message that follows
		// an abandoned pause carries the abandonment's results and its
		// own text.
		text := ""
		if msgs := rec.Messages(); len(msgs) > 0 && msgs[len(msgs)-1]["role"] == "user" {
			text = provider.Text(msgs[len(msgs)-1]["content"])
		}
		{
			switch {
			case strings.Contains(text, markTool):
				reply = fakeprovider.ToolUse("", clientTool, map[string]any{"n": text})
			case markMCPHTTP.MatchString(text):
				reply = fakeprovider.ToolUse("", mcpHTTPTool, map[string]any{"id": markMCPHTTP.FindStringSubmatch(text)[1]})
			case markMCPStdio.MatchString(text):
				reply = fakeprovider.ToolUse("", mcpStdioTool, map[string]any{"id": markMCPStdio.FindStringSubmatch(text)[1]})
			case markSandbox.MatchString(text):
				reply = fakeprovider.ToolUse("", sandboxTool, map[string]any{"command": sandboxCmd(markSandbox.FindStringSubmatch(text)[1])})
			case strings.Contains(text, markSlow):
				reply = fakeprovider.Echo().Streamed(30, 150*time.Millisecond)
			}
		}
		switch pf.take() {
		case "provider-error":
			if rand.IntN(2) == 0 {
				return fakeprovider.Error(529, "Overloaded")
			}
			return fakeprovider.Error(500, "Internal server error")
		case "provider-stall":
			return reply.Streamed(6, 15*time.Millisecond).HangStream(2)
		case "provider-drop":
			return reply.Streamed(6, 15*time.Millisecond).CutStream(2, "")
		}
		return reply
	}
}

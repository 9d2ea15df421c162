// Command mcp-words is a small stdio MCP server for trying server-side
// (dispatch "mcp") tools offline. It offers two tools:
//
//	count_words  {"text": "..."}  → "7 words"
//	reverse_text {"text": "..."}  → the text backwards
//
// bae-go runs it as a subprocess per session when a profile enables the
// MCP server "words" (see examples/bae-config/dev.toml):
//
//	[[mcp.servers]]
//	name      = "words"
//	transport = "stdio"
//	command   = "bin/mcp-words"
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	if err := server.ServeStdio(newServer()); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-words:", err)
		os.Exit(1)
	}
}

func newServer() *server.MCPServer {
	s := server.NewMCPServer("mcp-words", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("count_words",
		mcp.WithDescription("Count the words in a text"),
		mcp.WithString("text", mcp.Required(), mcp.Description("the text to count")),
	), textTool(func(text string) string {
		n := len(strings.Fields(text))
		if n == 1 {
			return "1 word"
		}
		return fmt.Sprintf("%d words", n)
	}))
	s.AddTool(mcp.NewTool("reverse_text",
		mcp.WithDescription("Reverse a text, character by character"),
		mcp.WithString("text", mcp.Required(), mcp.Description("the text to reverse")),
	), textTool(func(text string) string {
		r := []rune(text)
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
		return string(r)
	}))
	return s
}

// textTool adapts a text → text function to an MCP tool handler.
func textTool(fn func(string) string) server.ToolHandlerFunc {
	return func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		text, err := req.RequireString("text")
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		return mcp.NewToolResultText(fn(text)), nil
	}
}

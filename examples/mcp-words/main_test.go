package main

import (
	"context"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTools drives the server through an in-process MCP client, the same
// protocol bae-go speaks to it over stdio.
func TestTools(t *testing.T) {
	ctx := context.Background()
	c, err := client.NewInProcessClient(newServer())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Start(ctx))
	_, err = c.Initialize(ctx, mcp.InitializeRequest{})
	require.NoError(t, err)

	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	require.NoError(t, err)
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	assert.ElementsMatch(t, []string{"count_words", "reverse_text"}, names)

	call := func(name, text string) *mcp.CallToolResult {
		req := mcp.CallToolRequest{}
		req.Params.Name = name
		req.Params.Arguments = map[string]any{"text": text}
		res, err := c.CallTool(ctx, req)
		require.NoError(t, err)
		return res
	}
	text := func(res *mcp.CallToolResult) string {
		require.Len(t, res.Content, 1)
		return res.Content[0].(mcp.TextContent).Text
	}
	assert.Equal(t, "4 words", text(call("count_words", "the quick brown fox")))
	assert.Equal(t, "1 word", text(call("count_words", "  hi ")))
	assert.Equal(t, "olleh", text(call("reverse_text", "hello")))

	req := mcp.CallToolRequest{}
	req.Params.Name = "count_words"
	res, err := c.CallTool(ctx, req)
	require.NoError(t, err)
	assert.True(t, res.IsError, "a missing argument is a tool error, not a crash")
}

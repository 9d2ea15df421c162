package mcp

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// echoServerArg, as the test binary's first argument, turns it into a stdio
// MCP server, so stdio tests need no separate build step.
const echoServerArg = "-bae-mcp-echoserver"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == echoServerArg {
		if err := server.ServeStdio(newEchoServer()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// newEchoServer is the MCP server used by every transport's tests.
func newEchoServer() *server.MCPServer {
	s := server.NewMCPServer("echoserver", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("echo",
		mcp.WithDescription("Echo the text argument back"),
		mcp.WithString("text", mcp.Required(), mcp.Description("text to echo")),
	), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		text, err := req.RequireString("text")
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		return mcp.NewToolResultText(text), nil
	})
	// No description, no arguments: exercises the null/default paths.
	s.AddTool(mcp.NewTool("list_files"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("README.md\ndata.csv"), nil
	})
	s.AddTool(mcp.NewTool("crash", mcp.WithDescription("Exit the process mid-call")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(mcp.NewTool("fail", mcp.WithDescription("Return an error result")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultError("boom"), nil
		})
	s.AddTool(mcp.NewTool("pid", mcp.WithDescription("Report the server's process id")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(strconv.Itoa(os.Getpid())), nil
		})
	s.AddTool(mcp.NewTool("structured", mcp.WithDescription("Return structured content")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultStructured(map[string]any{"count": 2, "big": int64(9007199254740993)}, "2 files"), nil
		})
	s.AddTool(mcp.NewTool("env", mcp.WithDescription("Report the server's environment, one NAME=value a line")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(strings.Join(os.Environ(), "\n")), nil
		})
	s.AddTool(mcp.NewTool("hang", mcp.WithDescription("Never answer")),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	return s
}

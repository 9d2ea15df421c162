package tests

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// fsServerArg, as the test binary's first argument, turns it into the stdio
// MCP server the tool tests configure, so no separate build step is needed.
const fsServerArg = "-bae-tests-mcp-fs"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == fsServerArg {
		if err := server.ServeStdio(newFSServer()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	// Under -race every child would linger 1s at exit; GORACE is read at
	// process start, so this only affects the MCP server children.
	if _, ok := os.LookupEnv("GORACE"); !ok {
		_ = os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}

// fsListing is what list_files answers.
const fsListing = "README.md\ndata.csv"

// newFSServer is the MCP server behind both the stdio and the HTTP tests.
func newFSServer() *server.MCPServer {
	s := server.NewMCPServer("fs", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("list_files", mcp.WithDescription("List the files"), mcp.WithString("path")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(fsListing), nil
		})
	s.AddTool(mcp.NewTool("pid", mcp.WithDescription("Report the server's process id")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(strconv.Itoa(os.Getpid())), nil
		})
	s.AddTool(mcp.NewTool("crash", mcp.WithDescription("Exit the process mid-call")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	// hang blocks until the call is cancelled, unless the file named by
	// $BAE_TEST_FS_RELEASE exists: restart tests interrupt the first call
	// and let the retry through.
	s.AddTool(mcp.NewTool("hang", mcp.WithDescription("Block until released")),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if path := os.Getenv(fsReleaseEnv); path != "" {
				if _, err := os.Stat(path); err == nil {
					return mcp.NewToolResultText("released"), nil
				}
			}
			<-ctx.Done()
			return nil, ctx.Err()
		})
	// read_big answers about 3 KB naming its path, for sessions whose MCP
	// results fill the context window.
	s.AddTool(mcp.NewTool("read_big", mcp.WithDescription("Read a large file"), mcp.WithString("path")),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(strings.Repeat("a line of "+req.GetString("path", "?")+"\n", 150)), nil
		})
	// create_issue answers with the arguments it ran with: the approval
	// tests hold it and check what ran (its schema requires both).
	s.AddTool(mcp.NewTool("create_issue", mcp.WithDescription("Create an issue"),
		mcp.WithString("repo", mcp.Required()), mcp.WithString("title", mcp.Required())),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			text := "created " + req.GetString("repo", "?") + ": " + req.GetString("title", "?")
			if path := os.Getenv(fsCallsEnv); path != "" {
				// Each run leaves a line: the kill tests count them.
				f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
				if err != nil {
					return nil, err
				}
				_, err = f.WriteString(text + "\n")
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return nil, err
				}
			}
			return mcp.NewToolResultText(text), nil
		})
	return s
}

// fsReleaseEnv names the file that releases the hang tool.
const fsReleaseEnv = "BAE_TEST_FS_RELEASE"

// fsCallsEnv names the file create_issue appends a line to per run.
const fsCallsEnv = "BAE_TEST_FS_CALLS"

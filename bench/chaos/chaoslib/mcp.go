package chaoslib

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// StdioServerArg, as a binary's first argument, makes the campaign's binary
// (bench/chaos, or the tests/chaos test binary) the stdio MCP server:
// MaybeServeStdioMCP must be called first thing in main / TestMain.
const StdioServerArg = "-bae-chaos-mcp-stdio"

// mcpHold is how long an MCP call runs: the window a fault lands in.
const mcpHold = 400 * time.Millisecond

// mcpCall is one call an MCP server received.
type mcpCall struct {
	ID         string
	Start, End time.Time // End is zero for a call that never answered
}

// MaybeServeStdioMCP serves the stdio MCP counter and exits when the
// process was started as one; it returns otherwise. The counter appends
// "start <id> <unix-nanos>" and "end <id> <unix-nanos>" lines to the file
// named by its second argument (O_APPEND: the stdio servers of every
// replica share it).
func MaybeServeStdioMCP() {
	if len(os.Args) < 3 || os.Args[1] != StdioServerArg {
		return
	}
	f, err := os.OpenFile(os.Args[2], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s := server.NewMCPServer("chaos-stdio", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool(mcpStdioTool, mcp.WithDescription("Counts its calls; run by the server over stdio."), mcp.WithString("id", mcp.Required())),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			id, err := req.RequireString("id")
			if err != nil {
				return mcp.NewToolResultError(err.Error()), nil
			}
			fmt.Fprintf(f, "start %s %d\n", id, time.Now().UnixNano())
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(mcpHold):
			}
			fmt.Fprintf(f, "end %s %d\n", id, time.Now().UnixNano())
			return mcp.NewToolResultText("ok " + id), nil
		})
	if err := server.ServeStdio(s); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// readStdioCalls reads the stdio counter file.
func readStdioCalls(path string) (map[string][]mcpCall, error) {
	out := map[string][]mcpCall{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kind, id string
		var ns int64
		if _, err := fmt.Sscanf(sc.Text(), "%s %s %d", &kind, &id, &ns); err != nil {
			continue
		}
		t := time.Unix(0, ns)
		switch kind {
		case "start":
			out[id] = append(out[id], mcpCall{ID: id, Start: t})
		case "end":
			calls := out[id]
			for i := len(calls) - 1; i >= 0; i-- {
				if calls[i].End.IsZero() {
					calls[i].End = t
					break
				}
			}
		}
	}
	return out, sc.Err()
}

// stdioTOML registers the stdio counter, run as this very binary.
func stdioTOML(counterFile string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("\n[[mcp.servers]]\nname = %q\ntransport = \"stdio\"\ncommand = %q\nargs = [%q, %q]\n",
		mcpStdioName, exe, StdioServerArg, counterFile), nil
}

// httpMCP is the streamable-HTTP MCP counter, in the campaign's process
// (it outlives every replica).
type httpMCP struct {
	srv   *http.Server
	url   string
	mu    sync.Mutex
	calls map[string][]mcpCall
}

func startHTTPMCP() (*httpMCP, error) {
	m := &httpMCP{calls: map[string][]mcpCall{}}
	s := server.NewMCPServer("chaos-http", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool(mcpHTTPTool, mcp.WithDescription("Counts its calls; run by the server over HTTP."), mcp.WithString("id", mcp.Required())), m.handle)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m.url = "http://" + ln.Addr().String() + "/mcp"
	m.srv = &http.Server{Handler: server.NewStreamableHTTPServer(s, server.WithStateLess(true)), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

func (m *httpMCP) handle(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, err := req.RequireString("id")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	m.mu.Lock()
	m.calls[id] = append(m.calls[id], mcpCall{ID: id, Start: time.Now()})
	i := len(m.calls[id]) - 1
	m.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(mcpHold):
	}
	m.mu.Lock()
	m.calls[id][i].End = time.Now()
	m.mu.Unlock()
	return mcp.NewToolResultText("ok " + id), nil
}

func (m *httpMCP) snapshot() map[string][]mcpCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]mcpCall{}
	for k, v := range m.calls {
		out[k] = append([]mcpCall(nil), v...)
	}
	return out
}

func (m *httpMCP) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
}

func (m *httpMCP) toml() string {
	return fmt.Sprintf("\n[[mcp.servers]]\nname = %q\ntransport = \"http\"\nurl = %q\n", mcpHTTPName, m.url)
}

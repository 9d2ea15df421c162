package crashlib

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/sandbox"
)

const (
	// sandboxTool is the Auto-mode sandbox tool every session declares.
	sandboxTool = "crash_sh"
	// mcpServerName and mcpTool name the bench's own MCP server and tool.
	mcpServerName = "crashmcp"
	mcpTool       = "crash_count"
	// counterDir holds one counter file per sandbox turn in the container:
	// every run of the command appends a line, so "ran twice" is two lines.
	counterDir = "/tmp/crash"
)

// sandboxCommand appends a line to the turn's counter, runs for d (the
// window a kill aims at), and prints how many runs the counter saw.
func sandboxCommand(tag string, d time.Duration) string {
	return fmt.Sprintf("mkdir -p %s && echo run >> %s/%s && sleep %s && wc -l < %s/%s",
		counterDir, counterDir, tag, strconv.FormatFloat(d.Seconds(), 'f', 3, 64), counterDir, tag)
}

var counterRe = regexp.MustCompile(regexp.QuoteMeta(counterDir) + `/([A-Za-z0-9_-]+)`)

// counterTag is the tag of a sandbox command built by sandboxCommand.
func counterTag(command string) string {
	if m := counterRe.FindStringSubmatch(command); m != nil {
		return m[1]
	}
	return ""
}

// mcpCounter is an MCP server (streamable HTTP, in the bench's process, so
// it outlives every baesrv) whose one tool counts its calls per id: a
// repeated call is observed where it runs.
type mcpCounter struct {
	srv   *http.Server
	url   string
	hold  time.Duration
	aim   *aimer
	mu    sync.Mutex
	calls map[string]int
}

func startMCPCounter(hold time.Duration, aim *aimer) (*mcpCounter, error) {
	m := &mcpCounter{hold: hold, aim: aim, calls: map[string]int{}}
	s := server.NewMCPServer("crash-mcp", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool(mcpTool,
		mcp.WithDescription("Counts its calls per id; run by the server."),
		mcp.WithString("id", mcp.Required()),
	), m.handle)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("mcp counter listen: %w", err)
	}
	m.url = "http://" + ln.Addr().String() + "/mcp"
	m.srv = &http.Server{Handler: server.NewStreamableHTTPServer(s, server.WithStateLess(true)), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

func (m *mcpCounter) handle(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, err := req.RequireString("id")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	m.mu.Lock()
	m.calls[id]++
	n := m.calls[id]
	m.mu.Unlock()
	// The call is running: a kill aimed at MCP execution lands now.
	m.aim.hit(PointMCP)
	t := time.NewTimer(m.hold)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	return mcp.NewToolResultText(strconv.Itoa(n)), nil
}

func (m *mcpCounter) count(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[id]
}

func (m *mcpCounter) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
}

// sandboxes is the bench's view of the Docker engine: the image it built
// and the session containers baesrv started. It uses the docker CLI, the
// way an operator would look.
type sandboxes struct {
	image string
}

func buildSandboxImage(ctx context.Context) (*sandboxes, error) {
	if err := sandbox.EngineAvailable(ctx); err != nil {
		return nil, fmt.Errorf("sandbox turns need a Docker engine: %w", err)
	}
	tag := "bae-crash:" + ids.New("")[:12]
	if err := sandbox.BuildBusyboxImage(ctx, tag, "bench/crash"); err != nil {
		return nil, err
	}
	return &sandboxes{image: tag}, nil
}

func docker(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out.String(), nil
}

// hasRun reports whether the counter of tag exists in the container: the
// command is running (or ran).
func (sb *sandboxes) hasRun(ctx context.Context, container, tag string) bool {
	_, err := docker(ctx, "exec", container, "test", "-s", counterDir+"/"+tag)
	return err == nil
}

// close removes the image and every container started from it: the
// session containers baesrv started, whatever state they are in.
func (sb *sandboxes) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return sandbox.RemoveTestImage(ctx, sb.image)
}

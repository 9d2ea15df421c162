// Package mcp manages this process's MCP (Model Context Protocol) client
// connections, keyed by (session id, server name).
//
// Connections are process-local and disposable: a session's workflow may run
// its activities on any replica, so CallTool connects (and initializes) on
// demand whenever this process has no live connection for the pair, and a
// connection whose transport broke is dropped so the next call reconnects.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

const (
	defaultConnectTimeout = 10 * time.Second
	defaultCallTimeout    = 60 * time.Second
)

var (
	// ErrUnknownServer means the name is not in the MCP server registry.
	ErrUnknownServer = errors.New("MCP server not configured")
	// ErrClosed means the Manager (or, for a racing call, the session) was
	// closed.
	ErrClosed = errors.New("MCP manager closed")
)

// TransportError is returned by CallTool when the connection itself failed
// (process exited, socket dropped, no reply in time). The connection has been
// dropped; the next call reconnects. Error() is human-readable and free of
// secrets, fit for a tool result.
type TransportError struct {
	Server string
	Msg    string
	Err    error
}

func (e *TransportError) Error() string { return fmt.Sprintf("MCP server %q: %s", e.Server, e.Msg) }
func (e *TransportError) Unwrap() error { return e.Err }

// ServerConfig is one [[mcp.servers]] entry. Its fields match
// config.MCPServer one for one, so a conversion ServerConfig(x) works.
type ServerConfig struct {
	Name      string
	Transport string // "stdio" | "sse" | "http"
	Command   string
	Args      []string
	URL       string
	// Headers values may contain ${VAR} tokens, resolved at connect time.
	Headers map[string]string
}

// Options configures a Manager.
type Options struct {
	// Lookup resolves a server name from the registry. Nil means an empty
	// registry.
	Lookup func(name string) (ServerConfig, bool)
	// Env resolves ${VAR} tokens in headers, command and args. Default
	// os.LookupEnv.
	Env func(string) (string, bool)
	// Log defaults to slog.Default().
	Log *slog.Logger
	// ConnectTimeout bounds spawning/dialing plus initialize. Default 10s.
	ConnectTimeout time.Duration
	// CallTimeout bounds each tools/list and tools/call. Default 60s. A call
	// that exceeds it is treated as a wedged server: the connection is dropped.
	CallTimeout time.Duration
}

// Manager owns the MCP connections of this process. It is safe for
// concurrent use.
type Manager struct {
	lookup         func(string) (ServerConfig, bool)
	env            func(string) (string, bool)
	log            *slog.Logger
	connectTimeout time.Duration
	callTimeout    time.Duration
	clientInfo     mcp.Implementation

	mu       sync.Mutex
	closed   bool
	sessions map[string]map[string]*slot // session id -> server name -> slot
}

// slot serialises connecting for one (session, server), so concurrent calls
// share a single connection (one subprocess) instead of racing to open two.
type slot struct {
	mu   sync.Mutex
	conn *conn
	dead bool // removed by CloseSession/Close; never connect again
}

// New returns a Manager with defaults filled in.
func New(opts Options) *Manager {
	m := &Manager{
		lookup:         opts.Lookup,
		env:            opts.Env,
		log:            opts.Log,
		connectTimeout: opts.ConnectTimeout,
		callTimeout:    opts.CallTimeout,
		clientInfo:     mcp.Implementation{Name: "bae-go", Version: "dev"},
		sessions:       make(map[string]map[string]*slot),
	}
	if m.lookup == nil {
		m.lookup = func(string) (ServerConfig, bool) { return ServerConfig{}, false }
	}
	if m.env == nil {
		m.env = os.LookupEnv
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.connectTimeout <= 0 {
		m.connectTimeout = defaultConnectTimeout
	}
	if m.callTimeout <= 0 {
		m.callTimeout = defaultCallTimeout
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		m.clientInfo.Version = bi.Main.Version
	}
	return m
}

// Tool is one entry of DiscoverTools' result.
type Tool struct {
	Server      string          `json:"server"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// DiscoverTools connects each named server for the session (in parallel,
// reusing live connections), initializes it and lists its tools. Unknown
// names and servers that fail to connect or list are logged and skipped,
// never fatal. The result is a JSON array of Tool in serverNames order;
// connections stay open for CallTool. The error is non-nil only when ctx
// ended or the Manager is closed.
func (m *Manager) DiscoverTools(ctx context.Context, sessionID string, serverNames []string) (json.RawMessage, error) {
	if m.isClosed() {
		return nil, ErrClosed
	}
	seen := make(map[string]bool, len(serverNames))
	perServer := make([][]Tool, len(serverNames))
	var wg sync.WaitGroup
	for i, name := range serverNames {
		if seen[name] {
			continue
		}
		seen[name] = true
		cfg, ok := m.lookup(name)
		if !ok {
			m.log.ErrorContext(ctx, "configured MCP server not found in registry; skipping",
				"session_id", sessionID, "mcp_server_name", name)
			continue
		}
		wg.Go(func() { perServer[i] = m.discoverOne(ctx, sessionID, cfg) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("discover MCP tools: %w", err)
	}
	tools := []Tool{}
	for _, ts := range perServer {
		tools = append(tools, ts...)
	}
	out, err := json.Marshal(tools)
	if err != nil {
		return nil, fmt.Errorf("encode MCP tools: %w", err)
	}
	return out, nil
}

func (m *Manager) discoverOne(ctx context.Context, sessionID string, cfg ServerConfig) []Tool {
	log := m.log.With("session_id", sessionID, "mcp_server_name", cfg.Name, "transport", cfg.Transport)
	s, c, err := m.acquire(ctx, sessionID, cfg)
	if err != nil {
		log.ErrorContext(ctx, "MCP server failed to connect; skipping", "error", err)
		return nil
	}
	listCtx, cancel := context.WithTimeout(ctx, m.callTimeout)
	defer cancel()
	res, err := c.client.ListTools(listCtx, mcp.ListToolsRequest{})
	if err != nil {
		// A server we cannot list is of no use to the session; free it.
		m.drop(s, c)
		log.ErrorContext(ctx, "MCP tools/list failed; skipping", "error", err)
		return nil
	}
	tools := make([]Tool, 0, len(res.Tools))
	for _, t := range res.Tools {
		schema, err := inputSchema(t)
		if err != nil {
			log.ErrorContext(ctx, "MCP tool has an unencodable input schema; skipping tool", "tool", t.Name, "error", err)
			continue
		}
		tool := Tool{Server: cfg.Name, Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tool.Description = &t.Description
		}
		tools = append(tools, tool)
	}
	log.InfoContext(ctx, "MCP server connected", "tools", len(tools), "pid", c.pid())
	return tools
}

// inputSchema is the tool's JSON schema, defaulting to an open object because
// providers require an object schema.
func inputSchema(t mcp.Tool) (json.RawMessage, error) {
	if len(t.RawInputSchema) > 0 {
		return t.RawInputSchema, nil
	}
	if t.InputSchema.Type == "" {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	return json.Marshal(t.InputSchema)
}

// callResult is the MCP CallToolResult as returned by CallTool; isError is
// always present.
type callResult struct {
	Content           []json.RawMessage `json:"content"`
	IsError           bool              `json:"isError"`
	StructuredContent json.RawMessage   `json:"structuredContent,omitempty"`
}

// CallTool runs tools/call on the session's connection to server, connecting
// and initializing first if this process has none. It returns the
// CallToolResult as JSON ({"content":[...],"isError":bool[,"structuredContent":...]});
// a tool-level failure is a result with isError true, not an error.
//
// Errors: ErrUnknownServer; a connect error (unset ${VAR}, missing binary,
// unreachable URL); *TransportError when the connection broke mid-call (it
// has been dropped, so the next call reconnects); or a JSON-RPC error from the
// server (connection kept).
func (m *Manager) CallTool(ctx context.Context, sessionID, server, tool string, input json.RawMessage) (json.RawMessage, error) {
	cfg, ok := m.lookup(server)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownServer, server)
	}
	args, err := toolArguments(input)
	if err != nil {
		return nil, fmt.Errorf("MCP tool %q: %w", tool, err)
	}
	s, c, err := m.acquire(ctx, sessionID, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to MCP server %q: %w", server, err)
	}

	callCtx, cancel := context.WithTimeout(ctx, m.callTimeout)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.client.CallTool(callCtx, req)
	if err != nil {
		return nil, m.callFailed(ctx, callCtx, sessionID, s, c, tool, err)
	}
	out, err := encodeResult(res)
	if err != nil {
		return nil, fmt.Errorf("MCP server %q: encode tools/call %q result: %w", server, tool, err)
	}
	return out, nil
}

// callFailed classifies a tools/call failure, dropping the connection when
// the transport itself is broken.
func (m *Manager) callFailed(ctx, callCtx context.Context, sessionID string, s *slot, c *conn, tool string, err error) error {
	var te *transport.Error
	if !errors.As(err, &te) {
		// A JSON-RPC error reply: the server is alive and answering.
		return fmt.Errorf("MCP server %q: tools/call %q: %w", c.server, tool, err)
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The caller gave up; mcp-go has told the server to cancel, and the
		// connection itself is fine.
		return fmt.Errorf("MCP server %q: tools/call %q: %w", c.server, tool, ctxErr)
	}
	timedOut := callCtx.Err() != nil
	closeErr := m.drop(s, c)

	var msg string
	switch {
	case timedOut:
		msg = fmt.Sprintf("no reply to tools/call %q within %s; connection dropped", tool, m.callTimeout)
	case c.transport == TransportStdio && errors.Is(err, transport.ErrTransportClosed):
		msg = "stdio process exited unexpectedly"
		var exitErr interface{ ExitCode() int }
		if errors.As(closeErr, &exitErr) {
			msg = fmt.Sprintf("%s (%v)", msg, closeErr)
		}
	default:
		msg = te.Error()
	}
	m.log.WarnContext(ctx, "MCP connection dropped after transport failure",
		"session_id", sessionID, "mcp_server_name", c.server, "tool", tool, "error", msg)
	return &TransportError{Server: c.server, Msg: msg, Err: err}
}

// toolArguments validates the input as a JSON object; empty or null means {}.
func toolArguments(input json.RawMessage) (any, error) {
	if len(input) == 0 || string(input) == "null" {
		return map[string]any{}, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(input, &obj); err != nil {
		return nil, fmt.Errorf("input must be a JSON object: %w", err)
	}
	if obj == nil {
		return map[string]any{}, nil
	}
	// Passed through as raw bytes so large integers keep their precision.
	return input, nil
}

func encodeResult(res *mcp.CallToolResult) (json.RawMessage, error) {
	out := callResult{Content: make([]json.RawMessage, 0, len(res.Content)), IsError: res.IsError}
	for _, block := range res.Content {
		b, err := json.Marshal(block)
		if err != nil {
			return nil, err
		}
		out.Content = append(out.Content, b)
	}
	switch {
	case len(res.RawStructuredContent) > 0:
		out.StructuredContent = res.RawStructuredContent
	case res.StructuredContent != nil:
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, err
		}
		out.StructuredContent = b
	}
	return json.Marshal(out)
}

// acquire returns the live connection for (sessionID, cfg.Name), dialing it
// if there is none.
func (m *Manager) acquire(ctx context.Context, sessionID string, cfg ServerConfig) (*slot, *conn, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, nil, ErrClosed
	}
	servers := m.sessions[sessionID]
	if servers == nil {
		servers = make(map[string]*slot)
		m.sessions[sessionID] = servers
	}
	s := servers[cfg.Name]
	if s == nil {
		s = &slot{}
		servers[cfg.Name] = s
	}
	m.mu.Unlock()

	// Holding s.mu across dial is deliberate: callers for the same pair wait
	// for this connection, and CloseSession waits rather than missing it.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return nil, nil, fmt.Errorf("session %q closed: %w", sessionID, ErrClosed)
	}
	if s.conn != nil {
		return s, s.conn, nil
	}
	c, err := m.dial(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	s.conn = c
	return s, c, nil
}

// drop forgets c (if it is still the slot's connection) and closes it,
// returning the close error.
func (m *Manager) drop(s *slot, c *conn) error {
	s.mu.Lock()
	if s.conn == c {
		s.conn = nil
	}
	s.mu.Unlock()
	return c.close()
}

// CloseSession closes every connection of the session, terminating and
// reaping stdio subprocesses, and returns once they are gone.
func (m *Manager) CloseSession(sessionID string) {
	m.mu.Lock()
	servers := m.sessions[sessionID]
	delete(m.sessions, sessionID)
	m.mu.Unlock()

	slots := make([]*slot, 0, len(servers))
	for _, s := range servers {
		slots = append(slots, s)
	}
	m.closeSlots(slots, sessionID)
}

// Close closes every connection (server shutdown). Later calls fail with
// ErrClosed.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	sessions := m.sessions
	m.sessions = make(map[string]map[string]*slot)
	m.mu.Unlock()

	var wg sync.WaitGroup
	for id, servers := range sessions {
		slots := make([]*slot, 0, len(servers))
		for _, s := range servers {
			slots = append(slots, s)
		}
		wg.Go(func() { m.closeSlots(slots, id) })
	}
	wg.Wait()
}

// closeSlots kills the slots' connections in parallel, since a stdio server
// that ignores stdin EOF takes seconds to be signalled down.
func (m *Manager) closeSlots(slots []*slot, sessionID string) {
	var wg sync.WaitGroup
	for _, s := range slots {
		wg.Go(func() {
			s.mu.Lock()
			s.dead = true
			c := s.conn
			s.conn = nil
			s.mu.Unlock()
			if c == nil {
				return
			}
			err := c.close()
			m.log.Debug("MCP connection closed", "session_id", sessionID,
				"mcp_server_name", c.server, "pid", c.pid(), "exit", err)
		})
	}
	wg.Wait()
}

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

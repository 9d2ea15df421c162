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
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/bae-go/bae-go/internal/config"
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

// ServerConfig is one [[mcp.servers]] entry. It is an alias so a
// (*config.File).MCPServer method value can serve directly as Options.Lookup.
// Header values (and stdio command/args) may hold ${VAR} tokens, resolved
// only at connect time.
type ServerConfig = config.MCPServer

// Options configures a Manager.
type Options struct {
	// Lookup resolves a server name from the registry, e.g. the method
	// value cfgFile.MCPServer. Nil means an empty registry.
	Lookup func(name string) (ServerConfig, bool)
	// Env resolves ${VAR} tokens in headers, command and args. Default
	// os.LookupEnv.
	Env func(string) (string, bool)
	// Log is required.
	Log *slog.Logger
	// ConnectTimeout bounds spawning/dialing plus initialize. Default 10s.
	ConnectTimeout time.Duration
	// CallTimeout bounds each tools/list and tools/call. Default 60s. A call
	// that exceeds it is treated as a wedged server: the connection is dropped.
	CallTimeout time.Duration
	// IdleTimeout, when positive, closes connections unused for that long.
	// It bounds the life of connections a replica opened on demand for a
	// session whose CloseSession runs elsewhere. Zero disables it.
	IdleTimeout time.Duration
}

// Manager owns the MCP connections of this process. It is safe for
// concurrent use.
type Manager struct {
	lookup         func(string) (ServerConfig, bool)
	env            func(string) (string, bool)
	log            *slog.Logger
	connectTimeout time.Duration
	callTimeout    time.Duration
	idleTimeout    time.Duration
	clientInfo     mcp.Implementation

	stopJanitor chan struct{} // nil without IdleTimeout
	janitorDone chan struct{}

	mu       sync.Mutex
	closed   bool
	sessions map[string]map[string]*slot // session id -> server name -> slot
}

// slot serialises connecting for one (session, server), so concurrent calls
// share a single connection (one subprocess) instead of racing to open two.
type slot struct {
	session, server string

	// Guarded by Manager.mu: users holding the slot, and when the last left.
	// The idle reaper removes only slots nobody holds, so it never races a
	// dial or an in-flight call.
	refs     int
	lastUsed time.Time

	mu   sync.Mutex
	conn *conn
	dead bool // removed by CloseSession/Close; never connect again
	// live mirrors conn != nil for LiveSessions, which must not wait on mu
	// (held across a dial).
	live atomic.Bool
}

// New returns a Manager with defaults filled in.
func New(opts Options) *Manager {
	m := &Manager{
		lookup:         opts.Lookup,
		env:            opts.Env,
		log:            opts.Log,
		connectTimeout: opts.ConnectTimeout,
		callTimeout:    opts.CallTimeout,
		idleTimeout:    opts.IdleTimeout,
		clientInfo:     mcp.Implementation{Name: "bae-go", Version: "dev"},
		sessions:       make(map[string]map[string]*slot),
	}
	if m.lookup == nil {
		m.lookup = func(string) (ServerConfig, bool) { return ServerConfig{}, false }
	}
	if m.env == nil {
		m.env = os.LookupEnv
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
	if m.idleTimeout > 0 {
		m.stopJanitor = make(chan struct{})
		m.janitorDone = make(chan struct{})
		go m.janitor()
	}
	return m
}

// janitor closes idle connections until Close.
func (m *Manager) janitor() {
	defer close(m.janitorDone)
	tick := time.NewTicker(min(max(m.idleTimeout/2, 10*time.Millisecond), time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-m.stopJanitor:
			return
		case now := <-tick.C:
			m.reapIdle(now)
		}
	}
}

func (m *Manager) reapIdle(now time.Time) {
	var idle []*slot
	m.mu.Lock()
	for id, servers := range m.sessions {
		for name, s := range servers {
			if s.refs == 0 && now.Sub(s.lastUsed) >= m.idleTimeout {
				delete(servers, name)
				idle = append(idle, s)
			}
		}
		if len(servers) == 0 {
			delete(m.sessions, id)
		}
	}
	m.mu.Unlock()
	m.closeSlots(idle)
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
	defer m.release(s)
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
	defer m.release(s)

	callCtx, cancel := context.WithTimeout(ctx, m.callTimeout)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.client.CallTool(callCtx, req)
	if err != nil {
		return nil, m.callFailed(ctx, callCtx, s, c, tool, err)
	}
	out, err := encodeResult(res)
	if err != nil {
		return nil, fmt.Errorf("MCP server %q: encode tools/call %q result: %w", server, tool, err)
	}
	return out, nil
}

// callFailed classifies a tools/call failure, dropping the connection when
// the transport itself is broken.
func (m *Manager) callFailed(ctx, callCtx context.Context, s *slot, c *conn, tool string, err error) error {
	var te *transport.Error
	if !errors.As(err, &te) {
		// A JSON-RPC error reply: the server is alive and answering.
		return c.redacted(fmt.Errorf("MCP server %q: tools/call %q: %w", c.server, tool, err))
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
		msg = c.redacted(te).Error()
	}
	m.log.WarnContext(ctx, "MCP connection dropped after transport failure",
		"session_id", s.session, "mcp_server_name", c.server, "tool", tool, "error", msg)
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
// if there is none. On success the caller must release the slot when done.
func (m *Manager) acquire(ctx context.Context, sessionID string, cfg ServerConfig) (*slot, *conn, error) {
	s, err := m.hold(sessionID, cfg.Name)
	if err != nil {
		return nil, nil, err
	}
	c, err := m.connect(ctx, s, cfg)
	if err != nil {
		m.release(s)
		return nil, nil, err
	}
	return s, c, nil
}

// hold finds or creates the slot and takes a reference on it.
func (m *Manager) hold(sessionID, server string) (*slot, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	servers := m.sessions[sessionID]
	if servers == nil {
		servers = make(map[string]*slot)
		m.sessions[sessionID] = servers
	}
	s := servers[server]
	if s == nil {
		s = &slot{session: sessionID, server: server}
		servers[server] = s
	}
	s.refs++
	m.mu.Unlock()
	return s, nil
}

func (m *Manager) release(s *slot) {
	m.mu.Lock()
	s.refs--
	s.lastUsed = time.Now()
	m.mu.Unlock()
}

// connect returns the slot's connection, dialing it if there is none.
func (m *Manager) connect(ctx context.Context, s *slot, cfg ServerConfig) (*conn, error) {
	// Holding s.mu across dial is deliberate: callers for the same pair wait
	// for this connection, and CloseSession waits rather than missing it.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return nil, fmt.Errorf("session %q closed: %w", s.session, ErrClosed)
	}
	if s.conn != nil {
		return s.conn, nil
	}
	c, err := m.dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.conn = c
	s.live.Store(true)
	return c, nil
}

// drop forgets c (if it is still the slot's connection) and closes it,
// returning the close error.
func (m *Manager) drop(s *slot, c *conn) error {
	s.mu.Lock()
	if s.conn == c {
		s.conn = nil
		s.live.Store(false)
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
	m.closeSlots(slots)
}

// Close closes every connection (server shutdown). Later calls fail with
// ErrClosed.
func (m *Manager) Close() {
	m.mu.Lock()
	wasClosed := m.closed
	m.closed = true
	sessions := m.sessions
	m.sessions = make(map[string]map[string]*slot)
	m.mu.Unlock()

	if m.stopJanitor != nil && !wasClosed {
		close(m.stopJanitor)
		<-m.janitorDone
	}
	var slots []*slot
	for _, servers := range sessions {
		for _, s := range servers {
			slots = append(slots, s)
		}
	}
	m.closeSlots(slots)
}

// closeSlots kills the slots' connections in parallel, since a stdio server
// that ignores stdin EOF takes seconds to be signalled down.
func (m *Manager) closeSlots(slots []*slot) {
	var wg sync.WaitGroup
	for _, s := range slots {
		wg.Go(func() {
			s.mu.Lock()
			s.dead = true
			c := s.conn
			s.conn = nil
			s.live.Store(false)
			s.mu.Unlock()
			if c == nil {
				return
			}
			err := c.close()
			m.log.Debug("MCP connection closed", "session_id", s.session,
				"mcp_server_name", s.server, "pid", c.pid(), "exit", err)
		})
	}
	wg.Wait()
}

// LiveSessions is how many sessions have at least one open MCP connection
// in this process (the bae.mcp.sessions.live gauge).
func (m *Manager) LiveSessions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, servers := range m.sessions {
		for _, s := range servers {
			if s.live.Load() {
				n++
				break
			}
		}
	}
	return n
}

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Option configures Connect, Join and Attach.
type Option func(*options)

type options struct {
	tools         []Tool // declared at open/join and dispatched
	dynamic       []Tool // dispatched, declared later via UpdateClientTools
	sandboxTools  []ToolSpec
	subagentTools []SubagentToolSpec
	hooks         Hooks
	closeHooks    []CloseHook
	whenBusy      WhenBusy
	approvals     ApprovalHandler
	outcomes      func(ctx context.Context, out ApprovalOutcome) error
}

// CloseHook runs at the start of Session.Close, before the session is
// deleted (builtin tools stop local sandboxes and subagents here).
type CloseHook func(ctx context.Context, s *Session) error

// WithTool declares a client-side tool and registers its handler.
func WithTool(t Tool) Option { return func(o *options) { o.tools = append(o.tools, t) } }

// WithTools is WithTool for several tools.
func WithTools(ts ...Tool) Option { return func(o *options) { o.tools = append(o.tools, ts...) } }

// WithDynamicTool registers a handler without declaring the tool at open;
// declare it later with UpdateClientTools (the local subagent status tool
// appears and disappears this way).
func WithDynamicTool(t Tool) Option { return func(o *options) { o.dynamic = append(o.dynamic, t) } }

// WithSandboxTool declares an Auto-mode sandbox tool: the server runs it in
// the session's remote sandbox and this client never sees it as its own.
func WithSandboxTool(spec ToolSpec) Option {
	return func(o *options) { o.sandboxTools = append(o.sandboxTools, spec) }
}

// WithSubagentTool declares a remote (server-launched) subagent tool.
func WithSubagentTool(spec SubagentToolSpec) Option {
	return func(o *options) { o.subagentTools = append(o.subagentTools, spec) }
}

// WithHooks sets the loop's hooks.
func WithHooks(h Hooks) Option { return func(o *options) { o.hooks = h } }

// WithCloseHook adds fn to the hooks Close runs before deleting the session.
func WithCloseHook(fn CloseHook) Option {
	return func(o *options) { o.closeHooks = append(o.closeHooks, fn) }
}

// WithOptions bundles several options into one.
func WithOptions(opts ...Option) Option {
	return func(o *options) {
		for _, opt := range opts {
			opt(o)
		}
	}
}

func buildOptions(opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	seen := map[string]bool{}
	for _, t := range slices.Concat(o.tools, o.dynamic) {
		switch {
		case t.Name == "":
			return o, errors.New("bae: tool with an empty name")
		case t.Handler == nil:
			return o, fmt.Errorf("bae: tool %q has no handler", t.Name)
		case seen[t.Name]:
			return o, fmt.Errorf("bae: tool %q registered twice", t.Name)
		}
		seen[t.Name] = true
	}
	for _, t := range o.sandboxTools {
		if t.Name == "" {
			return o, errors.New("bae: sandbox tool with an empty name")
		}
	}
	return o, nil
}

// Session is a live handle on one session, bound to one session key. Its
// methods are safe for concurrent use; concurrent Sends on one Session run
// one after the other (use Join with another client key for a second,
// independent driver).
type Session struct {
	// ID is the session id (ses_…).
	ID string
	// Profile is the sanitized profile returned at open/join (zero after
	// Attach).
	Profile Profile

	key     string
	t       *transport
	hooks   Hooks
	rpcID   atomic.Int64
	sendSem chan struct{} // serializes Send
	// whenBusy is Send's busy policy (WithWhenBusy).
	whenBusy WhenBusy
	// approvals and outcomes opt the streams into approval notifications
	// (WithApprovalHandler, WithApprovalOutcomes).
	approvals ApprovalHandler
	outcomes  func(ctx context.Context, out ApprovalOutcome) error

	mu         sync.Mutex
	handlers   map[string]Tool
	declared   []ToolSpec
	lastEvent  string
	closeHooks []CloseHook // taken by the first Close
	closed     bool
	// seenApprovals are the approval requests already handed to the
	// handler (a Send and a Subscribe may both carry one).
	seenApprovals map[string]bool
}

func newSession(cfg Config, id, key string, profile Profile, o options) *Session {
	s := &Session{
		ID: id, Profile: profile, key: key,
		t: &transport{cfg: cfg}, hooks: o.hooks, closeHooks: o.closeHooks, whenBusy: o.whenBusy,
		approvals: o.approvals, outcomes: o.outcomes,
		sendSem: make(chan struct{}, 1), handlers: map[string]Tool{},
	}
	for _, t := range slices.Concat(o.tools, o.dynamic) {
		s.handlers[t.Name] = t
	}
	s.declared = declarations(o.tools)
	return s
}

func declarations(tools []Tool) []ToolSpec {
	out := make([]ToolSpec, 0, len(tools))
	for _, t := range tools {
		out = append(out, t.Spec())
	}
	return out
}

// openRequest is the body of POST /sessions and /join.
type openRequest struct {
	ClientVersion string             `json:"client_version,omitempty"`
	Tools         []ToolSpec         `json:"tools"`
	SandboxTools  []ToolSpec         `json:"sandbox_tools,omitempty"`
	SubagentTools []SubagentToolSpec `json:"subagent_tools,omitempty"`
}

type openResponse struct {
	SessionID  string  `json:"session_id"`
	SessionKey string  `json:"session_key"`
	Profile    Profile `json:"profile"`
}

// Connect opens a new session with cfg's client key, declaring the tools
// of opts, and registers this client as a driver.
func Connect(ctx context.Context, cfg Config, opts ...Option) (*Session, error) {
	s, err := open(ctx, cfg, "/api/v1/sessions", opts)
	if err != nil {
		return nil, err
	}
	if err := s.RegisterDriver(ctx); err != nil {
		// Nobody else holds this session's key: close it rather than leak
		// an open session.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if cerr := s.deleteSession(cctx); cerr != nil {
			s.Logger().WarnContext(ctx, "bae: close session after failed driver registration", "session_id", s.ID, "err", cerr)
		}
		return nil, err
	}
	return s, nil
}

// Join attaches cfg's client key (which must share the session's profile)
// to an existing session as an additional driver, declaring its own tools.
func Join(ctx context.Context, cfg Config, sessionID string, opts ...Option) (*Session, error) {
	if sessionID == "" {
		return nil, errors.New("bae: Join needs a session id")
	}
	s, err := open(ctx, cfg, "/api/v1/sessions/"+pathEscape(sessionID)+"/join", opts)
	if err != nil {
		return nil, err
	}
	if err := s.RegisterDriver(ctx); err != nil {
		return nil, err // unlike Connect, never close: the session is shared
	}
	return s, nil
}

// Attach returns a Session for a session key obtained earlier (for example
// by another process), without any I/O. It is an observer until
// RegisterDriver is called.
func Attach(cfg Config, sessionID, sessionKey string, opts ...Option) (*Session, error) {
	if sessionID == "" || sessionKey == "" {
		return nil, errors.New("bae: Attach needs a session id and a session key")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return newSession(cfg.normalized(), sessionID, sessionKey, Profile{}, o), nil
}

func open(ctx context.Context, cfg Config, path string, opts []Option) (*Session, error) {
	cfg = cfg.normalized()
	if cfg.ClientKey == "" {
		return nil, fmt.Errorf("bae: no client key (set Config.ClientKey or %s)", EnvClientKey)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	body := openRequest{
		ClientVersion: cfg.ClientVersion,
		Tools:         declarations(o.tools),
		SandboxTools:  o.sandboxTools,
		SubagentTools: o.subagentTools,
	}
	t := &transport{cfg: cfg}
	var resp openResponse
	if err := t.restJSON(ctx, http.MethodPost, path, cfg.ClientKey, body, &resp); err != nil {
		return nil, err
	}
	if resp.SessionID == "" || resp.SessionKey == "" {
		return nil, fmt.Errorf("bae: POST %s: response lacks session_id or session_key", path)
	}
	return newSession(cfg, resp.SessionID, resp.SessionKey, resp.Profile, o), nil
}

func pathEscape(s string) string { return url.PathEscape(s) }

// Key returns the session key (bae_ses_…). Treat it as a secret.
func (s *Session) Key() string { return s.key }

// Logger returns the configured logger.
func (s *Session) Logger() *slog.Logger { return s.t.cfg.Logger }

// LastEventID is the id of the newest event this Session has seen (through
// Send, RPC calls or Subscribe): the since_event_id to resume from.
func (s *Session) LastEventID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastEvent
}

func (s *Session) noteEvent(id string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	s.lastEvent = id
	s.mu.Unlock()
}

// ClientTools returns this client's current tool declarations: those of
// open/join, or of the last successful UpdateClientTools.
func (s *Session) ClientTools() []ToolSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.declared)
}

func (s *Session) handler(name string) (Tool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.handlers[name]
	return t, ok
}

// RegisterDriver registers this client key as a driver
// (session.registerDriver). Connect and Join call it; it is idempotent.
func (s *Session) RegisterDriver(ctx context.Context) error {
	return s.call(ctx, "session.registerDriver", struct{}{}, nil)
}

// Close stops what the builtin tools started (close hooks, newest first,
// run once), then closes the session for every participant (DELETE).
// Errors of the hooks and of the DELETE are joined. After a successful
// Close, Close is a no-op; after a failed DELETE it may be retried.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	hooks := s.closeHooks
	s.closeHooks = nil
	s.mu.Unlock()
	var errs []error
	for _, h := range slices.Backward(hooks) {
		if err := h(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	err := s.deleteSession(ctx)
	if err == nil || IsProblem(err, ProblemSessionClosed) {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
	}
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *Session) deleteSession(ctx context.Context) error {
	return s.t.restJSON(ctx, http.MethodDelete, "/api/v1/sessions/"+pathEscape(s.ID), s.key, nil, nil)
}

// Participants lists the client-key ids currently registered as drivers.
func (s *Session) Participants(ctx context.Context) ([]string, error) {
	var resp struct {
		Drivers []string `json:"drivers"`
	}
	if err := s.t.restJSON(ctx, http.MethodGet, "/api/v1/sessions/"+pathEscape(s.ID)+"/participants", s.key, nil, &resp); err != nil {
		return nil, err
	}
	return resp.Drivers, nil
}

// call runs one non-streaming JSON-RPC method and decodes its result into
// out (when non-nil). Notifications on the way go to the OnEvent hook.
func (s *Session) call(ctx context.Context, method string, params, out any) error {
	raw, err := s.rpc(ctx, method, params)
	if err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("bae: %s: decode result: %w", method, err)
		}
	}
	return nil
}

// rpc sends one request and reads its stream up to the terminal response.
func (s *Session) rpc(ctx context.Context, method string, params any) (json.RawMessage, error) {
	raw, _, err := s.rpcOnce(ctx, method, params, nil, nil)
	return raw, err
}

// rpcOnce is rpc with extra request headers. lost reports a failure after
// which the request may have taken effect unseen but can be sent again
// safely: no response at all, a 5xx problem, or (only when the server echoed
// the request's Idempotency-Key) a stream that broke before its terminal
// response. Notifications whose id is in seen are not handed to OnEvent
// again (a resend relays a turn's events from its start); seen may be nil.
func (s *Session) rpcOnce(ctx context.Context, method string, params any, header http.Header, seen map[string]bool) (_ json.RawMessage, lost bool, _ error) {
	st, err := s.t.openRPC(ctx, s.ID, s.key, rpcRequest{JSONRPC: "2.0", ID: s.rpcID.Add(1), Method: method, Params: params}, header)
	if err != nil {
		var pe *ProblemError
		if errors.As(err, &pe) {
			return nil, pe.Status >= 500, err
		}
		return nil, ctx.Err() == nil, err
	}
	defer st.close()
	resendable := func() bool {
		k := header.Get(IdempotencyHeader)
		return ctx.Err() == nil && k != "" && st.header.Get(IdempotencyHeader) == k
	}
	for {
		f, err := st.next()
		if errors.Is(err, io.EOF) {
			return nil, resendable(), fmt.Errorf("bae: %s: %w", method, ErrNoTerminal)
		}
		if err != nil {
			return nil, resendable(), err
		}
		if f.Error != nil {
			return nil, false, fmt.Errorf("bae: %s: %w", method, f.Error)
		}
		if f.terminal() {
			return f.Result, false, nil
		}
		if f.Method == deltaMethod {
			if s.hooks.OnDelta == nil {
				continue
			}
			var d Delta
			if err := json.Unmarshal(f.Params, &d); err != nil {
				return nil, false, fmt.Errorf("bae: decode %s: %w", deltaMethod, err)
			}
			if err := s.hooks.OnDelta(ctx, d); err != nil {
				return nil, false, &HookError{Hook: "OnDelta", Err: err}
			}
			continue
		}
		if handled, err := s.onApprovalFrame(ctx, f); handled {
			if err != nil {
				return nil, false, err
			}
			continue
		}
		ev, ok, err := f.event()
		if err != nil {
			return nil, false, err
		}
		if !ok {
			continue
		}
		s.noteEvent(ev.ID)
		if seen != nil {
			if seen[ev.ID] {
				continue
			}
			seen[ev.ID] = true
		}
		if s.hooks.OnEvent != nil {
			if err := s.hooks.OnEvent(ctx, ev); err != nil {
				return nil, false, &HookError{Hook: "OnEvent", Err: err}
			}
		}
	}
}

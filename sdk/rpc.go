package sdk

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// EventsQuery selects a page of the event history.
type EventsQuery struct {
	// Cursor is an opaque next_cursor from an earlier page ("" = start).
	Cursor string
	// Limit is the page size (server default 50, maximum 200).
	Limit int
}

// EventPage is one page of GET /events.
type EventPage struct {
	Items []Event
	// NextCursor continues the listing; "" on the last page.
	NextCursor string
}

// EventsPage fetches one page of the session's persisted history, oldest
// first.
func (s *Session) EventsPage(ctx context.Context, q EventsQuery) (EventPage, error) {
	v := url.Values{}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	path := "/api/v1/sessions/" + pathEscape(s.ID) + "/events"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var resp struct {
		Items      []Event `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	if err := s.t.restJSON(ctx, http.MethodGet, path, s.key, nil, &resp); err != nil {
		return EventPage{}, err
	}
	page := EventPage{Items: resp.Items}
	if resp.NextCursor != nil {
		page.NextCursor = *resp.NextCursor
	}
	return page, nil
}

// Events iterates the whole persisted history from q.Cursor on, fetching
// pages of q.Limit as needed. An error ends the iteration.
func (s *Session) Events(ctx context.Context, q EventsQuery) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			page, err := s.EventsPage(ctx, q)
			if err != nil {
				yield(Event{}, err)
				return
			}
			for _, e := range page.Items {
				if !yield(e, nil) {
					return
				}
			}
			// An empty page with a cursor would loop forever on a buggy server.
			if page.NextCursor == "" || len(page.Items) == 0 || page.NextCursor == q.Cursor {
				return
			}
			q.Cursor = page.NextCursor
		}
	}
}

// RemoteSandbox is the result of StartRemoteSandbox.
type RemoteSandbox struct {
	SandboxID string `json:"sandbox_id"`
	Image     string `json:"image"`
	// StartedAt is nil when the server could not log the running event.
	StartedAt *time.Time `json:"started_at"`
}

// RemoteSandboxStopped is the result of StopRemoteSandbox.
type RemoteSandboxStopped struct {
	Stopped   bool   `json:"stopped"`
	Image     string `json:"image"`
	SandboxID string `json:"sandbox_id"`
}

// ExecResult is the outcome of one shell command. A non-zero ExitCode is a
// result, not an error.
type ExecResult struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
}

// StartRemoteSandbox starts the session's one remote sandbox from image,
// which must be in the profile's available_sandboxes.
func (s *Session) StartRemoteSandbox(ctx context.Context, image string) (RemoteSandbox, error) {
	var out RemoteSandbox
	if image == "" {
		return out, errors.New("bae: StartRemoteSandbox needs an image")
	}
	err := s.call(ctx, "session.startRemoteSandbox", map[string]string{"image": image}, &out)
	return out, err
}

// StopRemoteSandbox stops the session's remote sandbox.
func (s *Session) StopRemoteSandbox(ctx context.Context) (RemoteSandboxStopped, error) {
	var out RemoteSandboxStopped
	err := s.call(ctx, "session.stopRemoteSandbox", struct{}{}, &out)
	return out, err
}

// ExecRemoteSandbox runs command in the session's remote sandbox and
// returns its raw result (manual remote dispatch).
func (s *Session) ExecRemoteSandbox(ctx context.Context, command string) (ExecResult, error) {
	var out ExecResult
	err := s.call(ctx, "session.execRemoteSandbox", map[string]string{"command": command}, &out)
	return out, err
}

// SandboxState is a local sandbox lifecycle state.
type SandboxState string

// Local sandbox states.
const (
	SandboxRunning SandboxState = "running"
	SandboxStopped SandboxState = "stopped"
	SandboxFailed  SandboxState = "error"
)

// LocalSandboxReport describes a transition of a sandbox this harness runs.
type LocalSandboxReport struct {
	State SandboxState
	// Image is the container image; ignored when Unsandboxed.
	Image string
	// Unsandboxed marks a command run directly on the harness host: the
	// report then carries image null.
	Unsandboxed bool
	ContainerID string
	Detail      string
}

// ReportLocalSandbox logs a local sandbox transition
// (session.reportLocalSandbox). It is telemetry: the server cannot verify it.
func (s *Session) ReportLocalSandbox(ctx context.Context, r LocalSandboxReport) error {
	params := map[string]any{
		"state":        r.State,
		"image":        nullable(r.Image),
		"container_id": nullable(r.ContainerID),
		"detail":       nullable(r.Detail),
	}
	if r.Unsandboxed {
		params["image"] = nil
		params["unsandboxed"] = true
	}
	return s.call(ctx, "session.reportLocalSandbox", params, nil)
}

// SubagentState is a local subagent lifecycle state.
type SubagentState string

// Local subagent states.
const (
	SubagentStart     SubagentState = "start"
	SubagentRunning   SubagentState = "running"
	SubagentCompleted SubagentState = "completed"
	SubagentFailed    SubagentState = "failed"
	SubagentCancelled SubagentState = "cancelled"
)

// LocalSubagentReport describes a transition of a subagent this harness runs.
type LocalSubagentReport struct {
	State      SubagentState
	SubagentID string
	Harness    string
	Model      string
	Detail     string
	// Reason: nonzero_exit, spawn_failed or timeout (failed); explicit or
	// session_close (cancelled).
	Reason   string
	ExitCode *int
}

// ReportLocalSubagent logs a local subagent transition
// (session.reportLocalSubagent).
func (s *Session) ReportLocalSubagent(ctx context.Context, r LocalSubagentReport) error {
	params := map[string]any{
		"state": r.State, "subagent_id": r.SubagentID, "harness": r.Harness, "model": r.Model,
		"detail": nullable(r.Detail), "reason": nullable(r.Reason), "exit_code": nil,
	}
	if r.ExitCode != nil {
		params["exit_code"] = *r.ExitCode
	}
	return s.call(ctx, "session.reportLocalSubagent", params, nil)
}

// CancelSubagentResult is the result of CancelSubagent.
type CancelSubagentResult struct {
	Cancelled  bool   `json:"cancelled"`
	SubagentID string `json:"subagent_id"`
	WasRunning bool   `json:"was_running"`
}

// CancelSubagent cancels a remote, server-tracked subagent. Local subagents
// are cancelled through tools.LocalSubagents.Cancel.
func (s *Session) CancelSubagent(ctx context.Context, subagentID string) (CancelSubagentResult, error) {
	var out CancelSubagentResult
	err := s.call(ctx, "session.cancelSubagent", map[string]string{"subagent_id": subagentID}, &out)
	return out, err
}

// UpdateClientTools replaces this client's declared tools for the next
// provider call (a full replacement, not a merge). Handlers are not
// touched: a tool declared here must have been registered with WithTool or
// WithDynamicTool to be runnable.
func (s *Session) UpdateClientTools(ctx context.Context, tools []ToolSpec) error {
	if tools == nil {
		tools = []ToolSpec{} // the server rejects null
	}
	if err := s.call(ctx, "session.updateClientTools", map[string]any{"tools": tools}, nil); err != nil {
		return err
	}
	s.mu.Lock()
	s.declared = append([]ToolSpec(nil), tools...)
	s.mu.Unlock()
	return nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Meta is GET /api/v1/meta.
type Meta struct {
	Version     string   `json:"version"`
	APIVersions []string `json:"api_versions"`
}

// ServerMeta fetches the server's version information (no auth needed).
func ServerMeta(ctx context.Context, cfg Config) (Meta, error) {
	var m Meta
	t := &transport{cfg: cfg.normalized()}
	err := t.restJSON(ctx, http.MethodGet, "/api/v1/meta", "", nil, &m)
	return m, err
}

// Package sessiontools serves the RPC methods that act on a session's
// server-side resources outside a turn: the remote sandbox lifecycle and
// remote subagent cancellation. It also releases those resources when a
// session ends.
package sessiontools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// SubagentStopper stops a remote subagent's run in its session workflow.
type SubagentStopper interface {
	CancelSubagent(ctx context.Context, sessionID, subagentID string) error
}

// Service implements api.SessionTools and activities.Cleaner.
type Service struct {
	Store       *store.Store
	Driver      sandbox.Driver
	Provisioner *sandbox.Provisioner
	Engine      SubagentStopper
	Log         *slog.Logger // required
	// Deployment labels containers with the database they belong to.
	Deployment string
	// Config holds the [sandbox] bounds a profile's overrides apply to
	// (nil: the defaults).
	Config *config.File
	// Caps bound the running sandboxes per client key and per profile
	// (its sandbox fields; zero: no bound).
	Caps store.Caps
}

// SandboxAvailability implements api.SessionTools.
func (s *Service) SandboxAvailability(ctx context.Context, p store.Profile) []events.SandboxImage {
	if len(p.AvailableSandboxes) == 0 || s.Provisioner == nil {
		return nil
	}
	out := []events.SandboxImage{}
	for _, st := range s.Provisioner.Images(p.ID, p.AvailableSandboxes) {
		e := events.SandboxImage{Name: st.Name, Status: string(st.Status)}
		if st.Status == "error" {
			e.Detail = st.Detail
		}
		out = append(out, e)
	}
	return out
}

// Call implements api.SessionTools.
func (s *Service) Call(ctx context.Context, sess store.Session, clientKeyID, method string, params json.RawMessage) (any, error) {
	var p map[string]any
	_ = json.Unmarshal(params, &p)
	switch method {
	case "session.startRemoteSandbox":
		return s.start(ctx, sess, clientKeyID, p)
	case "session.stopRemoteSandbox":
		return s.stop(ctx, sess.ID, clientKeyID)
	case "session.execRemoteSandbox":
		return s.exec(ctx, sess.ID, clientKeyID, p)
	case "session.cancelSubagent":
		return s.cancelSubagent(ctx, sess.ID, clientKeyID, p)
	}
	return nil, refuse(RefuseUnknownMethod, method)
}

func (s *Service) event(ctx context.Context, sessionID, clientKeyID string, payload events.Payload) *store.Event {
	evs, err := s.Store.AppendEvents(ctx, sessionID, store.NewEvent{ClientKeyID: clientKeyID, Payload: payload})
	if err != nil {
		s.Log.Error("log sandbox event", "type", payload.EventType(), "err", err)
		return nil
	}
	return &evs[0]
}

func (s *Service) start(ctx context.Context, sess store.Session, clientKeyID string, p map[string]any) (any, error) {
	current, err := s.Store.GetSession(ctx, sess.ID)
	if err != nil {
		return nil, err
	}
	if current.State != store.StateOpen {
		return nil, refuse(RefuseSessionNotOpen, current.State)
	}
	image, _ := p["image"].(string)
	if strings.TrimSpace(image) == "" {
		return nil, refuse(RefuseInvalidParams, `missing "image"`)
	}
	profile, err := s.Store.GetProfile(ctx, sess.ProfileID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, refuse(RefuseProfileUnavailable, "")
	}
	if err != nil {
		return nil, err
	}
	allowed := false
	for _, img := range profile.AvailableSandboxes {
		allowed = allowed || img == image
	}
	if !allowed {
		return nil, refuse(RefuseImageNotAllowed, image)
	}
	// Claim the session's single sandbox slot atomically (replicas race),
	// within the key's and the profile's caps.
	var quota *store.QuotaError
	switch err := s.Store.ClaimSandbox(ctx, sess.ID, sess.ProfileID, store.SandboxState{Image: image, ClientKeyID: clientKeyID}, s.Caps); {
	case errors.Is(err, store.ErrSandboxBusy):
		return nil, refuse(RefuseSandboxAlreadyRunning, "")
	case errors.Is(err, store.ErrClientKeyRevoked):
		return nil, refuse(RefuseClientKeyRevoked, "")
	case errors.As(err, &quota):
		return nil, &RefusedError{Refusal: RefuseQuotaExceeded, Quota: quota}
	case err != nil:
		return nil, err
	}
	// From here on the slot is claimed: its bookkeeping must finish even if
	// the client hangs up, or the placeholder would block the session's
	// sandbox for good. Only the driver calls stay cancellable.
	bg := context.WithoutCancel(ctx)
	s.event(bg, sess.ID, clientKeyID, events.RemoteSandbox{Kind: events.SessionSandboxStart, Image: image})
	policy := s.Config.SandboxPolicy(profile.Sandbox)
	h, serr := s.startContainer(ctx, sess.ID, image, policy)
	if serr != nil {
		if err := s.Store.SetSandbox(bg, sess.ID, nil, false); err != nil {
			s.Log.Error("release sandbox slot", "session_id", sess.ID, "err", err)
		}
		s.event(bg, sess.ID, clientKeyID, events.RemoteSandbox{Kind: events.SessionSandboxError, Image: image, Phase: "start", Detail: serr.Error()})
		return nil, refuse(RefuseSandboxStartFailed, serr.Error())
	}
	state := &store.SandboxState{ID: h.ID, Image: image, ExecTimeoutSecs: int(policy.ExecTimeout / time.Second), ClientKeyID: clientKeyID}
	if err := s.Store.SetSandbox(bg, sess.ID, state, false); err != nil {
		_ = s.Driver.Stop(bg, h.ID)
		_ = s.Store.SetSandbox(bg, sess.ID, nil, false)
		return nil, fmt.Errorf("record sandbox %s: %w", h.ID, err)
	}
	var startedAt any
	if ev := s.event(bg, sess.ID, clientKeyID, events.RemoteSandbox{Kind: events.SessionSandboxRunning, Image: image, SandboxID: h.ID}); ev != nil {
		startedAt = store.FormatTime(ev.CreatedAt)
	}
	return map[string]any{"sandbox_id": h.ID, "image": image, "started_at": startedAt}, nil
}

func (s *Service) startContainer(ctx context.Context, sessionID, image string, policy sandbox.Policy) (sandbox.Handle, error) {
	if s.Driver == nil {
		return sandbox.Handle{}, errors.New("no sandbox driver is configured on this server")
	}
	if err := s.Driver.EnsureImage(ctx, image); err != nil {
		return sandbox.Handle{}, err
	}
	return s.Driver.Start(ctx, image, map[string]string{sandbox.LabelSession: sessionID, sandbox.LabelManaged: "true", sandbox.LabelDeployment: s.Deployment}, policy)
}

// running returns the session's started sandbox or nil.
func (s *Service) running(ctx context.Context, sessionID string) (*store.SandboxState, error) {
	sb, err := s.Store.Sandbox(ctx, sessionID)
	if err != nil || sb == nil || sb.ID == "" {
		return nil, err
	}
	return sb, nil
}

func (s *Service) stop(ctx context.Context, sessionID, clientKeyID string) (any, error) {
	// The handle leaves the state before the driver call, so a stop cut
	// short by a client hang-up would orphan a container nothing tracks.
	res, err := s.StopSandbox(context.WithoutCancel(ctx), sessionID, clientKeyID, "explicit")
	if err != nil {
		return nil, err
	}
	switch {
	case res.notRunning:
		return nil, refuse(RefuseSandboxNotRunning, "")
	case res.failed != "":
		return nil, refuse(RefuseSandboxStopFailed, res.failed)
	}
	return map[string]any{"stopped": true, "image": res.image, "sandbox_id": res.id}, nil
}

type stopResult struct {
	notRunning bool
	image, id  string
	failed     string
}

// StopSandbox is the single stop path shared by stopRemoteSandbox and
// session end. The handle is removed from state before the driver call, so a
// failed stop never leaves a sandbox others could still exec against.
func (s *Service) StopSandbox(ctx context.Context, sessionID, clientKeyID, reason string) (stopResult, error) {
	sb, err := s.running(ctx, sessionID)
	if err != nil {
		return stopResult{}, err
	}
	if sb == nil {
		return stopResult{notRunning: true}, nil
	}
	if err := s.Store.SetSandbox(ctx, sessionID, nil, false); err != nil {
		return stopResult{}, err
	}
	payload := events.RemoteSandbox{Kind: events.SessionSandboxStop, Image: sb.Image, SandboxID: sb.ID, Reason: reason}
	s.event(ctx, sessionID, clientKeyID, payload)
	var derr error
	if s.Driver == nil {
		derr = errors.New("no sandbox driver is configured on this server")
	} else {
		derr = s.Driver.Stop(ctx, sb.ID)
	}
	if derr != nil {
		s.event(ctx, sessionID, clientKeyID, events.RemoteSandbox{Kind: events.SessionSandboxError, Image: sb.Image, SandboxID: sb.ID, Phase: "stop", Detail: derr.Error()})
		return stopResult{image: sb.Image, id: sb.ID, failed: derr.Error()}, nil
	}
	payload.Kind = events.SessionSandboxStopped
	s.event(ctx, sessionID, clientKeyID, payload)
	return stopResult{image: sb.Image, id: sb.ID}, nil
}

func (s *Service) exec(ctx context.Context, sessionID, clientKeyID string, p map[string]any) (any, error) {
	command, ok := p["command"].(string)
	if !ok {
		return nil, refuse(RefuseInvalidParams, `missing "command"`)
	}
	sb, err := s.running(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if sb == nil || s.Driver == nil {
		return nil, refuse(RefuseSandboxNotRunning, "")
	}
	timeout := execTimeout(sb.ExecTimeoutSecs)
	xctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, xerr := s.Driver.Exec(xctx, sb.ID, command, nil)
	if xerr != nil && ctx.Err() == nil && errors.Is(xerr, context.DeadlineExceeded) {
		xerr = fmt.Errorf("timed out after %s; the command was killed", timeout)
	}
	if xerr != nil {
		s.event(ctx, sessionID, clientKeyID, events.RemoteSandbox{Kind: events.SessionSandboxError, Image: sb.Image, SandboxID: sb.ID, Phase: "exec", Detail: xerr.Error()})
		return nil, refuse(RefuseSandboxExecFailed, xerr.Error())
	}
	return map[string]any{"stdout": r.Stdout, "stderr": r.Stderr, "exit_code": r.ExitCode}, nil
}

func (s *Service) cancelSubagent(ctx context.Context, sessionID, clientKeyID string, p map[string]any) (any, error) {
	id, ok := p["subagent_id"].(string)
	if !ok || strings.TrimSpace(id) == "" {
		return nil, refuse(RefuseInvalidParams, `"subagent_id" must be a non-empty string`)
	}
	sa, err := s.Store.GetSubagent(ctx, sessionID, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, refuse(RefuseSubagentNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	wasRunning := false
	if sa.Status == store.SubagentRunning {
		// Recorded first, so the run's own end (which races it) is not.
		ids, err := s.Store.CancelSubagents(ctx, sessionID, id, clientKeyID, "explicit")
		if err != nil {
			return nil, err
		}
		if wasRunning = len(ids) > 0; wasRunning && s.Engine != nil {
			if err := s.Engine.CancelSubagent(ctx, sessionID, id); err != nil {
				return nil, err
			}
		}
	}
	return map[string]any{"cancelled": true, "subagent_id": id, "was_running": wasRunning}, nil
}

// CleanupSession implements activities.Cleaner: cancel running subagents
// and stop the remote sandbox, with reason session_close.
func (s *Service) CleanupSession(ctx context.Context, in workflows.CleanupInput) error {
	if _, err := s.Store.CancelSubagents(ctx, in.SessionID, "", in.ClientKeyID, "session_close"); err != nil {
		return fmt.Errorf("cancel subagents of %s: %w", in.SessionID, err)
	}
	if _, err := s.StopSandbox(ctx, in.SessionID, in.ClientKeyID, "session_close"); err != nil {
		return fmt.Errorf("stop sandbox of %s: %w", in.SessionID, err)
	}
	return nil
}

// execTimeout is a recorded sandbox's exec timeout; 0 (a sandbox started
// before timeouts were recorded) is the default.
func execTimeout(secs int) time.Duration {
	if secs <= 0 {
		return sandbox.DefaultExecTimeout
	}
	return time.Duration(secs) * time.Second
}

// Execer implements activities.SandboxExecer for in-turn Auto-mode tools
// and remote subagents.
type Execer struct{ Driver sandbox.Driver }

// ExecOnce runs req in the sandbox container at most once per req.ID.
func (e Execer) ExecOnce(ctx context.Context, sandboxID string, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = sandbox.DefaultExecTimeout
	}
	req.Timeout = timeout
	return e.Driver.ExecOnce(ctx, sandboxID, req)
}

// CancelExec kills a running exec.
func (e Execer) CancelExec(ctx context.Context, sandboxID, execID string) error {
	return e.Driver.CancelExec(ctx, sandboxID, execID)
}

// ReleaseExec drops a finished exec's recorded output.
func (e Execer) ReleaseExec(ctx context.Context, sandboxID, execID string) error {
	return e.Driver.ReleaseExec(ctx, sandboxID, execID)
}

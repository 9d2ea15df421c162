package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// Engine is the API's view of the session workflows.
type Engine interface {
	// Enqueue puts a stored message's turn in the session's queue, starting
	// the session's workflow if it is not running (a session's workflow
	// starts with its first message). The workflow records the turn's
	// result in the store when the turn ends.
	Enqueue(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput) error
	// SendIdle offers a stored message's turn to the session's workflow
	// as a SendIdle Update, starting the workflow if it is not running,
	// and returns the turn's result. refused says the workflow refused it
	// (the session is busy; the turn did not run); err, that no outcome
	// came back (the turn may or may not run).
	SendIdle(ctx context.Context, ref workflows.SessionRef, in workflows.SendMessageInput) (res workflows.TurnResult, refused bool, err error)
	// AwaitTurn waits for the result of a turn submitted as an Update (by a
	// server from before Enqueue) without submitting it; found is false
	// when the current workflow run has no such Update.
	AwaitTurn(ctx context.Context, sessionID, turnID string) (res workflows.TurnResult, found bool, err error)
	// CloseSession releases the session's waiters and server resources.
	CloseSession(ctx context.Context, ref workflows.SessionRef, in workflows.CloseInput) error
	// Ready reports whether Temporal answers.
	Ready(ctx context.Context) error
	// Interrupt stops the session's running (or paused) turn, or only
	// in.TurnID, and returns once that turn ended.
	Interrupt(ctx context.Context, sessionID string, in workflows.InterruptInput) (workflows.InterruptResult, error)
	// Control reads the session's turn gate (running, queued, paused).
	Control(ctx context.Context, sessionID string) (workflows.ControlView, error)
	// Rewind submits a Rewind update and returns once it is stored or
	// refused; running is false when the session's workflow is not running.
	Rewind(ctx context.Context, sessionID string, in workflows.RewindInput) (res workflows.RewindResult, running bool, err error)
	// DecideApproval decides a held tool call and returns once the
	// decision is stored; a refusal is an *approval.RefusedError.
	DecideApproval(ctx context.Context, sessionID string, in workflows.ApprovalDecisionInput) (workflows.ApprovalDecisionResult, error)
}

// ToolDiscoverer connects a new session's MCP servers and lists their tools,
// each tagged with its server name. Unknown or failing servers are skipped.
type ToolDiscoverer interface {
	DiscoverTools(ctx context.Context, sessionID string, serverNames []string) (json.RawMessage, error)
	// CloseSession drops the session's connections in this process.
	CloseSession(sessionID string)
}

// SessionTools serves the RPC methods that act on server-side session
// resources (remote sandbox and subagents). A nil SessionTools answers those
// methods with an internal error.
type SessionTools interface {
	// Call handles method for a registered driver; it returns the JSON-RPC
	// result or an *RPCError.
	Call(ctx context.Context, sess store.Session, clientKeyID, method string, params json.RawMessage) (any, error)
	// SandboxAvailability lists a profile's images and their status for
	// session.sandbox.available; nil when the profile declares none.
	SandboxAvailability(ctx context.Context, profile store.Profile) []events.SandboxImage
}

// Deps are the API's collaborators.
type Deps struct {
	Store   *store.Store
	Config  *config.File
	Engine  Engine
	Hub     *live.Hub
	Log     *slog.Logger // required
	Version string
	// Metrics records bae.turns.completed; nil records nothing.
	Metrics *telemetry.Metrics
	// Spans allocates the bae.session and bae.turn span refs; nil records
	// nothing.
	Spans *telemetry.Spans

	MCP   ToolDiscoverer
	Tools SessionTools
	// OnProfileWritten runs after a profile is created or replaced
	// (background sandbox image provisioning).
	OnProfileWritten func(store.Profile)
	// MaxBodyBytes bounds request bodies (default 4 MiB).
	MaxBodyBytes int64
	// BodyReadTimeout bounds how long a client-port request body may take
	// to arrive (default DefaultBodyReadTimeout).
	BodyReadTimeout time.Duration
	// AuthFailures per AuthWindow allowed per client address before 429
	// (defaults 30 per minute; negative disables the limit).
	// Each port counts on its own limiter.
	AuthFailures int
	AuthWindow   time.Duration
	// TrustedProxies are the proxies whose X-Forwarded-For names the client
	// address the limiter counts (BAE_TRUSTED_PROXIES); empty ignores the
	// header.
	TrustedProxies []netip.Prefix
	// MaxConcurrentOpens bounds the session opens and joins doing their
	// work at once (BAE_MAX_CONCURRENT_OPENS; 0 = DefaultConcurrentOpens);
	// the rest wait, up to AdmissionWait (default DefaultAdmissionWait),
	// then get 503 server_busy.
	MaxConcurrentOpens int
	AdmissionWait      time.Duration
	// RecheckInterval is how often open streams re-read their
	// authorization without a notification (default DefaultRecheckInterval).
	RecheckInterval time.Duration
	// Caps bound the open sessions and running sandboxes of one client key
	// and one profile (zero fields: no bound).
	Caps store.Caps
	// MaxStreamsPerSession and MaxStreamsPerKey bound the live
	// session.subscribe streams on one session and one client key (0: no
	// bound).
	MaxStreamsPerSession int
	MaxStreamsPerKey     int
	// StreamCounts adds the other replicas' live streams to the caps (nil:
	// this replica's only).
	StreamCounts *StreamCounts

	// IdleUpdate admits a message that finds its session idle with a
	// SendIdle Update instead of an Enqueue signal (BAE_IDLE_UPDATE). Off
	// by default: the chaos campaign lost turns admitted this way when the
	// worker died inside the Update's speculative workflow task (the turn
	// had begun in PostgreSQL, the workflow never recorded it), see
	// docs/design.md.
	IdleUpdate bool

	// SlowInterrupt turns an interrupt's fast path off (stopCall): the
	// interrupt then reaches a running provider call only with the
	// workflow task's heartbeat. For measuring the fast path against its
	// absence (bench/interrupt) and for tests.
	SlowInterrupt atomic.Bool

	// accessReads counts the authorization re-reads of long-lived streams
	// (one database query each), for tests.
	accessReads atomic.Int64
}

// newAuthLimiter builds one port's limiter; nil (no limit) when
// AuthFailures is negative.
func (d *Deps) newAuthLimiter(port string) *authLimiter {
	n, win := d.AuthFailures, d.AuthWindow
	if n < 0 {
		return nil
	}
	if n == 0 {
		n = 30
	}
	if win <= 0 {
		win = time.Minute
	}
	l := newAuthLimiter(n, win)
	if d.Store != nil {
		// Counted across replicas (see authLimiter).
		l.shared = func(ctx context.Context, addr string) (int, time.Duration, error) {
			return d.Store.RecordAuthFailure(ctx, port, addr, win)
		}
	}
	return l
}

func (d *Deps) maxBody() int64 {
	if d.MaxBodyBytes > 0 {
		return d.MaxBodyBytes
	}
	return 4 << 20
}

func (d *Deps) bodyReadTimeout() time.Duration {
	if d.BodyReadTimeout > 0 {
		return d.BodyReadTimeout
	}
	return DefaultBodyReadTimeout
}

// sessionRef addresses a stored session's workflow.
func sessionRef(s store.Session) workflows.SessionRef {
	return workflows.SessionRef{ID: s.ID, ProfileID: s.ProfileID, ClientVersion: s.ClientVersion}
}

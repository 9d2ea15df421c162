// Package activities implements the Session workflow's I/O steps: PostgreSQL
// writes of events and conversation, provider calls, and server-side tool
// dispatch. Every activity is idempotent under retry: events and messages
// carry keys derived from the turn id and the step, so a re-run returns what
// the first run stored instead of appending again.
package activities

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/live"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// MCPCaller calls a tool on one of a session's MCP servers, connecting on
// demand (connections are live-only and per replica).
type MCPCaller interface {
	CallTool(ctx context.Context, sessionID, server, tool string, input json.RawMessage) (json.RawMessage, error)
}

// SandboxExecer runs shell commands (sh -c) in a running remote sandbox,
// each at most once per exec id: a retry with the same id collects the
// first run's outcome (waiting while it runs) instead of starting another.
type SandboxExecer interface {
	ExecOnce(ctx context.Context, sandboxID string, req sandbox.ExecRequest) (sandbox.ExecResult, error)
	// CancelExec kills a running exec (an explicitly cancelled subagent).
	CancelExec(ctx context.Context, sandboxID, execID string) error
	// ReleaseExec drops a finished exec's recorded output once its outcome
	// is stored; the id still never runs again.
	ReleaseExec(ctx context.Context, sandboxID, execID string) error
}

// Cleaner releases a session's live resources when it ends.
type Cleaner interface {
	CleanupSession(ctx context.Context, in workflows.CleanupInput) error
}

// Activities holds the dependencies of every activity.
type Activities struct {
	Store    *store.Store
	Config   *config.File
	Provider *provider.Client
	Log      *slog.Logger // required
	// Lookup resolves ${ENV} tokens at call time.
	Lookup func(string) (string, bool)

	MCP      MCPCaller
	Sandbox  SandboxExecer
	Cleaners []Cleaner
	// SubagentTimeout applies when a declaration sets no timeout_secs.
	SubagentTimeout time.Duration
	// MaxSubagents caps running remote subagents per session (default 8).
	MaxSubagents int

	// DBRetryBudget is how long one activity attempt waits out a database
	// outage before it fails (0 = DefaultDBRetryBudget).
	DBRetryBudget time.Duration

	// Metrics records provider and tool instruments; nil records nothing.
	Metrics *telemetry.Metrics
	// Spans emits the provider, tool and session spans (built from the
	// server's tracer provider); nil records nothing.
	Spans *telemetry.Spans

	// Deltas carries a streamed answer's pieces to clients as they
	// arrive; nil sends none (the answer is still streamed and stored).
	Deltas *live.Deltas

	// work tracks the turns' running activities for interrupts.
	work turnWork
	// calls are the provider calls an interrupt's stop message may end.
	calls callSlots
}

// StopProviderCalls stops the provider calls of sessionID's turnID
// running in this process at once (the fast path of an interrupt, see
// live.StopTurn) and reports how many it stopped. Only attempts of workflows that expect it
// (CallProviderInput.Stoppable) can be stopped; a stop for a turn with no
// call here does nothing.
func (a *Activities) StopProviderCalls(sessionID, turnID string) int {
	n := a.calls.stop(sessionID, turnID)
	if n > 0 {
		a.Log.Debug("interrupt stopped provider call", "session_id", sessionID, "turn_id", turnID, "calls", n)
	}
	return n
}

// Register adds the activities (and the workflow) to a worker.
func (a *Activities) Register(w worker.Worker) {
	w.RegisterWorkflowWithOptions(workflows.Session, workflow.RegisterOptions{Name: workflows.SessionWorkflow})
	workflows.RegisterActivities(w, a)
}

// The compiler holds the activities to the workflow's view of them.
var _ workflows.Activities = (*Activities)(nil)

// logger tags lines with the session (the workflow id) and the turn.
func (a *Activities) logger(ctx context.Context, turnID string) *slog.Logger {
	l := a.Log
	if activity.IsActivity(ctx) {
		info := activity.GetInfo(ctx)
		l = l.With("session_id", info.WorkflowExecution.ID, "activity", info.ActivityType.Name)
	}
	if turnID != "" {
		l = l.With("turn_id", turnID)
	}
	return l
}

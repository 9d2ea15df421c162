package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/bae-go/bae-go/internal/sessionclient"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// closeIdleSessions closes, on every replica until ctx ends, the open
// sessions with no event for ttl (BAE_SESSION_IDLE_TTL; 0 turns it off)
// and no turn in progress: a turn running, queued, or paused for client
// tool results keeps its session open however long it takes
// (store.CloseIdleSession decides under the session lock).
// What it acts on is in PostgreSQL (the log's last event), so a restart or
// another replica picks up where it left: no timer is lost. It is a sweep
// rather than a workflow timer because a session that never had a turn has
// no workflow (an idle session costs Temporal nothing). Closing runs the
// session workflow's cleanup, like DELETE /sessions/{id}: the sandbox is
// stopped and the MCP connections closed.
func closeIdleSessions(ctx context.Context, st *store.Store, eng *sessionclient.Client, ttl time.Duration, log *slog.Logger) {
	if ttl <= 0 {
		return
	}
	t := time.NewTicker(min(max(ttl/4, 100*time.Millisecond), time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		idle, err := st.IdleSessions(ctx, ttl, 100)
		if err != nil && ctx.Err() == nil {
			log.Debug("idle session sweep", "err", err)
		}
		n := 0
		for _, s := range idle {
			closed, err := st.CloseIdleSession(ctx, s.ID, ttl)
			if err != nil {
				log.Warn("could not close an idle session", "session_id", s.ID, "err", err)
				continue
			}
			if !closed {
				continue // used meanwhile, or closed by another replica
			}
			n++
			log.Info("closed an idle session", "session_id", s.ID, "idle_ttl", ttl)
			// The sandbox's stop says session_close, as for any close; the
			// session.close event carries idle_timeout.
			in := workflows.CloseInput{State: store.StateClosed, Reason: "session_close", ClientKeyID: s.ClientKeyID}
			if err := eng.CloseSession(ctx, workflows.SessionRef{ID: s.ID, ProfileID: s.ProfileID}, in); err != nil {
				log.Warn("idle session cleanup", "session_id", s.ID, "err", err)
			}
		}
		log.Debug("idle session sweep done", "idle", len(idle), "closed", n)
	}
}

package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/bae-go/bae-go/internal/sessionclient"
	"github.com/bae-go/bae-go/store"
	"github.com/bae-go/bae-go/workflows"
)

// Orphan sweep timing: a stored message whose turn has not begun after
// orphanAge is enqueued again unless its session's workflow holds it.
// Live submissions reach the workflow within milliseconds, and the workflow
// drops a turn id it already holds, so the sweep never doubles a turn.
const (
	orphanAge      = 5 * time.Second
	orphanInterval = 5 * time.Second
	// orphanQueryWait bounds the question to one workflow: one busy with a
	// provider call answers once the call's workflow task ends.
	orphanQueryWait = 10 * time.Second
)

// sweepOrphans enqueues again messages whose Enqueue signal was lost
// because the server that stored them died before sending it. Messages
// still waiting in a long queue are left alone: the workflow says it holds
// them. It runs on every replica until ctx ends.
func sweepOrphans(ctx context.Context, st *store.Store, eng *sessionclient.Client, log *slog.Logger) {
	t := time.NewTicker(orphanInterval)
	defer t.Stop()
	for {
		orphans, err := st.OrphanTurns(ctx, orphanAge, 100)
		if err != nil && ctx.Err() == nil {
			log.Debug("orphan turn sweep", "err", err)
		}
		views := map[string]*workflows.ControlView{}
		for _, o := range orphans {
			v, asked := views[o.SessionID]
			if !asked {
				qctx, cancel := context.WithTimeout(ctx, orphanQueryWait)
				view, err := eng.Control(qctx, o.SessionID)
				cancel()
				if err == nil {
					v = &view
				}
				views[o.SessionID] = v
			}
			if v == nil || v.Holds(o.TurnID) {
				continue // unknown this round, or still queued
			}
			// Named with what is ahead of it, as its lost signal would
			// have been: a turn begun in a lost workflow task runs first.
			ahead, err := st.TurnsAhead(ctx, o.SessionID, o.TurnID)
			if err != nil {
				log.Debug("orphan turn sweep: read the turns ahead", "turn_id", o.TurnID, "err", err)
				continue
			}
			in := workflows.SendMessageInput{TurnID: o.TurnID, ClientKeyID: o.ClientKeyID, Arrived: o.Arrived.UnixMicro()}
			for _, a := range ahead {
				in.Ahead = append(in.Ahead, workflows.AheadTurn{TurnID: a.TurnID, ClientKeyID: a.ClientKeyID, Arrived: a.Arrived})
			}
			if err := eng.Enqueue(ctx, workflows.SessionRef{ID: o.SessionID, ProfileID: o.ProfileID}, in); err != nil {
				log.Warn("could not enqueue a stored message again", "session_id", o.SessionID, "turn_id", o.TurnID, "err", err)
				continue
			}
			log.Info("enqueued again a stored message whose turn never began", "session_id", o.SessionID, "turn_id", o.TurnID)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
